"""The Analysis tab as plain functions (no server): live ISS-P vs IHT runs, their states, recordings."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import plotly.graph_objects as go
import pytest
import torch
from common import ROOT, TINY

from iss.ui import analysis, figures
from iss.ui.recording import load_recording, load_state, save_recording, save_state


@pytest.mark.slow  # ~3 s idle, much more on a loaded machine
def test_train_live_streams_updates() -> None:
    updates = list(
        analysis.train_live(
            "swinir-light", 2, 0.9, 0.95, 3, 2, 8, 2, arch_kwargs=TINY, update_seconds=0.0, device="cpu"
        )
    )
    assert len(updates) >= 3
    flips, grads, training, status = updates[-1]
    assert all(isinstance(f, go.Figure) for f in (flips, grads, training))
    assert "3 / 3" in status and "too short" in status
    names = {trace.name for trace in flips.data}
    assert any(n.startswith("ISS-P") for n in names) and any(n.startswith("IHT") for n in names)
    # same init, same batches: the first losses agree exactly
    first_losses = [trace.y[0] for trace in training.data if trace.name.endswith("loss")]
    assert len(first_losses) == 2 and first_losses[0] == pytest.approx(first_losses[1])


def test_live_run_state_round_trip(tmp_path: Path) -> None:
    run = analysis.build_live_run("swinir-light", 2, 0.9, 0.95, 100, None, arch_kwargs=TINY)
    batches = analysis.training_batches(2, 8, 2)
    for i in range(1, 3):
        lr, hr = next(batches)
        for name in run.trainers:
            run.traces[name].commit(i, run.trainers[name].step(lr, hr))
    save_state(tmp_path / "s.safetensors", run.models, run.pruners, {"iteration": 2})
    fresh = analysis.build_live_run("swinir-light", 2, 0.9, 0.95, 100, None, arch_kwargs=TINY, seed=1)
    assert load_state(tmp_path / "s.safetensors", fresh.models, fresh.pruners) == {"iteration": 2}
    for name in run.models:
        saved = dict(run.models[name].named_parameters())
        for key, param in fresh.models[name].named_parameters():
            assert torch.equal(param, saved[key].detach().half().float())
        assert fresh.pruners[name].iteration == 2
        for key, mask in run.pruners[name].masks.items():
            assert torch.equal(fresh.pruners[name].masks[key], mask)
    save_recording(tmp_path, {"arch": "swinir-light", "states": []}, run.traces)
    config, traces = load_recording(tmp_path)
    assert config["iterations_done"] == 2 and config["layers"] == run.traces["iss-p"].layers
    assert traces["iht"].loss == pytest.approx(run.traces["iht"].loss, rel=1e-3)
    layer = config["layers"][0]
    assert traces["iss-p"].grad_norm[layer] == pytest.approx(run.traces["iss-p"].grad_norm[layer], rel=0.01)


def test_downsample_keeps_mass() -> None:
    x, y = figures.downsample(list(range(1000)), [1.0 if i % 10 == 0 else 0.0 for i in range(1000)], 100)
    assert len(x) == 100 and np.mean(y) == pytest.approx(0.1)


@pytest.mark.slow  # two short training runs
def test_record_analysis_script_writes_a_resumable_recording(tmp_path: Path, monkeypatch) -> None:
    import importlib.util

    spec = importlib.util.spec_from_file_location("record", ROOT / "benchmarks" / "record_analysis.py")
    record = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(record)
    out = tmp_path / "rec"
    args = ["--out", str(out), "--iterations", "4", "--states", "2", "--flush-every", "2", "--batch", "2",
            "--patch", "8", "--arch-kwargs", json.dumps(TINY), "--ratio", "0.9"]  # fmt: skip
    assert record.main(args) == 0
    config, traces = load_recording(out)
    assert config["iterations_done"] == 4 and [s["iteration"] for s in config["states"]] == [2, 4]
    assert len(config["layers"]) > 2 and traces["iss-p"].iterations == [1, 2, 3, 4]
    run = analysis.build_live_run("swinir-light", 2, 0.9, 0.95, 100_000, None, arch_kwargs=TINY)
    meta = load_state(out / "state_4.safetensors", run.models, run.pruners)
    assert meta["iteration"] == 4 and run.pruners["iht"].iteration == 4
    # a live run can start from a recorded state; it goes on from the recorded iteration
    monkeypatch.setattr(analysis, "RECORDINGS_DIR", tmp_path)
    assert analysis.recorded_states() == [analysis.RANDOM_INIT, "rec @ 2", "rec @ 4"]
    *_, status = list(
        analysis.train_live(iterations=2, start="rec @ 2", patch=8, batch=2, update_seconds=0.0)
    )[-1]
    assert "iteration 4," in status and "too short" not in status
    figs = analysis.recorded_figures("rec")
    assert "4 iterations of each run" in figs[-1]
    assert record.main(["--out", str(out), "--rewrite", "--keep-states", "last"]) == 0
    assert [s["iteration"] for s in load_recording(out)[0]["states"]] == [4]
    assert not (out / "state_2.safetensors").exists() and (out / "state_4.safetensors").exists()


def test_rewrite_upgrades_states_without_threshold_hints(tmp_path: Path) -> None:
    import importlib.util

    from safetensors import safe_open
    from safetensors.torch import load_file, save_file

    spec = importlib.util.spec_from_file_location("record", ROOT / "benchmarks" / "record_analysis.py")
    record = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(record)
    run = analysis.build_live_run("swinir-light", 2, 0.9, 0.95, 100, None, arch_kwargs=TINY)
    path = save_state(tmp_path / "state_0.safetensors", run.models, run.pruners, {"iteration": 0})
    save_recording(tmp_path, {"states": [{"iteration": 0, "file": path.name}]}, run.traces)
    tensors = load_file(str(path))  # make it look like a state from before ``tau`` existed
    with safe_open(str(path), framework="pt") as f:
        metadata = f.metadata()
    pruners = json.loads(metadata["pruner"])
    for skeleton in pruners.values():
        skeleton["__dict__"] = [kv for kv in skeleton["__dict__"] if kv[0] != "tau"]
    tensors = {k: v for k, v in tensors.items() if ".pruner.tau/" not in k}
    save_file(tensors, str(path), metadata={**metadata, "pruner": json.dumps(pruners)})
    with pytest.raises(KeyError, match="tau"):
        load_state(path, run.models, run.pruners)
    assert record.main(["--out", str(tmp_path), "--rewrite"]) == 0
    assert load_state(path, run.models, run.pruners) == {"iteration": 0}
