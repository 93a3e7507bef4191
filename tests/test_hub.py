"""iss.hub, fully offline: a hand-built Hub cache, and a local HTTP server standing in for the Hub.

Nothing here may reach huggingface.co: every test runs with the Hub cache, HF_HOME and tokens in tmp_path,
the default endpoint pointing at a closed local port, and name resolution refused for any non-loopback host.
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
import socket
import tarfile
import time
from pathlib import Path

import numpy as np
import pytest
from fakehub import FakeHub
from huggingface_hub import constants, metadata_load
from PIL import Image

from iss import cli, hub

COMMIT = "0123456789abcdef0123456789abcdef01234567"
REPO = "iss-sr/zoo"


# ------------------------------------------------------------------------------------------------- isolation


def _closed_port_url() -> str:
    """A local URL nothing listens on: connecting to it is refused at once."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}"


@pytest.fixture(autouse=True)
def isolated_hub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Hub cache, HF_HOME and tokens in tmp_path; default endpoint dead; only loopback hosts resolvable.

    huggingface_hub reads its environment at import, so the module constants it reads at call time are
    patched too (ENDPOINT together with the URL template derived from it).
    """
    dead = _closed_port_url()
    cache = tmp_path / "hf-cache"
    for key in (
        "HF_HUB_OFFLINE",
        "TRANSFORMERS_OFFLINE",
        "HF_TOKEN",
        "HUGGING_FACE_HUB_TOKEN",
        "HF_HUB_ETAG_TIMEOUT",
    ):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.setenv("HF_ENDPOINT", dead)
    monkeypatch.setenv("ISS_CACHE_DIR", str(tmp_path / "iss-cache"))
    monkeypatch.setattr(constants, "ENDPOINT", dead)
    monkeypatch.setattr(
        constants, "HUGGINGFACE_CO_URL_TEMPLATE", dead + "/{repo_id}/resolve/{revision}/{filename}"
    )
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(constants, "HF_TOKEN_PATH", str(tmp_path / "hf-home" / "token"))
    monkeypatch.setattr(constants, "HF_STORED_TOKENS_PATH", str(tmp_path / "hf-home" / "stored_tokens"))
    real_getaddrinfo = socket.getaddrinfo

    def loopback_only(host, *args, **kwargs):  # type: ignore[no-untyped-def]
        if host not in ("127.0.0.1", "localhost", "::1"):
            raise OSError(f"test tried to reach {host!r}: the network is off limits")
        return real_getaddrinfo(host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", loopback_only)
    return cache


@pytest.fixture
def fakehub():
    with FakeHub() as server:
        yield server


@pytest.fixture
def offline(monkeypatch: pytest.MonkeyPatch) -> None:
    """HF_HUB_OFFLINE=1, both in the environment and in the constant huggingface_hub read at import."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)


# -------------------------------------------------------------------------------------------------- builders


def cache_put(cache: Path, repo_id: str, path: str, data: bytes, *, repo_type: str = "model") -> Path:
    """Put a file into a hand-built Hub cache (refs/main -> snapshots/<commit>/<path> -> blobs/<sha256>)."""
    repo = cache / f"{repo_type}s--{repo_id.replace('/', '--')}"
    blob = repo / "blobs" / hashlib.sha256(data).hexdigest()
    blob.parent.mkdir(parents=True, exist_ok=True)
    blob.write_bytes(data)
    (repo / "refs").mkdir(exist_ok=True)
    (repo / "refs" / "main").write_text(COMMIT)
    pointer = repo / "snapshots" / COMMIT / path
    pointer.parent.mkdir(parents=True, exist_ok=True)
    pointer.symlink_to(blob)
    return pointer


def make_zoo(
    folder: Path, files: dict[str, bytes], *, revision: str = "main", hub_section: bool = True
) -> Path:
    """A tiny zoo.json (schema of the team brief) with one bundled file per entry; returns the manifest."""
    folder.mkdir(parents=True, exist_ok=True)
    entries = []
    for i, (name, data) in enumerate(files.items()):
        (folder / f"{name}.safetensors").write_bytes(data)
        hub_ref = {"repo_id": REPO, "revision": revision, "filename": f"{name}.safetensors"}
        entries.append(
            {
                "name": name,
                "arch": "swinir-light",
                "scale": 4,
                "method": ["iss-p", "iht"][i % 2],
                "ratio": 0.95,
                "file": f"{name}.safetensors",
                "sha256": hashlib.sha256(data).hexdigest(),
                "size_bytes": len(data),
                "hub": hub_ref if hub_section else None,
                "budget": {
                    "iterations": 100,
                    "prune_iters": 50,
                    "batch": 4,
                    "patch": 16,
                    "data": "T91",
                    "device": "cpu",
                    "seed": 0,
                },
                "metrics": {
                    "Set5": {"psnr": 30.12 + i, "ssim": 0.8765},
                    "Urban100": {"psnr": 24.5, "ssim": 0.71},
                },
            }
        )
    manifest = folder / "zoo.json"
    manifest.write_text(json.dumps({"version": 1, "entries": entries}, indent=2))
    return manifest


def png_bytes(seed: int, size: tuple[int, int] = (12, 10)) -> bytes:
    """A small random RGB PNG."""
    rng = np.random.default_rng(seed)
    buf = io.BytesIO()
    Image.fromarray(rng.integers(0, 256, (*size, 3), dtype=np.uint8)).save(buf, format="PNG")
    return buf.getvalue()


def make_tarball(members: list[tarfile.TarInfo | tuple[str, bytes]]) -> bytes:
    """A .tar.gz from ``(name, data)`` files and raw TarInfo members (links, devices...)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for member in members:
            if isinstance(member, tarfile.TarInfo):
                tar.addfile(member)
            else:
                info = tarfile.TarInfo(member[0])
                info.size = len(member[1])
                tar.addfile(info, io.BytesIO(member[1]))
    return buf.getvalue()


def set5_tarball() -> bytes:
    """Like eugenesiow's Set5_HR.tar.gz: a ``Set5_HR/`` folder of five PNGs (plus macOS litter to skip)."""
    names = ["baby", "bird", "butterfly", "head", "woman"]
    folder = tarfile.TarInfo("Set5_HR")
    folder.type = tarfile.DIRTYPE
    return make_tarball([folder, *((f"Set5_HR/{n}.png", png_bytes(i)) for i, n in enumerate(names)),
                         ("Set5_HR/._baby.png", b"junk"), ("Set5_HR/readme.txt", b"text")])  # fmt: skip


# -------------------------------------------------------------------------------------------------- manifest


def test_load_zoo_reads_the_schema(tmp_path: Path) -> None:
    manifest = make_zoo(tmp_path / "ckpt", {"a": b"weights-a", "b": b"weights-b"})
    entries = hub.load_zoo(manifest)
    assert [e.name for e in entries] == ["a", "b"]
    a = entries[0]
    assert (a.arch, a.scale, a.method, a.ratio, a.size_bytes) == ("swinir-light", 4, "iss-p", 0.95, 9)
    assert a.hub == hub.HubRef(REPO, "main", "a.safetensors")
    assert a.bundled == tmp_path / "ckpt" / "a.safetensors"
    assert a.metrics["Set5"]["psnr"] == pytest.approx(30.12) and a.budget["prune_iters"] == 50


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda e: e.pop("sha256"), "missing field 'sha256'"),
        (lambda e: e.update(sha256="abc"), "64 lowercase hex"),
        (lambda e: e.update(scale=5), "'scale' must be 2, 3 or 4"),
        (lambda e: e.update(ratio=1.5), "'ratio' must be in [0, 1)"),
        (lambda e: e.update(scale="4"), "wrong type"),
        (lambda e: e.update(file="../evil.safetensors"), "plain file name"),
        (lambda e: e.update(hub={"repo_id": "no-slash", "revision": "main", "filename": "x"}), "org/name"),
        (lambda e: e.update(metrics={"Set5": {"psnr": "high"}}), "metrics['Set5']"),
    ],
)
def test_load_zoo_rejects_bad_entries_with_a_clear_message(tmp_path: Path, change, message: str) -> None:
    manifest = make_zoo(tmp_path, {"a": b"x"})
    raw = json.loads(manifest.read_text())
    change(raw["entries"][0])
    manifest.write_text(json.dumps(raw))
    with pytest.raises(ValueError, match=r"entry 0 \(a\)") as info:
        hub.load_zoo(manifest)
    assert message in str(info.value)


def test_load_zoo_file_level_errors(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match=r"no zoo manifest"):
        hub.load_zoo(tmp_path / "missing.json")
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(ValueError, match=r"not valid JSON"):
        hub.load_zoo(bad)
    bad.write_text(json.dumps({"version": 2, "entries": []}))
    with pytest.raises(ValueError, match='"version": 1'):
        hub.load_zoo(bad)
    manifest = make_zoo(tmp_path / "dup", {"a": b"x"})
    raw = json.loads(manifest.read_text())
    raw["entries"].append(raw["entries"][0])
    manifest.write_text(json.dumps(raw))
    with pytest.raises(ValueError, match=r"duplicate entry names \['a'\]"):
        hub.load_zoo(manifest)


def test_default_manifest_is_next_to_the_package() -> None:
    assert Path(hub.__file__).resolve().parents[1] / "checkpoints" / "zoo.json" == hub.DEFAULT_ZOO


# -------------------------------------------------------------------------------------------- (a) fake cache


def test_resolve_offline_from_a_hand_built_cache(tmp_path: Path, isolated_hub: Path, offline: None) -> None:
    data = b"hub copy of the weights"
    manifest = make_zoo(tmp_path / "ckpt", {"a": data})
    (tmp_path / "ckpt" / "a.safetensors").unlink()  # only the cache has it
    pointer = cache_put(isolated_hub, REPO, "a.safetensors", data)
    found = hub.locate(hub.load_zoo(manifest)[0])
    assert found.source == "hub" and found.path == pointer and found.path.read_bytes() == data


def test_offline_without_cache_falls_back_to_bundled_with_a_warning(
    tmp_path: Path, offline: None, caplog: pytest.LogCaptureFixture
) -> None:
    entry = hub.load_zoo(make_zoo(tmp_path, {"a": b"bundled weights"}))[0]
    with caplog.at_level(logging.WARNING, logger="iss.hub"):
        found = hub.locate(entry)
    assert found.source == "bundled" and found.path == tmp_path / "a.safetensors"
    assert "using the bundled copy" in caplog.text and "offline" in caplog.text


def test_corrupt_cached_file_is_refused(tmp_path: Path, isolated_hub: Path, offline: None) -> None:
    entry = hub.load_zoo(make_zoo(tmp_path, {"a": b"good weights!"}))[0]
    cache_put(isolated_hub, REPO, "a.safetensors", b"evil weights!")  # same size, other bytes
    with pytest.raises(ValueError, match=r"refusing checkpoint a: sha256 of downloaded from iss-sr/zoo@main"):
        hub.resolve(entry)


def test_tampered_bundled_file_is_refused(tmp_path: Path, offline: None) -> None:
    entry = hub.load_zoo(make_zoo(tmp_path, {"a": b"good weights"}))[0]
    entry.bundled.write_bytes(b"evil weights")
    with pytest.raises(ValueError, match=r"sha256 of bundled copy .* tampered"):
        hub.resolve(entry)
    entry.bundled.write_bytes(b"truncated")
    with pytest.raises(ValueError, match=r"has 9 bytes, the manifest says 12"):
        hub.resolve(entry)


def test_missing_everywhere_raises_file_not_found_with_the_reason(tmp_path: Path, offline: None) -> None:
    entry = hub.load_zoo(make_zoo(tmp_path, {"a": b"weights"}))[0]
    entry.bundled.unlink()
    with pytest.raises(FileNotFoundError, match=r"unavailable: Hub download .* offline .* no bundled copy"):
        hub.resolve(entry)


def test_entry_without_hub_section_uses_the_bundled_copy(tmp_path: Path) -> None:
    entry = hub.load_zoo(make_zoo(tmp_path, {"a": b"weights"}, hub_section=False))[0]
    assert entry.hub is None
    found = hub.locate(entry)
    assert found.source == "bundled" and "no Hub location" in found.detail


def test_local_dir_overrides_where_bundled_copies_are(tmp_path: Path, offline: None) -> None:
    entry = hub.load_zoo(make_zoo(tmp_path / "a", {"a": b"weights"}))[0]
    other = tmp_path / "elsewhere"
    other.mkdir()
    (other / "a.safetensors").write_bytes(b"weights")
    entry.bundled.unlink()
    assert hub.resolve(entry, local_dir=other) == other / "a.safetensors"


def test_fetch_benchmark_offline_from_a_hand_built_cache(
    tmp_path: Path, isolated_hub: Path, offline: None
) -> None:
    cache_put(isolated_hub, "eugenesiow/Set5", "data/Set5_HR.tar.gz", set5_tarball(), repo_type="dataset")
    root = hub.fetch_benchmark("Set5", cache_dir=tmp_path / "ours")
    assert root == tmp_path / "ours" / "benchmarks"
    hr = sorted(p.name for p in (root / "Set5" / "HR").iterdir())
    assert hr == ["baby.png", "bird.png", "butterfly.png", "head.png", "woman.png"]
    assert np.asarray(Image.open(root / "Set5" / "HR" / "bird.png")).shape == (12, 10, 3)
    source = json.loads((root / "Set5" / "source.json").read_text())
    assert source["commit"] == COMMIT and source["revision"] == "main" and source["images"] == 5
    # Extracted once: later calls need neither the Hub nor its cache.
    for path in sorted(isolated_hub.rglob("*"), reverse=True):
        path.unlink() if not path.is_dir() or path.is_symlink() else path.rmdir()
    assert hub.fetch_benchmark("Set5", cache_dir=tmp_path / "ours") == root


def test_fetched_benchmark_is_what_benchmarkset_reads(
    tmp_path: Path, isolated_hub: Path, offline: None
) -> None:
    data = pytest.importorskip("iss.data")
    cache_put(isolated_hub, "eugenesiow/Set5", "data/Set5_HR.tar.gz", set5_tarball(), repo_type="dataset")
    root = hub.fetch_benchmark("Set5", cache_dir=tmp_path / "ours")
    samples = data.BenchmarkSet(root, "Set5", 2)
    assert len(samples) == 5 and samples[0].hr.shape == (12, 10, 3) and samples[0].lr.shape == (6, 5, 3)


def test_fetch_benchmark_names(tmp_path: Path, offline: None) -> None:
    with pytest.raises(ValueError, match=r"Manga109 .* pass a local benchmarks folder"):
        hub.fetch_benchmark("Manga109")
    with pytest.raises(ValueError, match=r"unknown benchmark 'Set6'"):
        hub.fetch_benchmark("Set6")
    with pytest.raises(FileNotFoundError, match=r"could not download B100 .* --data-dir"):
        hub.fetch_benchmark("bsd100", cache_dir=tmp_path)  # alias accepted, then nothing cached offline
    assert hub.PINNED == {"Set5": "main", "Set14": "main", "B100": "main", "Urban100": "main"}


def _link(name: str, target: str, kind: bytes) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.linkname = kind, target
    return info


@pytest.mark.parametrize(
    ("member", "message"),
    [
        (("../evil.png", b"x"), "unsafe path '../evil.png'"),
        (("Set5_HR/../../evil.png", b"x"), "unsafe path"),
        (("/tmp/evil.png", b"x"), "unsafe path '/tmp/evil.png'"),
        (_link("Set5_HR/link.png", "/etc/passwd", tarfile.SYMTYPE), "link or special file"),
        (_link("Set5_HR/hard.png", "Set5_HR/baby.png", tarfile.LNKTYPE), "link or special file"),
        (_link("Set5_HR/dev.png", "", tarfile.CHRTYPE), "link or special file"),
        (_link("Set5_HR/fifo.png", "", tarfile.FIFOTYPE), "link or special file"),
    ],
)
def test_unsafe_tarballs_are_refused_and_nothing_is_written(
    tmp_path: Path, isolated_hub: Path, offline: None, member, message: str
) -> None:
    good = [(f"Set5_HR/{n}.png", png_bytes(i)) for i, n in enumerate("abcd")]
    cache_put(isolated_hub, "eugenesiow/Set5", "data/Set5_HR.tar.gz", make_tarball([*good, member]),
              repo_type="dataset")  # fmt: skip
    ours = tmp_path / "deep" / "ours"
    before = set(tmp_path.rglob("*"))
    with pytest.raises(ValueError, match=message):
        hub.fetch_benchmark("Set5", cache_dir=ours)
    assert set(tmp_path.rglob("*")) == before  # nothing extracted, no evil.png anywhere
    assert not Path("/tmp/evil.png").exists()


def test_wrong_image_count_is_refused(tmp_path: Path) -> None:
    tarball = tmp_path / "t.tar.gz"
    tarball.write_bytes(make_tarball([("Set5_HR/a.png", png_bytes(0))]))
    with pytest.raises(ValueError, match=r"expected 5 images, found 1"):
        hub.extract_images(tarball, tmp_path / "HR", expected=5)
    assert not (tmp_path / "HR").exists()


def test_unreadable_or_truncated_tarball_is_a_value_error(tmp_path: Path) -> None:
    tarball = tmp_path / "t.tar.gz"
    tarball.write_bytes(b"this is not a tarball")
    with pytest.raises(ValueError, match=r"not a readable \(or a truncated\) tar archive"):
        hub.extract_images(tarball, tmp_path / "HR")
    tarball.write_bytes(set5_tarball()[:300])
    with pytest.raises(ValueError, match=r"not a readable"):
        hub.extract_images(tarball, tmp_path / "HR")
    assert not (tmp_path / "HR").exists()


def test_clashing_names_cannot_be_flattened(tmp_path: Path) -> None:
    tarball = tmp_path / "t.tar.gz"
    tarball.write_bytes(make_tarball([("x/a.png", png_bytes(0)), ("y/a.png", png_bytes(1))]))
    with pytest.raises(ValueError, match=r"share a file name"):
        hub.extract_images(tarball, tmp_path / "HR")


# ------------------------------------------------------------------------------------------ (b) local server


def test_download_from_the_server_then_offline_from_its_cache(
    tmp_path: Path, fakehub: FakeHub, monkeypatch
) -> None:
    data = b"published weights " * 100
    commit = fakehub.add_file(REPO, "a.safetensors", data)
    entry = hub.load_zoo(make_zoo(tmp_path, {"a": data}, revision=commit))[0]
    entry.bundled.unlink()
    found = hub.locate(entry, endpoint=fakehub.url)
    assert (
        found.source == "hub" and found.path.read_bytes() == data and f"snapshots/{commit}" in str(found.path)
    )
    assert ("GET", "/iss-sr/zoo/resolve/" + commit + "/a.safetensors") in fakehub.requests
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    n = len(fakehub.requests)
    assert hub.resolve(entry, endpoint=fakehub.url) == found.path and len(fakehub.requests) == n


def test_pinned_commit_in_cache_needs_no_request(tmp_path: Path, fakehub: FakeHub) -> None:
    data = b"pinned weights"
    commit = fakehub.add_file(REPO, "a.safetensors", data)
    entry = hub.load_zoo(make_zoo(tmp_path, {"a": data}, revision=commit))[0]
    first = hub.resolve(entry, endpoint=fakehub.url)
    fakehub.delay, n = 5.0, len(fakehub.requests)  # a Hub that would now hang
    start = time.perf_counter()
    assert hub.resolve(entry, endpoint=fakehub.url, timeout=3) == first
    assert len(fakehub.requests) == n and time.perf_counter() - start < 1.0


def test_branch_revision_resolves_through_the_server(tmp_path: Path, fakehub: FakeHub) -> None:
    data = b"weights on main"
    fakehub.add_file(REPO, "a.safetensors", data)
    entry = hub.load_zoo(make_zoo(tmp_path, {"a": data}, revision="main"))[0]
    assert hub.locate(entry, endpoint=fakehub.url).source == "hub"


def test_404_falls_back_to_bundled_with_a_warning(
    tmp_path: Path, fakehub: FakeHub, caplog: pytest.LogCaptureFixture
) -> None:
    fakehub.add_file(REPO, "other.safetensors", b"not ours")
    entry = hub.load_zoo(make_zoo(tmp_path, {"a": b"bundled"}))[0]
    with caplog.at_level(logging.WARNING, logger="iss.hub"):
        found = hub.locate(entry, endpoint=fakehub.url)
    assert found.source == "bundled" and "HTTP 404" in found.detail
    assert "HTTP 404" in caplog.text and "using the bundled copy" in caplog.text


def test_timeout_falls_back_to_bundled_quickly(tmp_path: Path, fakehub: FakeHub, caplog) -> None:
    fakehub.add_file(REPO, "a.safetensors", b"slow weights")
    fakehub.delay = 5.0
    entry = hub.load_zoo(make_zoo(tmp_path, {"a": b"slow weights"}))[0]
    start = time.perf_counter()
    with caplog.at_level(logging.WARNING, logger="iss.hub"):
        found = hub.locate(entry, endpoint=fakehub.url, timeout=0.3)
    assert time.perf_counter() - start < 2.0  # one bounded request, no 60 s retry
    assert found.source == "bundled" and "timed out" in found.detail and "timed out" in caplog.text


def test_connection_refused_falls_back_to_bundled(tmp_path: Path) -> None:
    entry = hub.load_zoo(make_zoo(tmp_path, {"a": b"weights"}))[0]
    found = hub.locate(entry, endpoint=_closed_port_url(), timeout=1)
    assert found.source == "bundled" and "ConnectError" in found.detail


def test_corrupt_download_is_refused(tmp_path: Path, fakehub: FakeHub) -> None:
    data = b"genuine weights"
    fakehub.add_file(REPO, "a.safetensors", data)
    fakehub.corrupt.add("a.safetensors")
    entry = hub.load_zoo(make_zoo(tmp_path, {"a": data}))[0]
    with pytest.raises(
        ValueError, match=r"refusing checkpoint a: sha256 of downloaded from iss-sr/zoo@main .* corrupt"
    ):
        hub.resolve(entry, endpoint=fakehub.url)


def test_fetch_benchmark_through_the_server(tmp_path: Path, fakehub: FakeHub) -> None:
    commit = fakehub.add_file("eugenesiow/Set5", "data/Set5_HR.tar.gz", set5_tarball(), repo_type="dataset")
    root = hub.fetch_benchmark("Set5", cache_dir=tmp_path, endpoint=fakehub.url, timeout=5)
    assert len(list((root / "Set5" / "HR").glob("*.png"))) == 5
    assert json.loads((root / "Set5" / "source.json").read_text())["commit"] == commit
    assert ("HEAD", "/datasets/eugenesiow/Set5/resolve/main/data/Set5_HR.tar.gz") in fakehub.requests


def test_fetch_benchmark_404_says_what_to_do(tmp_path: Path, fakehub: FakeHub) -> None:
    fakehub.repo("eugenesiow/Urban100", "dataset")
    with pytest.raises(
        FileNotFoundError, match=r"could not download Urban100 .*HTTP 404.* --data-dir or ISS_DATA_DIR"
    ):
        hub.fetch_benchmark("Urban100", cache_dir=tmp_path, endpoint=fakehub.url)


# -------------------------------------------------------------------------------------------- (c) publishing


def test_model_card_content(tmp_path: Path) -> None:
    entries = hub.load_zoo(
        make_zoo(tmp_path, {"swinir-light_x4_iss-p_r0.95": b"w1", "swinir-light_x4_iht_r0.95": b"w2"})
    )
    card = hub.model_card(entries, REPO)
    (tmp_path / "README.md").write_text(card)
    meta = metadata_load(tmp_path / "README.md")
    assert meta["library_name"] == "iss-sr" and meta["license"] == "apache-2.0"
    assert {"super-resolution", "pruning", "iss-p", "iht", "swinir-light"} <= set(meta["tags"])
    assert "| swinir-light_x4_iss-p_r0.95 | 30.12 / 0.8765 | 24.50 / 0.7100 |" in card
    assert "| swinir-light_x4_iht_r0.95 | 31.12 / 0.8765 |" in card
    assert "| Set5 | Urban100 |" in card  # sets in benchmark order
    assert "**iss-p**: Iterative Soft Shrinkage-Percentage" in card and "**iht**: Iterative Hard" in card
    assert "| iterations | prune_iters | batch | patch | data | device | seed |" in card
    assert "Wang, Jiamian" in card


def test_zoo_push_dry_run_writes_card_and_files(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    manifest = make_zoo(tmp_path / "ckpt", {"a": b"weights-a", "b": b"weights-b"})
    out = tmp_path / "preview"
    out.mkdir()
    (out / "stale.txt").write_text("left from an earlier run")  # not part of the upload, not listed
    rc = cli.main(["zoo", "push", "--repo", REPO, "--manifest", str(manifest), "--dry-run", str(out)])
    assert rc == 0
    names = ["README.md", "a.safetensors", "b.safetensors", "stale.txt", "zoo.json"]
    assert sorted(p.name for p in out.iterdir()) == names
    assert (out / "a.safetensors").read_bytes() == b"weights-a"
    published = json.loads((out / "zoo.json").read_text())["entries"]
    assert published[0]["hub"] == {"repo_id": REPO, "revision": "main", "filename": "a.safetensors"}
    printed = capsys.readouterr().out
    assert "would upload 4 files to iss-sr/zoo@main" in printed and "stale" not in printed
    assert json.loads(manifest.read_text())["entries"][0]["hub"]["revision"] == "main"  # dry run pins nothing


def test_push_refuses_a_tampered_bundled_file(tmp_path: Path) -> None:
    manifest = make_zoo(tmp_path, {"a": b"weights"})
    (tmp_path / "a.safetensors").write_bytes(b"changed")
    with pytest.raises(ValueError, match=r"refusing checkpoint a"):
        hub.stage_push(manifest, REPO, "main", tmp_path / "out")


def test_push_to_the_server_pins_the_manifest_and_round_trips(
    tmp_path: Path, fakehub: FakeHub, capsys: pytest.CaptureFixture[str]
) -> None:
    manifest = make_zoo(tmp_path / "ckpt", {"a": b"weights-a", "b": b"weights-b"})
    argv = [
        "zoo",
        "push",
        "--repo",
        REPO,
        "--manifest",
        str(manifest),
        "--token",
        "hf_fake",
        "--endpoint",
        fakehub.url,
    ]
    assert cli.main(argv) == 0
    commit = fakehub.repos[("model", REPO)].refs["main"]
    assert f"commit {commit}" in capsys.readouterr().out
    tree = fakehub.repos[("model", REPO)].commits[commit]
    assert sorted(tree) == ["README.md", "a.safetensors", "b.safetensors", "zoo.json"]
    assert tree["a.safetensors"] == b"weights-a" and "library_name: iss-sr" in tree["README.md"].decode()
    entries = hub.load_zoo(manifest)
    assert {e.hub for e in entries} >= {hub.HubRef(REPO, commit, "a.safetensors")}
    assert all(e.hub.revision == commit for e in entries)
    entries[0].bundled.rename(tmp_path / "aside")  # the pinned manifest resolves from the published commit
    assert hub.locate(entries[0], endpoint=fakehub.url).source == "hub"
    (tmp_path / "aside").rename(entries[0].bundled)
    # Pushing again to an existing repo and a new branch works (create_repo exist_ok, create_branch).
    assert cli.main([*argv, "--revision", "v2"]) == 0
    assert "v2" in fakehub.repos[("model", REPO)].refs
    assert hub.load_zoo(manifest)[0].hub.revision == fakehub.repos[("model", REPO)].refs["v2"]


def test_push_without_token_fails_in_one_line(tmp_path: Path, fakehub: FakeHub, capsys) -> None:
    manifest = make_zoo(tmp_path, {"a": b"weights"})
    argv = ["zoo", "push", "--repo", REPO, "--manifest", str(manifest), "--endpoint", fakehub.url]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: publishing to iss-sr/zoo failed: HTTP 401") and err.count("\n") == 1
    assert json.loads(manifest.read_text())["entries"][0]["hub"]["revision"] == "main"


# ---------------------------------------------------------------------------------------------- list / fetch


def test_zoo_list_prints_the_table(tmp_path: Path, isolated_hub: Path, capsys) -> None:
    manifest = make_zoo(tmp_path, {"a": b"weights-a", "b": b"weights-b"})
    (tmp_path / "b.safetensors").unlink()
    cache_put(isolated_hub, REPO, "a.safetensors", b"weights-a")
    assert cli.main(["zoo", "list", "--manifest", str(manifest)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["name", "arch", "scale", "method", "ratio", "size", "Set5", "PSNR", "local"]
    assert lines[2].split() == [
        "a",
        "swinir-light",
        "x4",
        "iss-p",
        "0.95",
        "9",
        "B",
        "30.12",
        "bundled+cached",
    ]
    assert lines[3].split()[-1] == "no"


def test_zoo_fetch_reports_sources_and_failures(tmp_path: Path, fakehub: FakeHub, capsys) -> None:
    fakehub.add_file(REPO, "a.safetensors", b"weights-a")
    manifest = make_zoo(tmp_path, {"a": b"weights-a", "b": b"weights-b", "c": b"weights-c"})
    (tmp_path / "b.safetensors").write_bytes(b"tampered!")
    (tmp_path / "c.safetensors").unlink()
    rc = cli.main(["zoo", "fetch", "--manifest", str(manifest), "--endpoint", fakehub.url, "--timeout", "5"])
    out = capsys.readouterr().out
    assert rc == 1
    assert "a: " in out and "[from iss-sr/zoo@main]" in out
    assert "b: FAILED: refusing checkpoint b" in out and "c: FAILED: checkpoint c is unavailable" in out


def test_zoo_command_reports_user_errors_in_one_line(tmp_path: Path, capsys) -> None:
    assert cli.main(["zoo", "list", "--manifest", str(tmp_path / "nope.json")]) == 2
    assert capsys.readouterr().err.strip() == f"error: no zoo manifest at {tmp_path / 'nope.json'}"
