"""Carrying a plan's data to a GPU machine and the results back, within the device tool's limits."""

from __future__ import annotations

import json
import re
import tarfile
from pathlib import Path

import numpy as np
import pytest
from common import ROOT

from iss.data import BenchmarkSet, list_images, read_image
from iss.zoo.pack import MIB, export_cells, pack_data, tracked_files
from iss.zoo.plan import load_plan


@pytest.fixture
def plan(tmp_path: Path) -> Path:
    path = tmp_path / "plan.json"
    path.write_text(
        json.dumps(
            {
                "version": 1,
                "train_data": ["train/T91"],
                "eval": ["Set5", "Set14"],
                "groups": [
                    {"arch": "swinir-light", "scale": 2, "ratio": 0.9, "iters": 10, "methods": ["l1"]}
                ],
            }
        )
    )
    return path


def test_pack_keeps_every_pixel_and_leaves_out_what_does_not_fit(
    plan: Path, data_root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ISS_CACHE_DIR", str(tmp_path / "cache"))
    out = tmp_path / "pack"
    tracked = tracked_files(ROOT)
    budget = (sum(tracked.values()) + 10 * MIB) / MIB  # T91 (~7 MiB as WebP) and Set5, not Set14 too
    skipped = pack_data(load_plan(plan), data_root, out, budget_mib=budget, log=lambda _: None)
    assert skipped == ["Set14"]
    packed = list_images(out / "data" / "train" / "T91")
    originals = list_images(data_root / "train" / "T91")
    assert [p.stem for p in packed] == [p.stem for p in originals]
    assert all(p.suffix == ".webp" for p in packed)
    for a, b in zip(packed[:10], originals[:10], strict=True):
        assert np.array_equal(read_image(a), read_image(b))
    # Set5 keeps its shipped LR files (found by name), so the packed set gives the same samples.
    here, there = (
        BenchmarkSet(data_root / "benchmarks", "Set5", 4),
        BenchmarkSet(out / "data" / "benchmarks", "Set5", 4),
    )
    assert (there.lr_dir / "babyx4.png").is_file()
    for a, b in zip(here, there, strict=True):
        assert np.array_equal(a.hr, b.hr) and np.array_equal(a.lr, b.lr)
    assert (out / "COMMIT").read_text()
    # Without room for the training data, the error names what takes the room.
    largest = max(tracked, key=tracked.get)
    with pytest.raises(
        ValueError, match=rf"exceed the .* MiB budget by .*{re.escape(largest)}.*device_tree.sh slim"
    ):
        pack_data(load_plan(plan), data_root, tmp_path / "pack2", budget_mib=budget - 9, log=lambda _: None)


def test_export_splits_results_under_the_size_limit_without_states(tmp_path: Path) -> None:
    work = tmp_path / "work"
    (work / "plan.json").parent.mkdir()
    (work / "plan.json").write_text("{}")
    rng = np.random.default_rng(0)
    for name in ("a", "b", "c"):
        folder = work / name
        folder.mkdir()
        (folder / "cell.json").write_text("{}")
        (folder / "model.safetensors").write_bytes(rng.bytes(int(0.6 * MIB)))
        (folder / "state.pt").write_bytes(b"big")
        (folder / "recording").mkdir()
        (folder / "recording" / "series.npz").write_bytes(b"x")
    files = export_cells(work, tmp_path / "out", max_mib=1.0, log=lambda _: None)
    assert len(files) == 3 and all(f.stat().st_size <= MIB for f in files)
    names = set()
    for f in files:
        with tarfile.open(f) as tar:
            names |= set(tar.getnames())
    assert "plan.json" in names and "b/recording/series.npz" in names and "c/model.safetensors" in names
    assert not any(n.endswith("state.pt") for n in names)
    with pytest.raises(ValueError, match="at most 2 come back"):
        export_cells(work, tmp_path / "out2", max_mib=1.0, max_files=2, log=lambda _: None)


def test_export_leaves_out_the_oldest_recording_states_that_do_not_fit(tmp_path: Path) -> None:
    """A round's checkpoints always come back; recording states fill what room is left, newest first, both
    runs' states of one iteration together (a merged recording needs both)."""
    work = tmp_path / "work"
    rng = np.random.default_rng(0)
    for name in ("iss-p", "iht"):
        folder = work / name
        (folder / "recording").mkdir(parents=True)
        (folder / "cell.json").write_text("{}")
        (folder / "model.safetensors").write_bytes(rng.bytes(int(0.5 * MIB)))
        (folder / "recording" / "series.npz").write_bytes(b"x")
        for iteration in (500, 750):
            (folder / "recording" / f"state_{iteration}.safetensors").write_bytes(rng.bytes(int(0.4 * MIB)))
    logged: list[str] = []
    files = export_cells(work, tmp_path / "out", max_mib=1.0, max_files=2, log=logged.append)
    names = set()
    for f in files:
        assert f.stat().st_size <= MIB
        with tarfile.open(f) as tar:
            names |= set(tar.getnames())
    assert {"iss-p/model.safetensors", "iht/model.safetensors", "iht/recording/series.npz"} <= names
    assert {"iss-p/recording/state_750.safetensors", "iht/recording/state_750.safetensors"} <= names
    assert not any("state_500" in n for n in names)
    assert any("iteration 500" in line for line in logged)
