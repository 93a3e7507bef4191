"""Recorded analysis runs as a library: resumable states of both runs, with optional optimizer state."""

from __future__ import annotations

import math
from pathlib import Path

import torch
from common import TINY

from iss.train import recording
from iss.train.recording import (
    RUNS,
    RunTrace,
    load_recording,
    load_state,
    merge_recordings,
    optimizer_runs,
    recording_config,
    save_recording,
    save_state,
    thin,
)
from iss.ui import analysis


def _trained_run(steps: int = 2) -> analysis.LiveRun:
    """A tiny live run after ``steps`` iterations (Adam has moments)."""
    run = analysis.build_live_run("swinir-light", 2, 0.9, 0.95, 100, None, arch_kwargs=TINY)
    batches = analysis.training_batches(2, 8, 2)
    for i in range(1, steps + 1):
        lr, hr = next(batches)
        for name in RUNS:
            run.traces[name].commit(i, run.trainers[name].step(lr, hr))
    return run


def test_state_carries_adam_moments(tmp_path: Path) -> None:
    run = _trained_run()
    optimizers = {name: run.trainers[name].optimizer.state_dict() for name in RUNS}
    path = save_state(tmp_path / "s.safetensors", run.models, run.pruners, {"iteration": 2}, optimizers)
    assert sorted(optimizer_runs(path)) == sorted(RUNS)
    fresh = analysis.build_live_run("swinir-light", 2, 0.9, 0.95, 100, None, arch_kwargs=TINY, seed=1)
    fresh_optimizers = {name: fresh.trainers[name].optimizer for name in RUNS}
    assert load_state(path, fresh.models, fresh.pruners, fresh_optimizers) == {"iteration": 2}
    for name in RUNS:
        saved, loaded = optimizers[name], fresh_optimizers[name].state_dict()
        assert loaded["param_groups"][0]["betas"] == list(saved["param_groups"][0]["betas"])
        for index, moments in saved["state"].items():
            for key in ("step", "exp_avg", "exp_avg_sq"):
                assert torch.equal(loaded["state"][index][key], moments[key]), (name, index, key)


def test_state_without_optimizer_still_loads(tmp_path: Path) -> None:
    run = _trained_run()
    path = save_state(tmp_path / "old.safetensors", run.models, run.pruners, {"iteration": 2})
    assert optimizer_runs(path) == []
    fresh = analysis.build_live_run("swinir-light", 2, 0.9, 0.95, 100, None, arch_kwargs=TINY, seed=1)
    optimizers = {name: fresh.trainers[name].optimizer for name in RUNS}
    load_state(path, fresh.models, fresh.pruners, optimizers)
    assert all(not opt.state for opt in optimizers.values())  # left fresh: Adam restarts
    assert fresh.pruners["iht"].iteration == 2


def _trace(n: int, first: int = 1) -> RunTrace:
    trace = RunTrace(layers=["a"], finetune_from=20)
    trace.iterations = list(range(first, n + 1))
    trace.loss = [float(i) for i in trace.iterations]
    trace.flips_total = [math.nan if i <= 10 else 2.0 * i for i in trace.iterations]  # none while warming up
    trace.distance_first = trace.distance_window = [i / 10 for i in trace.iterations]
    for series in ("flips", "grad_norm", "grad_var"):
        getattr(trace, series)["a"] = [float(i) for i in trace.iterations]
    trace.val_iterations, trace.val_psnr = [1, 25], [20.0, 25.0]
    return trace


def test_thinning_keeps_window_means_and_last_distances() -> None:
    """One entry per 10 iterations at each window's end: rates averaged (NaN where none was reported),
    distances as they ended, validation untouched."""
    thinned = thin(_trace(25), 10)
    assert thinned.iterations == [10, 20, 25]
    assert thinned.loss == [5.5, 15.5, 23.0] and thinned.flips["a"] == [5.5, 15.5, 23.0]
    assert math.isnan(thinned.flips_total[0]) and thinned.flips_total[1:] == [31.0, 46.0]
    assert thinned.distance_first == [1.0, 2.0, 2.5]
    assert thinned.val_iterations == [1, 25] and thinned.finetune_from == 20
    assert thin(_trace(25), 1).iterations == list(range(1, 26))
    late = thin(_trace(25, first=8), 10)  # a run recorded from iteration 8: the same windows
    assert late.iterations == [10, 20, 25] and late.loss == [9.0, 15.5, 23.0]


def test_merged_recordings_are_thinned_to_bundle_size(tmp_path: Path, monkeypatch) -> None:
    """A long recording is merged at most ``MAX_POINTS`` entries a run and says how many iterations it covers
    and over how many each point is averaged; the Analysis tab says so."""
    monkeypatch.setattr(recording, "MAX_POINTS", 10)
    parts = {}
    for run, first in zip(RUNS, (1, 4), strict=True):
        parts[run] = save_recording(tmp_path / run, {"seconds": 5.0}, {run: _trace(25, first)})
    merged = merge_recordings(parts, tmp_path / "merged", {"arch": "swinir-light"})
    config, traces = load_recording(merged)
    assert config["iterations_done"] == 25 and config["every"] == 3
    assert traces["iss-p"].iterations == [3, *traces["iht"].iterations] == [3, 6, 9, 12, 15, 18, 21, 24, 25]
    monkeypatch.setattr(analysis, "RECORDINGS_DIR", tmp_path)
    assert "25 iterations of each run" in analysis.recorded_figures("merged")[-1]
    assert "Each point is the mean of 3 iterations." in analysis.recorded_figures("merged")[-1]


def test_a_recordings_config_reads_without_its_series(tmp_path: Path) -> None:
    """Labels and menus need only ``run.json``: ``recording_config`` gives what ``load_recording`` does
    without opening ``series.npz`` (the bundled series are megabytes each)."""
    folder = save_recording(tmp_path / "rec", {"arch": "swinir-light", "scale": 2}, {"iss-p": _trace(5, 1)})
    config, _ = load_recording(folder)
    (folder / "series.npz").unlink()
    assert recording_config(folder) == config
