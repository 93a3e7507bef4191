"""The checkpoint zoo: the ``checkpoints/zoo.json`` manifest and verified checkpoints.

* :func:`load_zoo` reads and validates the manifest; :func:`resolve` turns an entry into a verified local
  file: the Hub copy when it can be downloaded (through :mod:`iss.hub`), else the bundled
  ``checkpoints/<file>`` (with a logged warning saying why). A file whose sha256 differs from the manifest is
  never returned: a bad Hub copy is moved out of the Hub cache (so the next resolve downloads it again) and
  the bundled copy used instead; a bad bundled copy raises ``ValueError``. :func:`locate_all` resolves many
  entries at once under one deadline, so a slow Hub costs at most that long in total.
* ``python -m iss zoo list|fetch|push|upgrade``: print the zoo, resolve every entry, publish the bundled zoo
  with a model card and pin the manifest to the new commit, or re-save the bundled files in the current
  checkpoint format and record their new sha256 and size.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass, field, replace
from pathlib import Path, PurePosixPath
from typing import Any

from huggingface_hub import constants

from iss.hub import DOWNLOAD_ERRORS, describe_error, download, hub_offline, sha256_of, unreachable

log = logging.getLogger(__name__)

DEFAULT_ZOO = Path("checkpoints", "zoo.json")  # a source checkout's bundled zoo; commands run at its root
DEFAULT_HUB_REPO = (
    "iss-sr/zoo"  # where ``zoo push`` publishes unless told otherwise; entries start at ``main``
)
_SHA256 = re.compile(r"[0-9a-f]{64}")
_UNREACHABLE_SAID = threading.Event()  # set once "the Hub is unreachable" has been logged in this process

# ----------------------------------------------------------------------------------------------- zoo manifest


@dataclass(frozen=True)
class HubRef:
    """Where an entry lives on the Hub: a model repo, a pinned revision (ideally a commit sha) and a file."""

    repo_id: str
    revision: str
    filename: str


@dataclass
class ZooEntry:
    """One entry of ``checkpoints/zoo.json`` (fields as in the manifest); ``root`` has the bundled copy."""

    name: str
    arch: str
    scale: int
    method: str
    ratio: float
    file: str
    sha256: str
    size_bytes: int
    hub: HubRef | None
    budget: dict[str, Any] = field(default_factory=dict)
    metrics: dict[str, dict[str, float]] = field(default_factory=dict)
    root: Path = DEFAULT_ZOO.parent

    @property
    def bundled(self) -> Path:
        """Path of the bundled copy (which may be absent)."""
        return self.root / self.file


@dataclass(frozen=True)
class Resolved:
    """A verified checkpoint file and where it came from (``"hub"`` or ``"bundled"``, with the reason)."""

    path: Path
    source: str
    detail: str
    refused: str = ""  # why a Hub copy was refused (corrupt or tampered), when one was


def load_zoo(path: str | os.PathLike | None = None) -> list[ZooEntry]:
    """Read and validate a zoo manifest (default ``checkpoints/zoo.json``); errors name entry and field."""
    path = Path(path) if path is not None else DEFAULT_ZOO
    if not path.is_file():
        raise FileNotFoundError(f"no zoo manifest at {path}")
    try:
        raw = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ValueError(f"{path}: not valid JSON ({e})") from e
    if not isinstance(raw, dict) or raw.get("version") != 1 or not isinstance(raw.get("entries"), list):
        raise ValueError(f'{path}: expected {{"version": 1, "entries": [...]}}')
    entries = [_parse_entry(item, f"{path}: entry {i}", path.parent) for i, item in enumerate(raw["entries"])]
    names = [e.name for e in entries]
    if dupes := sorted({n for n in names if names.count(n) > 1}):
        raise ValueError(f"{path}: duplicate entry names {dupes}")
    return entries


def _parse_entry(item: Any, where: str, root: Path) -> ZooEntry:
    """One validated :class:`ZooEntry` from its manifest dict."""
    if not isinstance(item, dict):
        raise ValueError(f"{where}: expected an object, got {type(item).__name__}")
    where = f"{where} ({item.get('name', '?')})"
    types = {"name": str, "arch": str, "scale": int, "method": str, "ratio": (int, float), "file": str,
             "sha256": str, "size_bytes": int}  # fmt: skip
    for key, kind in types.items():
        if key not in item:
            raise ValueError(f"{where}: missing field {key!r}")
        if not isinstance(item[key], kind) or isinstance(item[key], bool):
            raise ValueError(f"{where}: field {key!r} has the wrong type ({item[key]!r})")
    if item["scale"] not in (2, 3, 4):
        raise ValueError(f"{where}: 'scale' must be 2, 3 or 4, got {item['scale']}")
    if not 0 <= item["ratio"] < 1:
        raise ValueError(f"{where}: 'ratio' must be in [0, 1), got {item['ratio']}")
    if not _SHA256.fullmatch(item["sha256"]):
        raise ValueError(f"{where}: 'sha256' must be 64 lowercase hex digits, got {item['sha256']!r}")
    if item["size_bytes"] < 0:
        raise ValueError(f"{where}: 'size_bytes' must be >= 0")
    if not _is_plain_relative(item["file"]) or "/" in item["file"]:
        raise ValueError(f"{where}: 'file' must be a plain file name, got {item['file']!r}")
    for key in ("budget", "metrics"):
        if not isinstance(item.get(key, {}), dict):
            raise ValueError(f"{where}: {key!r} must be an object")
    for set_name, values in item.get("metrics", {}).items():
        if not isinstance(values, dict) or not all(isinstance(v, (int, float)) for v in values.values()):
            raise ValueError(f"{where}: metrics[{set_name!r}] must map metric names to numbers")
    return ZooEntry(
        name=item["name"], arch=item["arch"], scale=item["scale"], method=item["method"],
        ratio=float(item["ratio"]), file=item["file"], sha256=item["sha256"], size_bytes=item["size_bytes"],
        hub=_parse_hub(item.get("hub"), where), budget=dict(item.get("budget", {})),
        metrics={k: dict(v) for k, v in item.get("metrics", {}).items()}, root=root,
    )  # fmt: skip


def _parse_hub(hub: Any, where: str) -> HubRef | None:
    """The entry's Hub location (``None`` when the manifest has none yet)."""
    if hub is None:
        return None
    if not isinstance(hub, dict) or not all(
        isinstance(hub.get(k), str) and hub[k] for k in HubRef.__annotations__
    ):
        raise ValueError(f"{where}: 'hub' must be an object with string repo_id, revision and filename")
    if hub["repo_id"].count("/") != 1 or not _is_plain_relative(hub["repo_id"]):
        raise ValueError(f"{where}: hub.repo_id must look like 'org/name', got {hub['repo_id']!r}")
    if not _is_plain_relative(hub["filename"]):
        raise ValueError(f"{where}: hub.filename must be a relative path, got {hub['filename']!r}")
    return HubRef(repo_id=hub["repo_id"], revision=hub["revision"], filename=hub["filename"])


def merge_entries(
    manifest: Path, entries: list[dict[str, Any]], *, force: bool = False, log: Any = print
) -> list[str]:
    """Add ``entries`` to ``manifest`` (a file is created if missing), replacing same-named ones; returns the
    names merged. An entry trained on another kind of device (CPU or GPU) than the one it would replace does
    so only where it scores higher on both ``DECIDING_SETS``, since the two budgets differ too much for the
    newer to be the better; otherwise the old entry stays and ``log`` says why. ``force`` replaces anyway."""
    raw = json.loads(manifest.read_text()) if manifest.is_file() else {"version": 1, "entries": []}
    for i, item in enumerate(entries):
        _parse_entry(item, f"new entry {i}", manifest.parent)
    by_name = {item["name"]: item for item in raw["entries"]}
    merged = []
    for item in entries:
        old = by_name.get(item["name"])
        if old is not None and not force and _on_cpu(item) != _on_cpu(old) and not _scores_higher(item, old):
            log(
                f"{item['name']}: kept the entry trained on {old['budget'].get('device')} "
                f"({_deciding(old)}) over this one ({_deciding(item)}): it must score higher on "
                f"{' and '.join(DECIDING_SETS)}; pass --force to replace it anyway"
            )  # fmt: skip
            continue
        by_name[item["name"]] = item
        merged.append(item["name"])
    raw["entries"] = list(by_name.values())
    _write_manifest(manifest, raw)
    load_zoo(manifest)  # the result must still be a valid manifest
    return merged


DECIDING_SETS = ("Set5", "Urban100")  # where a CPU- and a GPU-trained cell of the same name are compared


def _scores_higher(new: dict[str, Any], old: dict[str, Any]) -> bool:
    """Whether ``new`` has a higher PSNR than ``old`` on every deciding set (False where one is missing)."""

    def psnr(entry: dict[str, Any], name: str) -> float | None:
        return entry.get("metrics", {}).get(name, {}).get("psnr")

    pairs = [(psnr(new, name), psnr(old, name)) for name in DECIDING_SETS]
    return all(a is not None and b is not None and a > b for a, b in pairs)


def _deciding(item: dict[str, Any]) -> str:
    """``Set5 30.25, Urban100 24.21``: the deciding sets' PSNR of an entry."""
    metrics = item.get("metrics", {})
    return ", ".join(f"{s} {metrics[s]['psnr']:.2f}" if s in metrics else f"{s} -" for s in DECIDING_SETS)


def _on_cpu(item: dict[str, Any]) -> bool:
    return str(item.get("budget", {}).get("device", "cpu")).startswith("cpu")


def _is_plain_relative(name: str) -> bool:
    """Whether ``name`` is a non-empty relative POSIX path without ``..`` or backslashes."""
    return (
        bool(name) and not name.startswith("/") and "\\" not in name and ".." not in PurePosixPath(name).parts
    )


# ----------------------------------------------------------------------------------------------- resolving


def resolve(entry: ZooEntry, **options: Any) -> Path:
    """Local path of ``entry``'s checkpoint, sha256-verified (keyword options: :func:`locate`)."""
    return locate(entry, **options).path


def locate(
    entry: ZooEntry,
    *,
    local_dir: str | os.PathLike | None = None,
    offline: bool | None = None,
    timeout: float | None = None,
    cache_dir: str | os.PathLike | None = None,
    endpoint: str | None = None,
    token: str | None = None,
    warn: bool = True,
) -> Resolved:
    """Download ``entry`` from the Hub (or its cache), else fall back to the bundled copy, and verify it.

    ``local_dir`` is the folder of bundled copies (default: the manifest's folder); ``offline`` defaults to
    ``HF_HUB_OFFLINE``; ``timeout`` bounds the wait for the Hub (default ``HF_HUB_ETAG_TIMEOUT``, 10 s); the
    body transfer follows ``HF_HUB_DOWNLOAD_TIMEOUT``. A Hub copy whose size or sha256 differs from the
    manifest is moved out of the Hub cache and the bundled copy used (a logged warning says why, unless
    ``warn`` is False). An unreachable Hub is logged once per process, offline mode (``HF_HUB_OFFLINE`` or
    ``offline=True``) not at all: the bundled copies are then what the user asked for. Raises
    ``ValueError`` when the bundled copy differs too, ``FileNotFoundError`` (with
    the reason) when there is no good copy at all.
    """
    if entry.hub is None:
        reason = "the manifest names no Hub location"
    else:
        hub = entry.hub
        try:
            path = download(
                hub.repo_id, hub.filename, repo_type="model", revision=hub.revision, cache_dir=cache_dir,
                endpoint=endpoint, offline=offline, timeout=timeout, token=token,
            )  # fmt: skip
        except DOWNLOAD_ERRORS as e:
            reason = f"Hub download failed: {describe_error(e)}"  # the same words for every entry
            if hub_offline() if offline is None else offline:
                warn = False
            elif warn and unreachable(e):
                _say_unreachable(describe_error(e))
                warn = False
        else:
            try:
                verify(path, entry, origin=f"downloaded from {hub.repo_id}@{hub.revision}")
                return Resolved(path, "hub", f"{hub.repo_id}@{hub.revision}")
            except ValueError as e:  # a corrupt or tampered download: refused, and moved aside
                reason = str(e).removeprefix(f"refusing checkpoint {entry.name}: ")
                reason = f"{reason}; {_quarantine(path, entry)}"
                return replace(_bundled(entry, reason, local_dir, warn), refused=reason)
    return _bundled(entry, reason, local_dir, warn)


def _say_unreachable(reason: str) -> None:
    """Log, the first time in this process only, that the Hub cannot be reached and bundled copies serve."""
    if not _UNREACHABLE_SAID.is_set():
        _UNREACHABLE_SAID.set()
        log.warning(
            "the Hugging Face Hub is unreachable (%s); using the bundled checkpoints "
            "(set HF_HUB_OFFLINE=1 to skip the Hub)", reason,
        )  # fmt: skip


def locate_all(
    entries: Sequence[ZooEntry], *, timeout: float | None = None, **options: Any
) -> list[Resolved | Exception]:
    """:func:`locate` every entry concurrently, all within one deadline of ``timeout`` seconds (default
    ``HF_HUB_ETAG_TIMEOUT``, 10 s): an entry the Hub has not delivered by then gets its bundled copy. Each
    result is the ``Resolved`` or the exception ``locate`` raised for that entry."""
    timeout = constants.HF_HUB_ETAG_TIMEOUT if timeout is None else timeout
    pool = ThreadPoolExecutor(max_workers=max(1, len(entries)), thread_name_prefix="iss-zoo")
    futures = [pool.submit(locate, entry, timeout=timeout, warn=False, **options) for entry in entries]
    wait(futures, timeout=timeout)
    pool.shutdown(wait=False)  # a download still running finishes in the background, unused
    found = [
        (future.exception() or future.result()) if future.done() else _late(entry, timeout, options)
        for entry, future in zip(entries, futures, strict=True)
    ]
    offline = options.get("offline")
    if not (hub_offline() if offline is None else offline):  # offline: the bundled copies were asked for
        _warn_fallbacks(entries, found)
    return found


def _warn_fallbacks(entries: Sequence[ZooEntry], found: Sequence[Resolved | Exception]) -> None:
    """One logged warning per distinct reason for using bundled copies (an unreachable Hub: one line, not
    one per checkpoint)."""
    reasons: dict[str, list[str]] = {}
    for entry, result in zip(entries, found, strict=True):
        if isinstance(result, Resolved) and result.source == "bundled":
            reasons.setdefault(result.detail, []).append(entry.name)
    for reason, names in reasons.items():
        if len(names) == 1:
            log.warning("checkpoint %s: %s; using the bundled copy", names[0], reason)
        else:
            log.warning("%d checkpoints: %s; using the bundled copies", len(names), reason)


def _late(entry: ZooEntry, timeout: float, options: dict[str, Any]) -> Resolved | Exception:
    """The bundled copy of an entry the Hub did not deliver in time, or the error saying why there is none."""
    try:
        reason = f"the Hub did not deliver it within {timeout:g} s"
        return _bundled(entry, reason, options.get("local_dir"), warn=False)
    except (FileNotFoundError, ValueError) as e:
        return e


def _bundled(
    entry: ZooEntry, reason: str, local_dir: str | os.PathLike | None, warn: bool = True
) -> Resolved:
    """The verified bundled copy of ``entry``, used because of ``reason`` (a logged warning if ``warn``)."""
    bundled = Path(local_dir) / entry.file if local_dir is not None else entry.bundled
    if not bundled.is_file():
        raise FileNotFoundError(
            f"checkpoint {entry.name} is unavailable: {reason}, and there is no bundled copy at {bundled}"
        )  # fmt: skip
    if warn:
        log.warning("checkpoint %s: %s; using the bundled copy %s", entry.name, reason, bundled)
    verify(bundled, entry, origin="bundled copy")
    return Resolved(bundled, "bundled", reason)


def _quarantine(path: Path, entry: ZooEntry) -> str:
    """Move a refused Hub copy out of the Hub cache, so the next resolve downloads it again; says where."""
    from iss.data import cache_dir  # lazy: only on this rare path (it imports torch)

    target = cache_dir() / "quarantine" / entry.file
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.move(path.resolve(), target)  # the blob the cache's snapshot link points to
        path.unlink(missing_ok=True)  # the link itself
    except OSError as e:
        return f"it could not be moved out of the Hub cache ({e})"
    return f"moved it out of the Hub cache to {target}"


def verify(path: str | os.PathLike, entry: ZooEntry, *, origin: str = "file") -> None:
    """Raise ``ValueError`` unless ``path`` has the size and sha256 the manifest records for ``entry``."""
    path = Path(path)
    size = path.stat().st_size
    if size != entry.size_bytes:
        raise ValueError(
            f"refusing checkpoint {entry.name}: {origin} {path} has {size} bytes, the manifest says "
            f"{entry.size_bytes}; it is corrupt or was changed"
        )  # fmt: skip
    digest = sha256_of(path)
    if digest != entry.sha256:
        raise ValueError(
            f"refusing checkpoint {entry.name}: sha256 of {origin} {path} is {digest}, the manifest says "
            f"{entry.sha256}; it is corrupt or was tampered with (or re-trained: then fix the manifest)"
        )  # fmt: skip


# ----------------------------------------------------------------------------------------------- model card

BENCHMARK_ORDER = ("Set5", "Set14", "B100", "Urban100", "Manga109")
METHOD_ORDER = ("iss-p", "iht", "iss-r", "l1", "srp", "assl", "scratch")  # ISS-P first, then its baselines


# ----------------------------------------------------------------------------------------------- publishing


def _write_manifest(manifest: Path, raw: dict[str, Any]) -> None:
    """Write a manifest's JSON atomically."""
    tmp = manifest.with_name(manifest.name + ".tmp")
    tmp.write_text(json.dumps(raw, indent=2) + "\n")
    os.replace(tmp, manifest)


def upgrade_bundled(manifest: str | os.PathLike | None = None) -> list[str]:
    """Re-save every bundled checkpoint in the current checkpoint format (``iss.checkpoint.upgrade``: same
    tensors) and record its new sha256 and size in the manifest; returns the names rewritten.

    Each file is first checked against the manifest, so only the published bytes are upgraded; a second run
    changes nothing. Published Hub copies then differ from the manifest until ``zoo push`` runs again.
    """
    from iss import checkpoint  # lazy: torch is only needed here

    manifest = Path(manifest) if manifest is not None else DEFAULT_ZOO
    raw = json.loads(manifest.read_text())
    upgraded = []
    for entry, item in zip(load_zoo(manifest), raw["entries"], strict=True):
        verify(entry.bundled, entry, origin="bundled copy")
        if checkpoint.upgrade(entry.bundled):
            item.update(sha256=sha256_of(entry.bundled), size_bytes=entry.bundled.stat().st_size)
            _write_manifest(manifest, raw)  # after each file: an interrupted run leaves no stale entry behind
            upgraded.append(entry.name)
    return upgraded
