"""The checkpoint zoo: the ``checkpoints/zoo.json`` manifest, verified checkpoints, publishing.

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
import tempfile
import threading
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass, field, replace
from pathlib import Path, PurePosixPath
from typing import Any

from huggingface_hub import EvalResult, HfApi, ModelCardData, constants
from huggingface_hub import try_to_load_from_cache as _try_to_load_from_cache

from iss.data import reference
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

METHOD_DESCRIPTIONS = {
    "iss-p": "Iterative Soft Shrinkage-Percentage (the paper's method): from random init, every iteration "
    "of the pruning stage ranks each layer's weights by magnitude and multiplies the unimportant fraction "
    "`ratio` by `alpha` instead of zeroing it, so masks keep evolving; the mask is then fixed and the "
    "network fine-tuned.",
    "iss-r": "Iterative Soft Shrinkage-Regularization: the unimportant weights get a growing L2 penalty "
    "during the pruning stage, then are removed and the network fine-tuned.",
    "iht": "Iterative Hard Thresholding: every iteration of the pruning stage zeroes each layer's "
    "unimportant weights (they may grow back), then the mask is fixed and the network fine-tuned.",
    "l1": "One-shot L1-norm (magnitude) pruning of each layer, then fine-tuning of the sparse network.",
    "scratch": "A random mask at the target ratio, fixed from the start, and the sparse network trained "
    "from scratch.",
    "srp": "Structure-regularized pruning (SRP, Zhang et al. 2022), run with unstructured masks as in the "
    "paper.",
    "assl": "Aligned structured sparsity learning (ASSL, Zhang et al. 2021), run with unstructured masks as "
    "in the paper.",
    "dense": "The dense network, trained without pruning (reference).",
}
CITATION = """@inproceedings{wang2023iss,
  title     = {Iterative Soft Shrinkage Learning for Efficient Image Super-Resolution},
  author    = {Wang, Jiamian and Wang, Huan and Zhang, Yulun and Fu, Yun and Tao, Zhiqiang},
  booktitle = {IEEE/CVF International Conference on Computer Vision (ICCV)},
  year      = {2023}
}"""
BENCHMARK_ORDER = ("Set5", "Set14", "B100", "Urban100", "Manga109")
METHOD_ORDER = ("iss-p", "iht", "iss-r", "l1", "srp", "assl", "scratch")  # ISS-P first, then its baselines


def model_card(entries: list[ZooEntry], repo_id: str) -> str:
    """README.md for the zoo repo: front matter, checkpoints, metrics, methods, training budgets, usage."""
    archs = sorted({e.arch for e in entries})
    methods = sorted({e.method for e in entries})
    front = ModelCardData(
        library_name="iss-sr", license="apache-2.0", pipeline_tag="image-to-image", model_name=repo_id,
        tags=["super-resolution", "image-super-resolution", "pruning", "sparse", *archs, *methods],
        eval_results=eval_results(entries) or None,
    ).to_yaml()  # fmt: skip
    sets = [s for s in BENCHMARK_ORDER if any(s in e.metrics for e in entries)]
    sets += sorted({s for e in entries for s in e.metrics} - set(sets))
    lines = [
        f"---\n{front}\n---",
        "# ISS-SR checkpoint zoo",
        "",
        "Sparse image super-resolution networks from *Iterative Soft Shrinkage Learning for Efficient Image "
        "Super-Resolution* (ICCV 2023), trained and published with "
        "ISS-SR (`python -m iss zoo push`). Each file is a safetensors checkpoint holding the "
        "kept weights and their compressed mask; `ratio` is the fraction of each pruned layer's weights "
        "removed.",
        "",
        "## Checkpoints",
        "",
        "| name | arch | scale | method | ratio | file | size | sha256 |",
        "|---|---|---|---|---|---|---|---|",
        *(
            f"| {e.name} | {e.arch} | x{e.scale} | {e.method} | {e.ratio:g} | `{e.file}` "
            f"| {_human_size(e.size_bytes)} | `{e.sha256[:16]}…` |"
            for e in entries
        ),
        "",
        "## Metrics",
        "",
        "PSNR (dB) / SSIM on the Y channel (BT.601), border cropped by the scale, LR by MATLAB bicubic.",
        "",
        "| name | " + " | ".join(sets) + " |",
        "|---|" + "---|" * len(sets),
        *(
            f"| {e.name} | " + " | ".join(_metric_cell(e.metrics.get(s)) for s in sets) + " |"
            for e in entries
        ),
        "",
        "## Methods",
        "",
        *(f"- **{m}**: {METHOD_DESCRIPTIONS.get(m, 'see the ISS-SR documentation.')}" for m in methods),
        "",
        "## Training configuration",
        "",
        "| name | " + " | ".join(_budget_keys(entries)) + " |",
        "|---|" + "---|" * len(_budget_keys(entries)),
        *(
            f"| {e.name} | " + " | ".join(_budget_field(e.budget, k) for k in _budget_keys(entries)) + " |"
            for e in entries
        ),
        "",
        "## Usage",
        "",
        "```python",
        "from iss import checkpoint, zoo",
        f'entry = next(e for e in zoo.load_zoo() if e.name == "{entries[0].name if entries else "..."}")',
        "model, meta = checkpoint.load(zoo.resolve(entry))  # download, check sha256, else bundled copy",
        "```",
        "",
        f"`zoo.json` in this repo ({repo_id}) is the manifest the files were published with. The training "
        "data (T91, BSD200, DIV2K) and the benchmark sets are for academic research only.",
        "",
        "## Citation",
        "",
        "```bibtex",
        CITATION,
        "```",
        "",
    ]
    return "\n".join(lines)


def eval_results(entries: Iterable[ZooEntry]) -> list[EvalResult]:
    """The card's ``model-index``: PSNR and SSIM (Y channel) of every checkpoint on every set it was measured
    on; the metric name says which checkpoint, the dataset which set at which scale."""
    return [
        EvalResult(
            task_type="image-to-image",
            task_name="Image super-resolution",
            dataset_type=name.lower(),
            dataset_name=f"{name} x{e.scale}",
            dataset_config=f"x{e.scale}",
            metric_type=metric,
            metric_value=values[metric],
            metric_name=f"{metric.upper()} (Y) {e.name}",
        )
        for e in entries
        for name, values in e.metrics.items()
        for metric in ("psnr", "ssim")
        if metric in values
    ]


def _metric_cell(values: dict[str, float] | None) -> str:
    """``psnr / ssim`` for the metrics table, or a dash."""
    if not values or "psnr" not in values:
        return "–"
    return f"{values['psnr']:.2f} / {values['ssim']:.4f}" if "ssim" in values else f"{values['psnr']:.2f}"


def _budget_keys(entries: Iterable[ZooEntry]) -> list[str]:
    """Budget fields used by any entry, in first-seen order (``setups`` goes into the device's column)."""
    return list(dict.fromkeys(k for e in entries for k in e.budget if k != "setups"))


def _budget_field(budget: dict[str, Any], key: str) -> str:
    """One budget field as the model card shows it (the device with every way the cell trained)."""
    return _device_text(budget) if key == "device" else str(budget.get(key, ""))


def _human_size(n: int) -> str:
    """A byte count as ``12.3 MB``."""
    size = float(n)
    for unit in ("B", "kB", "MB", "GB"):
        if size < 1000 or unit == "GB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1000
    raise AssertionError("unreachable")


# ----------------------------------------------------------------------------------------------- publishing


def stage_push(manifest: Path, repo_id: str, revision: str, folder: Path) -> list[Path]:
    """Write what ``zoo push`` uploads into ``folder``: the bundled files, README.md and zoo.json."""
    entries = load_zoo(manifest)
    if not entries:
        raise ValueError(f"{manifest}: the zoo has no entries to publish")
    for e in entries:
        if not e.bundled.is_file():
            raise FileNotFoundError(f"checkpoint {e.name}: no bundled file at {e.bundled} to publish")
        verify(e.bundled, e, origin="bundled copy")
    folder.mkdir(parents=True, exist_ok=True)
    for e in entries:
        shutil.copyfile(e.bundled, folder / e.file)
    (folder / "README.md").write_text(model_card(entries, repo_id))
    raw = json.loads(manifest.read_text())
    for item in raw["entries"]:
        item["hub"] = {"repo_id": repo_id, "revision": revision, "filename": item["file"]}
    (folder / "zoo.json").write_text(json.dumps(raw, indent=2) + "\n")
    return sorted(folder / name for name in ["README.md", "zoo.json", *(e.file for e in entries)])


def push_zoo(
    manifest: str | os.PathLike | None,
    repo_id: str,
    *,
    revision: str = "main",
    token: str | None = None,
    endpoint: str | None = None,
    private: bool | None = None,
) -> str:
    """Publish the bundled zoo to ``repo_id`` in one commit, pin the manifest to it; return the commit sha."""
    manifest = Path(manifest) if manifest is not None else DEFAULT_ZOO
    api = HfApi(endpoint=endpoint, token=token)
    with tempfile.TemporaryDirectory(prefix="iss-zoo-push-") as tmp:
        stage_push(manifest, repo_id, revision, Path(tmp))
        api.create_repo(repo_id, repo_type="model", exist_ok=True, private=private)
        if revision != "main":
            api.create_branch(repo_id, branch=revision, exist_ok=True)
        info = api.upload_folder(
            repo_id=repo_id,
            folder_path=tmp,
            revision=revision,
            commit_message="Publish the ISS-SR checkpoint zoo",
        )
    commit = info.oid
    pin_manifest(manifest, repo_id, commit)
    return commit


def pin_manifest(manifest: Path, repo_id: str, commit: str) -> None:
    """Point every entry's ``hub`` at ``repo_id`` at ``commit``, rewriting the manifest atomically."""
    raw = json.loads(manifest.read_text())
    for item in raw["entries"]:
        item["hub"] = {"repo_id": repo_id, "revision": commit, "filename": item["file"]}
    _write_manifest(manifest, raw)


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


def format_table(entries: list[ZooEntry], *, cache_dir: str | os.PathLike | None = None) -> str:
    """The zoo as a text table: name, arch, scale, method, ratio, size, Set5 PSNR, where it is available."""
    header = ("name", "arch", "scale", "method", "ratio", "size", "Set5 PSNR", "local")
    rows = [header] + [
        (e.name, e.arch, f"x{e.scale}", e.method, f"{e.ratio:g}", _human_size(e.size_bytes),
         f"{e.metrics['Set5']['psnr']:.2f}" if "psnr" in e.metrics.get("Set5", {}) else "–",
         _local_status(e, cache_dir))
        for e in entries
    ]  # fmt: skip
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip() for row in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines) if entries else "(the zoo is empty)"


def markdown_table(entries: list[ZooEntry]) -> str:
    """The zoo in full (``docs/zoo.md``): per (arch, scale, ratio) group, each entry's PSNR/SSIM and training
    budget, then bicubic (``iss.data.reference``) and the paper's numbers for those cells."""
    paper = reference.paper_results()["rows"]
    sets = [s for s in BENCHMARK_ORDER if any(s in e.metrics for e in entries)]
    lines = []
    for key in dict.fromkeys((e.arch, e.scale, e.ratio) for e in entries):
        arch, scale, ratio = key
        group = [e for e in entries if (e.arch, e.scale, e.ratio) == key]
        lines += [
            f"**{arch} x{scale}, ratio {ratio:g}** (PSNR/SSIM on Y)",
            "",
            "| method | " + " | ".join(sets) + " | budget |",
            "|---|" + "---|" * (len(sets) + 1),
        ]
        for e in group:
            cells = " | ".join(_metric_cell(e.metrics.get(s)).replace(" / ", "/") for s in sets)
            lines.append(f"| {e.method} | {cells} | {_budget_text(e.budget)} |")
        if values := reference.bicubic_results(scale):
            lines.append(
                "| bicubic | "
                + " | ".join(_metric_cell(values.get(s)).replace(" / ", "/") for s in sets)
                + " | |"
            )
        methods = {e.method for e in group}
        for row in paper:
            if (row["arch"], row["scale"], row["ratio"], row["method"] in methods) == (
                arch,
                scale,
                ratio,
                True,
            ):
                cells = " | ".join(_metric_cell(row["metrics"].get(s)).replace(" / ", "/") for s in sets)
                lines.append(f"| paper {row['method']} (table {row['table']}) | {cells} | official |")
        lines.append("")
    return "\n".join(lines).rstrip()


def overview_table(entries: list[ZooEntry], sets: tuple[str, str] = ("Set5", "Urban100")) -> str:
    """The README's zoo at a glance: one row per cell (backbone, scale, ratio) with PSNR on ``sets`` for
    bicubic and each method, and under it a row with the paper's numbers for the same cell. Where a row's
    methods trained for different numbers of iterations, each says its own (``36.10 / 28.20 (60k it)``), so
    that no one reads a longer budget as a better method."""
    paper = reference.paper_results()["rows"]
    order = {m: i for i, m in enumerate(METHOD_ORDER)}
    methods = sorted({e.method for e in entries}, key=lambda m: (order.get(m, len(order)), m))
    lines = [
        "| cell | bicubic | " + " | ".join(methods) + " |",
        "|---|---|" + "---|" * len(methods),
    ]
    for cell in sorted({(e.arch, e.scale, e.ratio) for e in entries}):
        group = {e.method: e for e in entries if (e.arch, e.scale, e.ratio) == cell}
        mixed = len({e.budget.get("iterations") for e in group.values()}) > 1
        theirs = {r["method"]: r["metrics"] for r in paper if (r["arch"], r["scale"], r["ratio"]) == cell}
        bicubic = reference.bicubic_results(cell[1])
        row = [f"{cell[0]} x{cell[1]} r{cell[2]:g}", _psnrs(bicubic, sets)]
        for m in methods:
            entry = group.get(m)
            its = entry.budget.get("iterations") if entry and mixed else None
            budget = f" ({_short(its)} it)" if its else ""
            row.append(_psnrs(entry.metrics if entry else None, sets) + budget)
        lines.append("| " + " | ".join(row) + " |")
        if theirs:
            row = ["*paper*", "", *(f"*{_psnrs(theirs[m], sets)}*" if m in theirs else "" for m in methods)]
            lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines)


def _short(count: int) -> str:
    """``60k`` for 60,000, ``1,300`` for 1,300."""
    return f"{count // 1000}k" if count % 1000 == 0 else f"{count:,}"


def _psnrs(metrics: dict[str, Any] | None, sets: tuple[str, ...]) -> str:
    """``28.79 / 23.42``: PSNR on each of ``sets``, ``–`` where missing."""
    if not metrics:
        return "–"
    return " / ".join(f"{metrics[s]['psnr']:.2f}" if "psnr" in metrics.get(s, {}) else "–" for s in sets)


def _budget_text(budget: dict[str, Any]) -> str:
    """``12,000 it (K_p 6,000), batch 4, patch 16; cpu: ..., 130 min`` (pruner options after K_p)."""
    text = f"{budget.get('iterations', 0):,} it (K_p {budget.get('prune_iters', 0):,}), "
    options = budget.get("pruner_options") or {}
    text += "".join(
        f"{k.replace('_', ' ')} {f'{v:,}' if isinstance(v, int) else v}, " for k, v in options.items()
    )
    text += f"batch {budget.get('batch')}, patch {budget.get('patch')}; {_device_text(budget)}"
    if "train_minutes" in budget:
        text += f", {budget['train_minutes']:g} min"
    return text


def _device_text(budget: dict[str, Any]) -> str:
    """The device, or each way the cell trained when it changed: ``cpu: ... (1 threads) beside 1 other cell
    to 1,741, then cpu: ... (2 threads)``."""
    setups = budget.get("setups") or []
    if len(setups) < 2:
        return str(budget.get("device", "?"))
    parts = []
    for setup, following in zip(setups, [*setups[1:], None], strict=True):
        beside = setup["jobs"] - 1
        parts.append(
            setup["device"]
            + (f" beside {beside} other cell{'s' * (beside > 1)}" if beside else "")
            + (f" to {following['from']:,}" if following else "")
        )
    return ", then ".join(parts)


def _local_status(entry: ZooEntry, cache_dir: str | os.PathLike | None) -> str:
    """``bundled``, ``cached``, both, or ``no``: where a copy exists without the network (not verified)."""
    where = ["bundled"] if entry.bundled.is_file() else []
    if entry.hub is not None:
        cached = _try_to_load_from_cache(
            entry.hub.repo_id, entry.hub.filename, cache_dir=cache_dir, revision=entry.hub.revision
        )
        if isinstance(cached, str):
            where.append("cached")
    return "+".join(where) or "no"
