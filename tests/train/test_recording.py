"""Recorded analysis runs as a library: resumable states of both runs, with optional optimizer state."""

from __future__ import annotations

from pathlib import Path

import torch
from common import TINY

from iss.train.recording import RUNS, load_state, optimizer_runs, save_state
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
