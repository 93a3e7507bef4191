"""iss.zoo, fully offline: manifest, resolving (hand-built Hub cache, local server), publishing, CLI.

Nothing here may reach huggingface.co: the ``isolated_hub`` fixture (conftest.py) puts the Hub cache, HF_HOME
and tokens in tmp_path, points the default endpoint at a closed local port, and refuses name resolution for
any non-loopback host.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import threading
import time
from pathlib import Path

import pytest
import torch
from common import ROOT, TINY, as_format_1
from fakehub import FakeHub, cache_put, closed_port_url
from huggingface_hub import ModelCard, constants, metadata_load

import iss
from iss import checkpoint, cli, zoo
from iss.pruning.base import n_unimportant
from iss.zoo import manifest as manifest_module

pytestmark = pytest.mark.usefixtures("isolated_hub")

REPO = "iss-sr/zoo"


# -------------------------------------------------------------------------------------------------- builders


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


# -------------------------------------------------------------------------------------------------- manifest


def test_load_zoo_reads_the_schema(tmp_path: Path) -> None:
    manifest = make_zoo(tmp_path / "ckpt", {"a": b"weights-a", "b": b"weights-b"})
    entries = zoo.load_zoo(manifest)
    assert [e.name for e in entries] == ["a", "b"]
    a = entries[0]
    assert (a.arch, a.scale, a.method, a.ratio, a.size_bytes) == ("swinir-light", 4, "iss-p", 0.95, 9)
    assert a.hub == zoo.HubRef(REPO, "main", "a.safetensors")
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
        zoo.load_zoo(manifest)
    assert message in str(info.value)


def test_load_zoo_file_level_errors(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match=r"no zoo manifest"):
        zoo.load_zoo(tmp_path / "missing.json")
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(ValueError, match=r"not valid JSON"):
        zoo.load_zoo(bad)
    bad.write_text(json.dumps({"version": 2, "entries": []}))
    with pytest.raises(ValueError, match='"version": 1'):
        zoo.load_zoo(bad)
    manifest = make_zoo(tmp_path / "dup", {"a": b"x"})
    raw = json.loads(manifest.read_text())
    raw["entries"].append(raw["entries"][0])
    manifest.write_text(json.dumps(raw))
    with pytest.raises(ValueError, match=r"duplicate entry names \['a'\]"):
        zoo.load_zoo(manifest)


def test_default_manifest_is_the_working_directorys_bundled_zoo() -> None:
    assert Path("checkpoints", "zoo.json") == zoo.DEFAULT_ZOO
    assert zoo.DEFAULT_ZOO.is_file()  # the tests run at the repository root


# -------------------------------------------------------------------------------------------- (a) fake cache


def test_resolve_offline_from_a_hand_built_cache(tmp_path: Path, isolated_hub: Path, offline: None) -> None:
    data = b"hub copy of the weights"
    manifest = make_zoo(tmp_path / "ckpt", {"a": data})
    (tmp_path / "ckpt" / "a.safetensors").unlink()  # only the cache has it
    pointer = cache_put(isolated_hub, REPO, "a.safetensors", data)
    found = zoo.locate(zoo.load_zoo(manifest)[0])
    assert found.source == "hub" and found.path == pointer and found.path.read_bytes() == data


def test_offline_without_cache_falls_back_to_bundled_without_a_word(
    tmp_path: Path, offline: None, caplog: pytest.LogCaptureFixture
) -> None:
    entries = zoo.load_zoo(make_zoo(tmp_path, {"a": b"bundled weights", "b": b"more"}))
    with caplog.at_level(logging.WARNING, logger="iss.zoo"):
        found = zoo.locate(entries[0])
        zoo.locate_all(entries)
    assert found.source == "bundled" and found.path == tmp_path / "a.safetensors"
    assert "offline" in found.detail
    assert not caplog.records  # HF_HUB_OFFLINE=1: the bundled copies are what the user asked for


@pytest.fixture
def first_in_process(monkeypatch: pytest.MonkeyPatch) -> None:
    """As if no model had been loaded yet in this process (the unreachable-Hub line not yet logged)."""
    monkeypatch.setattr(manifest_module, "_UNREACHABLE_SAID", threading.Event())


@pytest.mark.parametrize("endpoint", ["stopped fake hub", "closed port"])
def test_an_unreachable_hub_is_said_once_per_process(
    endpoint: str, tmp_path: Path, first_in_process: None, caplog: pytest.LogCaptureFixture
) -> None:
    if endpoint == "stopped fake hub":
        with FakeHub() as hub:
            url = hub.url
    else:
        url = closed_port_url()
    entries = zoo.load_zoo(make_zoo(tmp_path, {"a": b"weights a", "b": b"weights b"}))
    with caplog.at_level(logging.WARNING, logger="iss.zoo"):
        found = [zoo.locate(e, endpoint=url, timeout=2) for e in [*entries, *entries]]
    assert [f.source for f in found] == ["bundled"] * 4
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1 and lines[0].startswith("the Hugging Face Hub is unreachable (ConnectError")
    assert "using the bundled checkpoints" in lines[0] and "HF_HUB_OFFLINE=1" in lines[0]


def test_corrupt_cached_file_is_moved_aside_and_the_bundled_copy_used(
    tmp_path: Path, isolated_hub: Path, offline: None, caplog: pytest.LogCaptureFixture
) -> None:
    entry = zoo.load_zoo(make_zoo(tmp_path, {"a": b"good weights!"}))[0]
    pointer = cache_put(isolated_hub, REPO, "a.safetensors", b"evil weights!")  # same size, other bytes
    with caplog.at_level(logging.WARNING, logger="iss.zoo"):
        found = zoo.locate(entry)
    assert found.source == "bundled" and found.path.read_bytes() == b"good weights!"
    assert "sha256 of downloaded from iss-sr/zoo@main" in found.refused and "moved it out" in found.refused
    assert "using the bundled copy" in caplog.text and "tampered" in caplog.text
    quarantined = tmp_path / "iss-cache" / "quarantine" / "a.safetensors"  # ISS_CACHE_DIR of isolated_hub
    assert quarantined.read_bytes() == b"evil weights!" and not pointer.exists() and not pointer.is_symlink()
    assert not list((isolated_hub / "models--iss-sr--zoo" / "blobs").iterdir())


def test_tampered_bundled_file_is_refused(tmp_path: Path, offline: None) -> None:
    entry = zoo.load_zoo(make_zoo(tmp_path, {"a": b"good weights"}))[0]
    entry.bundled.write_bytes(b"evil weights")
    with pytest.raises(ValueError, match=r"sha256 of bundled copy .* tampered"):
        zoo.resolve(entry)
    entry.bundled.write_bytes(b"truncated")
    with pytest.raises(ValueError, match=r"has 9 bytes, the manifest says 12"):
        zoo.resolve(entry)


def test_missing_everywhere_raises_file_not_found_with_the_reason(tmp_path: Path, offline: None) -> None:
    entry = zoo.load_zoo(make_zoo(tmp_path, {"a": b"weights"}))[0]
    entry.bundled.unlink()
    with pytest.raises(FileNotFoundError, match=r"unavailable: Hub download .* offline .* no bundled copy"):
        zoo.resolve(entry)


def test_entry_without_hub_section_uses_the_bundled_copy(tmp_path: Path) -> None:
    entry = zoo.load_zoo(make_zoo(tmp_path, {"a": b"weights"}, hub_section=False))[0]
    assert entry.hub is None
    found = zoo.locate(entry)
    assert found.source == "bundled" and "no Hub location" in found.detail


def test_local_dir_overrides_where_bundled_copies_are(tmp_path: Path, offline: None) -> None:
    entry = zoo.load_zoo(make_zoo(tmp_path / "a", {"a": b"weights"}))[0]
    other = tmp_path / "elsewhere"
    other.mkdir()
    (other / "a.safetensors").write_bytes(b"weights")
    entry.bundled.unlink()
    assert zoo.resolve(entry, local_dir=other) == other / "a.safetensors"


# ------------------------------------------------------------------------------------------ (b) local server


def test_download_from_the_server_then_offline_from_its_cache(
    tmp_path: Path, fakehub: FakeHub, monkeypatch
) -> None:
    data = b"published weights " * 100
    commit = fakehub.add_file(REPO, "a.safetensors", data)
    entry = zoo.load_zoo(make_zoo(tmp_path, {"a": data}, revision=commit))[0]
    entry.bundled.unlink()
    found = zoo.locate(entry, endpoint=fakehub.url)
    assert (
        found.source == "hub" and found.path.read_bytes() == data and f"snapshots/{commit}" in str(found.path)
    )
    assert ("GET", "/iss-sr/zoo/resolve/" + commit + "/a.safetensors") in fakehub.requests
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    n = len(fakehub.requests)
    assert zoo.resolve(entry, endpoint=fakehub.url) == found.path and len(fakehub.requests) == n


def test_pinned_commit_in_cache_needs_no_request(tmp_path: Path, fakehub: FakeHub) -> None:
    data = b"pinned weights"
    commit = fakehub.add_file(REPO, "a.safetensors", data)
    entry = zoo.load_zoo(make_zoo(tmp_path, {"a": data}, revision=commit))[0]
    first = zoo.resolve(entry, endpoint=fakehub.url)
    fakehub.delay, n = 5.0, len(fakehub.requests)  # a Hub that would now hang
    start = time.perf_counter()
    assert zoo.resolve(entry, endpoint=fakehub.url, timeout=3) == first
    assert len(fakehub.requests) == n and time.perf_counter() - start < 1.0


def test_branch_revision_resolves_through_the_server(tmp_path: Path, fakehub: FakeHub) -> None:
    data = b"weights on main"
    fakehub.add_file(REPO, "a.safetensors", data)
    entry = zoo.load_zoo(make_zoo(tmp_path, {"a": data}, revision="main"))[0]
    assert zoo.locate(entry, endpoint=fakehub.url).source == "hub"


def test_404_falls_back_to_bundled_with_a_warning(
    tmp_path: Path, fakehub: FakeHub, caplog: pytest.LogCaptureFixture
) -> None:
    fakehub.add_file(REPO, "other.safetensors", b"not ours")
    entry = zoo.load_zoo(make_zoo(tmp_path, {"a": b"bundled"}))[0]
    with caplog.at_level(logging.WARNING, logger="iss.zoo"):
        found = zoo.locate(entry, endpoint=fakehub.url)
    assert found.source == "bundled" and "HTTP 404" in found.detail
    assert "HTTP 404" in caplog.text and "using the bundled copy" in caplog.text


def test_timeout_falls_back_to_bundled_quickly(
    tmp_path: Path, fakehub: FakeHub, first_in_process: None, caplog: pytest.LogCaptureFixture
) -> None:
    fakehub.add_file(REPO, "a.safetensors", b"slow weights")
    fakehub.delay = 5.0
    entry = zoo.load_zoo(make_zoo(tmp_path, {"a": b"slow weights"}))[0]
    start = time.perf_counter()
    with caplog.at_level(logging.WARNING, logger="iss.zoo"):
        found = zoo.locate(entry, endpoint=fakehub.url, timeout=0.3)
    assert time.perf_counter() - start < 2.0  # one bounded request, no 60 s retry
    assert found.source == "bundled" and "timed out" in found.detail and "timed out" in caplog.text
    assert "unreachable" in caplog.text  # a Hub that does not answer in time is unreachable too


def test_connection_refused_falls_back_to_bundled(tmp_path: Path, first_in_process: None) -> None:
    entry = zoo.load_zoo(make_zoo(tmp_path, {"a": b"weights"}))[0]
    found = zoo.locate(entry, endpoint=closed_port_url(), timeout=1)
    assert found.source == "bundled" and "ConnectError" in found.detail


def test_corrupt_download_falls_back_then_the_next_start_downloads_again(
    tmp_path: Path, fakehub: FakeHub, caplog: pytest.LogCaptureFixture
) -> None:
    """Refused, moved out of the Hub cache, bundled copy used; a healthy Hub is used next."""
    data = b"genuine weights"
    fakehub.add_file(REPO, "a.safetensors", data)
    fakehub.corrupt.add("a.safetensors")
    entry = zoo.load_zoo(make_zoo(tmp_path, {"a": data}))[0]
    with caplog.at_level(logging.WARNING, logger="iss.zoo"):
        found = zoo.locate(entry, endpoint=fakehub.url)
    assert found.source == "bundled" and found.path == entry.bundled
    assert "corrupt or was tampered with" in found.refused and "using the bundled copy" in caplog.text
    fakehub.corrupt.clear()  # the Hub is healthy again
    n = len(fakehub.requests)
    again = zoo.locate(entry, endpoint=fakehub.url)
    assert again.source == "hub" and again.path.read_bytes() == data and not again.refused
    assert [r for r in fakehub.requests[n:] if r[0] == "GET"]  # downloaded afresh, not served from the cache


def test_corrupt_download_without_a_bundled_copy_says_both(tmp_path: Path, fakehub: FakeHub) -> None:
    data = b"genuine weights"
    fakehub.add_file(REPO, "a.safetensors", data)
    fakehub.corrupt.add("a.safetensors")
    entry = zoo.load_zoo(make_zoo(tmp_path, {"a": data}))[0]
    entry.bundled.unlink()
    with pytest.raises(FileNotFoundError, match=r"unavailable: sha256 of downloaded .* no bundled copy"):
        zoo.resolve(entry, endpoint=fakehub.url)


def test_locate_all_bounds_a_slow_hub_in_total(tmp_path: Path, fakehub: FakeHub) -> None:
    """Four entries behind a hanging Hub cost one deadline, not four."""
    files = {name: f"weights {name}".encode() for name in "abcd"}
    for name, data in files.items():
        fakehub.add_file(REPO, f"{name}.safetensors", data)
    entries = zoo.load_zoo(make_zoo(tmp_path, files))
    entries[3].bundled.unlink()
    fakehub.delay = 5.0
    start = time.perf_counter()
    found = zoo.locate_all(entries, endpoint=fakehub.url, timeout=1.0)
    assert time.perf_counter() - start < 2.5  # sequential: 4 s of timeouts
    assert [f.source for f in found[:3]] == ["bundled"] * 3
    assert all("1 s" in f.detail or "timed out" in f.detail for f in found[:3])
    assert isinstance(found[3], FileNotFoundError) and "no bundled copy" in str(found[3])
    fakehub.delay = 0.0
    assert [f.source for f in zoo.locate_all(entries, endpoint=fakehub.url, timeout=5.0)] == ["hub"] * 4


def test_an_unreachable_hub_is_one_warning_not_one_per_checkpoint(tmp_path: Path, caplog) -> None:
    """Every entry falls back for the same reason: one line says so."""
    files = {name: f"weights {name}".encode() for name in "abc"}
    entries = zoo.load_zoo(make_zoo(tmp_path, files))
    with caplog.at_level("WARNING", logger="iss.zoo"):
        found = zoo.locate_all(entries, endpoint="http://127.0.0.1:9", timeout=5.0)  # nothing listens
    assert [f.source for f in found] == ["bundled"] * 3
    lines = [r.getMessage() for r in caplog.records if r.name == "iss.zoo.manifest"]
    assert len(lines) == 1 and lines[0].startswith("3 checkpoints: Hub download failed: ConnectError")
    assert lines[0].endswith("using the bundled copies")


# -------------------------------------------------------------------------------------------- (c) publishing


def test_model_card_content(tmp_path: Path) -> None:
    entries = zoo.load_zoo(
        make_zoo(tmp_path, {"swinir-light_x4_iss-p_r0.95": b"w1", "swinir-light_x4_iht_r0.95": b"w2"})
    )
    card = zoo.model_card(entries, REPO)
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
    bundled = zoo.model_card(zoo.load_zoo(), REPO)  # EDSR-L x4 ISS-P trained beside IHT, then alone
    assert "setups" not in bundled and "(1 threads) beside 1 other cell to 1,741, then cpu" in bundled


def test_model_card_model_index_parses_back_with_every_cell(tmp_path: Path) -> None:
    entries = zoo.load_zoo(
        make_zoo(tmp_path, {"swinir-light_x4_iss-p_r0.95": b"w1", "swinir-light_x4_iht_r0.95": b"w2"})
    )
    card = ModelCard(zoo.model_card(entries, REPO))
    assert card.data.library_name == "iss-sr" and card.data.model_name == REPO
    assert "iss-p" in card.data.tags and card.data.pipeline_tag == "image-to-image"
    results = {(r.metric_name, r.dataset_name, r.metric_type): r.metric_value for r in card.data.eval_results}
    assert len(results) == 2 * 2 * 2  # 2 checkpoints x (Set5, Urban100) x (PSNR, SSIM)
    assert results["PSNR (Y) swinir-light_x4_iss-p_r0.95", "Set5 x4", "psnr"] == 30.12
    assert results["SSIM (Y) swinir-light_x4_iht_r0.95", "Urban100 x4", "ssim"] == 0.71
    assert {r.dataset_type for r in card.data.eval_results} == {"set5", "urban100"}


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
        zoo.stage_push(manifest, REPO, "main", tmp_path / "out")


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
    entries = zoo.load_zoo(manifest)
    assert {e.hub for e in entries} >= {zoo.HubRef(REPO, commit, "a.safetensors")}
    assert all(e.hub.revision == commit for e in entries)
    entries[0].bundled.rename(tmp_path / "aside")  # the pinned manifest resolves from the published commit
    assert zoo.locate(entries[0], endpoint=fakehub.url).source == "hub"
    (tmp_path / "aside").rename(entries[0].bundled)
    # Pushing again to an existing repo and a new branch works (create_repo exist_ok, create_branch).
    assert cli.main([*argv, "--revision", "v2"]) == 0
    assert "v2" in fakehub.repos[("model", REPO)].refs
    assert zoo.load_zoo(manifest)[0].hub.revision == fakehub.repos[("model", REPO)].refs["v2"]


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


def test_zoo_upgrade_resaves_format_1_files_and_updates_the_manifest(tmp_path: Path, capsys) -> None:
    """The bundled checkpoints move to the current format through this command: same weights, new sha256."""
    torch.manual_seed(0)
    model = iss.archs.build("swinir-light", 2, **TINY)
    meta = {"arch": "swinir-light", "scale": 2, "arch_kwargs": TINY, "method": "iht", "ratio": 0.5}
    path = iss.checkpoint.save(
        model, tmp_path / "old.safetensors", meta, iss.pruning.build("iht", model, 0.5, prune_iters=0).masks
    )
    as_format_1(path)
    manifest = make_zoo(tmp_path, {"old": path.read_bytes()}, hub_section=False)
    argv = ["zoo", "upgrade", "--manifest", str(manifest)]
    assert cli.main(argv) == 0 and "upgraded old" in capsys.readouterr().out
    entry = zoo.load_zoo(manifest)[0]
    zoo.verify(entry.bundled, entry)  # the manifest records the new bytes
    loaded, _ = iss.checkpoint.load(entry.bundled)
    assert all(torch.equal(loaded.state_dict()[k], v) for k, v in model.state_dict().items())
    assert cli.main(argv) == 0 and "every bundled checkpoint is current" in capsys.readouterr().out
    entry.bundled.write_bytes(entry.bundled.read_bytes()[:-1] + b"x")  # only the published bytes upgrade
    assert cli.main(argv) == 2 and "refusing checkpoint old" in capsys.readouterr().err


def test_markdown_table_shows_budget_bicubic_and_paper() -> None:
    table = zoo.markdown_table(zoo.load_zoo())
    assert "**swinir-light x4, ratio 0.95**" in table
    assert "| bicubic | 28.43/0.8111 |" in table
    assert "| paper iss-p (table 2) | 31.16/0.8775 |" in table
    assert "6,000 it (K_p 3,000), batch 4, patch 16; cpu" in table
    first = zoo.load_zoo()[0]  # a cell trained with pruner options says so
    ramped = dataclasses.replace(first, budget={**first.budget, "pruner_options": {"alpha_ramp": 3000}})
    assert "(K_p 30,000), alpha ramp 3,000, batch 4" in zoo.markdown_table([ramped])
    one, two = (f"cpu: AMD EPYC avx2 ({n} threads)" for n in (1, 2))
    setups = [{"from": 0, "device": one, "jobs": 2}, {"from": 1741, "device": two, "jobs": 1}]
    mixed = dataclasses.replace(first, budget={**first.budget, "device": two, "setups": setups})
    assert f"patch 16; {one} beside 1 other cell to 1,741, then {two}, " in zoo.markdown_table([mixed])


def test_every_bundled_entry_verifies_and_is_exactly_as_sparse_as_claimed() -> None:
    """What the README promises of the bundled zoo: each file matches its sha256 and loads, and every pruned
    layer keeps exactly ``n - ceil(ratio * n)`` weights (at least one: CAT-R has 10-weight layers), all others
    zero."""
    for entry in zoo.load_zoo():
        zoo.verify(entry.bundled, entry)
        model, _ = checkpoint.load(entry.bundled)
        masks = checkpoint.read_masks(entry.bundled)
        assert masks, entry.name
        for name, mask in masks.items():
            weight = model.get_parameter(name).detach()
            assert int(mask.sum()) == weight.numel() - n_unimportant(entry.ratio, weight.numel()), name
            assert not weight[~mask].any(), name


def test_the_zoo_docs_show_the_zoo_as_it_is() -> None:
    """docs/zoo.md shows ``python -m iss zoo table`` and ``--glance`` of the bundled manifest (``--write``
    keeps them so)."""
    doc = (ROOT / "docs" / "zoo.md").read_text()
    for flag, render in ((" --glance", zoo.glance_table), ("", zoo.markdown_table)):
        start = doc.index(f"<!-- zoo-table: python -m iss zoo table{flag} -->\n")
        shown = doc[doc.index("\n", start) + 1 : doc.index("<!-- /zoo-table -->", start)]
        assert shown.strip() == render(zoo.load_zoo())


def test_the_glance_ranks_methods_in_tiers_no_seed_could_swap() -> None:
    """Methods within the seed spread on Set5 of their tier's first share it (``~``); "holds on" names the
    sets where each tier beats every method below; budgets and bicubic are said per cell."""
    import dataclasses

    template = next(e for e in zoo.load_zoo() if (e.arch, e.scale, e.ratio) == ("swinir-light", 2, 0.95))
    sets = ("Set5", "Set14", "B100", "Urban100", "Manga109")  # bicubic: 33.67, 30.32, 29.56, 26.88, 31.08

    def cell(*rows: tuple[str, tuple[float, ...], int]) -> list[str]:
        entries = [
            dataclasses.replace(
                template, method=method, metrics={s: {"psnr": v} for s, v in zip(sets, psnr, strict=True)},
                budget=template.budget | {"iterations": iterations},
            )
            for method, psnr, iterations in rows
        ]  # fmt: skip
        return zoo.glance_table(entries).splitlines()[2].strip("| ").split(" | ")[1:]

    row = cell(
        ("iss-p", (34.0, 31.0, 30.0, 27.3, 32.0), 60_000),
        ("iht", (33.9, 30.9, 29.9, 27.2, 31.9), 60_000),
        ("l1", (33.7, 30.5, 29.7, 27.0, 31.5), 60_000),
    )
    assert row == ["60,000", "ISS-P ~ IHT > L1-norm", "all five sets", "34.00 (37.46)", "all three"]
    row = cell(
        ("iss-p", (34.0, 31.0, 30.0, 26.0, 32.0), 60_000),  # under bicubic on Urban100, where IHT leads it
        ("iht", (33.7, 30.9, 29.9, 27.2, 31.9), 60_000),
        ("l1", (33.69, 30.5, 29.7, 27.0, 31.5), 6_000),
    )
    assert row == ["60,000; L1-norm 6,000", "ISS-P > IHT ~ L1-norm", "Set5, Set14, B100, Manga109",
                   "34.00 (37.46)", "IHT and L1-norm"]  # fmt: skip
    ahead = ("iss-p", (34.0041, 31.0, 30.0, 27.3, 32.0), 60_000)  # the gap as the tables show it: 0.22, 0.21
    assert cell(ahead, ("iht", (33.7849, 30.9, 29.9, 27.2, 31.9), 60_000))[1] == "ISS-P > IHT"
    assert cell(ahead, ("iht", (33.7851, 30.9, 29.9, 27.2, 31.9), 60_000))[1] == "ISS-P ~ IHT"


def test_zoo_table_write_replaces_only_its_own_block(tmp_path: Path, capsys) -> None:
    manifest = tmp_path / "zoo.json"
    manifest.write_text(json.dumps({"version": 1, "entries": []}))
    doc = tmp_path / "README.md"
    doc.write_text(
        "intro\n<!-- zoo-table: python -m iss zoo table --overview -->\nold rows\n<!-- /zoo-table -->\n"
        "<!-- zoo-table: python -m iss zoo table -->\nother\n<!-- /zoo-table -->\nend\n"
    )
    argv = ["zoo", "table", "--manifest", str(manifest), "--overview", "--write", str(doc)]
    assert cli.main(argv) == 0
    table = zoo.overview_table([])
    assert doc.read_text() == (
        f"intro\n<!-- zoo-table: python -m iss zoo table --overview -->\n{table}\n<!-- /zoo-table -->\n"
        "<!-- zoo-table: python -m iss zoo table -->\nother\n<!-- /zoo-table -->\nend\n"
    )
    plain = tmp_path / "plain.md"
    plain.write_text("no markers\n")
    assert cli.main([*argv[:-1], str(plain)]) == 2
    assert "has no '<!-- zoo-table: python -m iss zoo table --overview -->'" in capsys.readouterr().err
    assert plain.read_text() == "no markers\n"


def test_the_overview_says_the_budget_where_a_row_mixes_them() -> None:
    import dataclasses

    row = [e for e in zoo.load_zoo() if (e.arch, e.scale, e.ratio) == ("swinir-light", 3, 0.95)]
    x3 = [dataclasses.replace(e, budget=e.budget | {"iterations": 6000}) for e in row]  # one budget
    assert len(x3) == 7
    same = next(line for line in zoo.overview_table(x3).splitlines() if line.startswith("| swinir-light"))
    assert " it)" not in same
    longer = dataclasses.replace(x3[0], budget=x3[0].budget | {"iterations": 60000})
    mixed = next(line for line in zoo.overview_table([longer, *x3[1:]]).splitlines() if "swinir" in line)
    cells = [c.strip() for c in mixed.strip("|").split("|")][2:]
    assert sum(c.endswith("(60k it)") for c in cells) == 1 and sum(c.endswith("(6k it)") for c in cells) == 6
    table = zoo.overview_table([longer, *x3[1:], *(dataclasses.replace(e, ratio=0.99) for e in x3)])
    short = next(line for line in table.splitlines() if line.startswith("| swinir-light x3 r0.99"))
    assert short.count("(6k it)") == 7  # one budget in the row, but under the backbone's longest


def test_a_ratio_0_9_cell_is_held_against_table_1_not_the_ablation() -> None:
    """Table 5 prints x4 r0.9 ISS-P at Set5 35.86 (not a x4 figure): the tables use Table 1's 31.60 and leave
    IHT, which only Table 5 has, without a paper number."""
    x4 = [e for e in zoo.load_zoo() if (e.arch, e.scale, e.ratio) == ("swinir-light", 4, 0.95)]
    r09 = [dataclasses.replace(e, ratio=0.9) for e in x4 if e.method in ("iss-p", "iht")]
    lines = zoo.overview_table(r09).splitlines()
    paper = lines[lines.index(next(line for line in lines if "x4 r0.9 " in line)) + 1]
    assert paper.startswith("| *paper*") and "31.60" in paper
    assert "35.86" not in paper and "35.17" not in paper
    assert "| 30.25 (31.60) |" in zoo.glance_table(r09)
    full = zoo.markdown_table(r09)
    assert "paper iss-p (table 1)" in full and "(table 5)" not in full


def test_the_readme_shows_the_zoo_as_it_is() -> None:
    """The README's zoo table is ``python -m iss zoo table --overview`` of the bundled manifest, so the front
    page cannot fall behind a new cell; every PSNR there is the manifest's, each paper row the paper's."""
    readme = (ROOT / "README.md").read_text()
    start = readme.index("<!-- zoo-table: python -m iss zoo table --overview -->\n")
    shown = readme[readme.index("\n", start) + 1 : readme.index("<!-- /zoo-table -->", start)]
    entries = zoo.load_zoo()
    assert shown.strip() == zoo.overview_table(entries)
    cell = ("swinir-light", 4, 0.95, "iss-p")
    iss_p = next(e for e in entries if (e.arch, e.scale, e.ratio, e.method) == cell)
    row = next(line for line in shown.splitlines() if line.startswith("| swinir-light x4 r0.95 |"))
    assert f"{iss_p.metrics['Set5']['psnr']:.2f} / {iss_p.metrics['Urban100']['psnr']:.2f}" in row
