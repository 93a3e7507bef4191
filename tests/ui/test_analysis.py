"""The Analysis tab as plain functions (no server): live ISS-P vs IHT runs, their states, recordings."""

from __future__ import annotations

import math
import re
import threading
from pathlib import Path

import plotly.graph_objects as go
import pytest
import torch
from common import TINY

import iss
import iss.sparse.speed
from iss.train import NonFiniteLossError
from iss.train.recording import RunTrace, load_recording, load_state, save_recording, save_state
from iss.ui import analysis, catalog


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
    assert "3 / 3" in status and "too short" in status and "K_p 2," in status
    names = {trace.name for trace in flips.data}
    assert any(n.startswith("ISS-P") for n in names) and any(n.startswith("IHT") for n in names)
    # same init, same batches: the first losses agree exactly
    first_losses = [trace.y[0] for trace in training.data if trace.name.endswith("loss")]
    assert len(first_losses) == 2 and first_losses[0] == pytest.approx(first_losses[1])


def test_live_run_keeps_models_and_masks_on_its_device() -> None:
    """The pruners take their masks from models already on the run's device: on a GPU (a ZeroGPU Space)
    masks left on the CPU crashed the first pruning step. ``meta`` stands in for the GPU here."""
    run = analysis.build_live_run("swinir-light", 2, 0.9, 0.95, 100, None, arch_kwargs=TINY, device="meta")
    for name in analysis.RUNS:
        assert {p.device.type for p in run.models[name].parameters()} == {"meta"}
        assert {mask.device.type for mask in run.pruners[name].state_dict()["kept"]} == {"meta"}


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


def _live(iterations: int = 3, **kwargs):
    """A tiny live run from random init (``train_live``'s generator), updating after every iteration."""
    options = dict(arch_kwargs=TINY, update_seconds=0.0, device="cpu", start=analysis.RANDOM_INIT)
    return analysis.train_live("swinir-light", 2, 0.9, 0.95, iterations, 2, 8, 2, **{**options, **kwargs})


def test_stop_keeps_the_plots_and_says_where() -> None:
    stop = threading.Event()
    stream = _live(50, stop=stop)
    next(stream)
    stop.set()
    rest = list(stream)
    assert len(rest) == 1  # one last update, then the run ends
    flips, grads, training, status = rest[0]
    assert "Stopped at iteration 1** (1 done; you pressed Stop)" in status and "1 / 50" in status  # mid-step
    assert all(len(fig.data) > 0 for fig in (flips, grads, training))
    assert len(next(t for t in training.data if t.name == "ISS-P loss").x) == 1


@pytest.mark.parametrize(
    ("error", "message"),
    [
        (NonFiniteLossError("loss is nan at iteration 2"), "Stopped: loss is nan at iteration 2"),
        (RuntimeError("DefaultCPUAllocator: can't allocate memory"), "Stopped: out of memory at iteration 2"),
    ],
    ids=["nan-loss", "out-of-memory"],
)
def test_failures_end_with_a_message(monkeypatch: pytest.MonkeyPatch, error: Exception, message: str) -> None:
    step = iss.train.Trainer.step
    calls = []

    def failing_step(self, lr, hr):
        calls.append(1)
        if len(calls) > 2:  # both runs did iteration 1
            raise error
        return step(self, lr, hr)

    monkeypatch.setattr(iss.train.Trainer, "step", failing_step)
    *_, (flips, _grads, _training, status) = list(_live(5))
    assert message in status and "1 / 5" in status and len(flips.data) > 0


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("iterations", math.nan, "iterations must be a whole number"),
        ("prune_iters", math.nan, "K_p"),
        ("prune_iters", math.inf, "K_p"),
        ("ratio", 1.5, "pruning ratio must be between 0 and 1"),
        ("alpha", math.nan, "alpha must be a finite number"),
        ("patch", 4, "LR patch 8-64"),
        ("batch", 2.5, "batch must be a whole number"),
        ("arch", "resnet", "unknown backbone 'resnet'"),
        ("layers", ["nope.weight"], "no prunable layer 'nope.weight'"),
    ],
)
def test_bad_settings_get_a_clear_message(field: str, value, message: str) -> None:
    settings = dict(
        arch="swinir-light", scale=2, ratio=0.9, alpha=0.95, iterations=2, prune_iters=2, patch=8, batch=2
    )
    settings[field] = value
    with pytest.raises(ValueError, match=re.escape(message)):
        next(analysis.train_live(**settings, arch_kwargs=TINY, device="cpu", start=analysis.RANDOM_INIT))


def test_plan_bounds_memory_and_time(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(iss.sparse.speed, "gflops", lambda kind, arch, device: 50.0)
    plan = analysis.plan_live_run("edsr-l", 4, 100, 64, 32, device="cpu")  # 7.8 GB and counting
    assert (plan.batch, plan.patch) != (32, 64) and plan.memory_bytes <= plan.budget_bytes
    assert plan.seconds_per_iteration <= analysis.MAX_ITERATION_SECONDS
    text = plan.describe()
    assert "Batch 32 with LR patch 64 would need about" in text and f"shrunk to batch {plan.batch}" in text
    assert "A live run stops after 15 min" in text
    small = analysis.plan_live_run("swinir-light", 2, 5000, 16, 4, device="cpu")
    assert (small.batch, small.patch, small.iterations) == (
        4,
        16,
        2000,
    ) and "capped at 2000" in small.describe()
    monkeypatch.setattr(analysis.cost, "memory_budget", lambda device: 100e6)
    with pytest.raises(ValueError, match="too big for a live run here even at batch 1 and LR patch 8"):
        analysis.plan_live_run("edsr-l", 4, 10, 16, 4, device="cpu")


def test_the_first_plot_estimate_follows_the_machines_load(monkeypatch: pytest.MonkeyPatch) -> None:
    """A first plot once expected in 1.0 s took 9.2 s: 2 cores, others keep 6 threads busy: 4x idle."""
    monkeypatch.setattr(iss.sparse.speed, "_observed", {})  # the priors, not the tiny runs of other tests
    idle = analysis.plan_live_run("swinir-light", 2, 10, 16, 4, device="cpu")
    monkeypatch.setattr(iss.sparse.speed, "_system", lambda: (6.0, 2, 2))
    monkeypatch.setattr(iss.sparse.speed, "_usage", lambda: (0.0, 6.0, 0.0))
    monkeypatch.setattr(torch, "get_num_threads", lambda: 2)
    busy = analysis.plan_live_run("swinir-light", 2, 10, 16, 4, device="cpu")
    assert (busy.batch, busy.patch) == (idle.batch, idle.patch) == (4, 16)
    assert busy.first_update_seconds == pytest.approx(4 * idle.first_update_seconds)
    assert busy.seconds_per_iteration == pytest.approx(4 * idle.seconds_per_iteration)
    assert "about 25% of the CPU" in busy.describe() and "load" not in idle.describe()


def test_bundled_recording_is_the_default_start_with_its_optimizer_state(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The factory's CPU recording (SwinIR-light x4, 0.95, K_p 30,000): the app starts from its last state."""
    monkeypatch.setattr(iss.sparse.speed, "gflops", lambda kind, arch, device: 50.0)
    start = analysis.default_start()
    assert start == "swinir-light_x4_r0.95_cpu @ 22500"
    settings = analysis.start_settings(start)
    assert settings["optimizer"] and settings["prune_iters"] == 30000
    text = analysis.plan_live_run("swinir-light", 2, 10, 16, 4, start, device="cpu").describe()
    assert "with optimizer state" in text and "swinir-light x4" in text  # the recording's scale, not x2


def test_a_run_resumed_from_the_recording_keeps_its_learning_rate_and_its_contrast() -> None:
    """Resumed at the recorded state, both runs hold the recording's learning rate there (its cosine schedule
    at 22,500 iterations, not the random-init ``LIVE_LR``), and in 10 iterations ISS-P's mask flips well over
    twice IHT's, as in the recording (at ``LIVE_LR`` both move a tenth as much: docs/app.md)."""
    start = analysis.default_start()
    run = analysis.build_live_run("swinir-light", 4, 0.95, 0.95, 30000, None, start)
    assert run.config["lr"] == pytest.approx(3.533e-4, rel=1e-3)
    assert all(trainer.lr == run.config["lr"] for trainer in run.trainers.values())
    batches = analysis.training_batches(4, 16, 4, None, 0)
    for i in range(1, 11):
        lr, hr = next(batches)
        for name in analysis.RUNS:
            run.traces[name].commit(run.start_iteration + i, run.trainers[name].step(lr, hr))
    flips = {name: sum(trace.flips_total) for name, trace in run.traces.items()}
    assert flips["iss-p"] > 0.2 and flips["iss-p"] > 2 * flips["iht"], flips  # per mille, summed


@pytest.mark.parametrize("name", ["..", "../../checkpoints", "/etc", "x @ 1"])
def test_recordings_are_named_never_reached_by_path(name: str) -> None:
    """Only the bundled recordings' names open a folder: a client's path gets the list of names instead."""
    with pytest.raises(KeyError, match="choose one of"):
        analysis.recording_layers(name)
    with pytest.raises(KeyError, match="no recorded state"):
        analysis.start_settings(f"{name} @ 1")


def _traces(rows: list[dict[str, tuple[float, float, float, float]]]) -> dict[str, RunTrace]:
    """Two runs' traces from per-iteration (whole-mask flips, distance to the first mask, flips in layer a,
    flips in layer b) per run."""
    traces = {run: RunTrace(layers=["a.weight", "b.weight"]) for run in ("iss-p", "iht")}
    for i, row in enumerate(rows, 1):
        for run, (total, distance, a, b) in row.items():
            traces[run].commit(i, 0.1)
            traces[run].flips_total[-1], traces[run].distance_first[-1] = total, distance
            traces[run].flips["a.weight"][-1], traces[run].flips["b.weight"][-1] = a, b
    return traces


def test_the_mask_summary_says_what_the_plot_shows_when_iht_moves_more() -> None:
    """Every sentence comes from the plotted series (distance to the first mask, each plotted layer's flips):
    where IHT moves more the text says so, even when ISS-P's whole-mask flips (not plotted) are larger."""
    traces = _traces(
        [
            {"iss-p": (0.9, 4.0, 0.1, 0.3), "iht": (0.1, 6.0, 0.8, 0.3)},
            {"iss-p": (0.9, 5.5, 0.1, 0.3), "iht": (0.1, 9.0, 1.0, 0.31)},
        ]
    )
    text = analysis.mask_summary(traces, ["a.weight", "b.weight"])
    assert "ISS-P is 5.5‰ from its first selection, IHT 9‰ (iteration 2): IHT moved further." in text
    assert "a: ISS-P flips 0.1‰ of its weights per iteration on average, IHT 0.9‰: IHT flips more." in text
    assert "b: ISS-P flips 0.3‰" in text and "about level" in text
    assert "ISS-P moved further" not in text and "ISS-P flips more" not in text
    assert analysis.mask_summary({"iss-p": traces["iss-p"]}, ["a.weight"]) == ""


def test_the_mask_summary_stops_at_the_freeze() -> None:
    """After K_p the masks are frozen: the summary reads the pruning stage (the plot's dotted line)."""
    traces = _traces(
        [
            {"iss-p": (0.5, 8.0, 0.5, 0.5), "iht": (0.1, 2.0, 0.1, 0.1)},
            {"iss-p": (0.0, 0.0, 0.0, 0.0), "iht": (0.0, 40.0, 0.0, 0.0)},
        ]
    )
    for trace in traces.values():
        trace.finetune_from = 2
    text = analysis.mask_summary(traces, ["a.weight"])
    assert "ISS-P is 8‰ from its first selection, IHT 2‰ (iteration 1): ISS-P moved further." in text


def test_each_recording_says_whether_it_made_the_shipped_checkpoints() -> None:
    """The recordings are compared field by field with checkpoints/zoo.json's budgets of their cell."""
    assert analysis.recording_differences("swinir-light_x4_r0.95_cpu") == []
    assert "made the zoo's ISS-P and IHT" in analysis.recording_origin("swinir-light_x4_r0.95_cpu")
    ramp = analysis.recording_differences("swinir-light_x4_r0.99_cpu")
    assert ramp == ["ISS-P with no alpha_ramp: constant alpha 0.95 (shipped ISS-P: alpha_ramp 10,000)"]
    first_round = analysis.recording_differences("swinir-light_x2_r0.95_cpu")
    assert "6,000 iterations (shipped ISS-P and IHT: 60,000 iterations)" in first_round
    labels = dict((name, label) for label, name in analysis.recording_choices())
    assert "made the shipped ISS-P and IHT" in labels["swinir-light_x4_r0.95_cpu"]
    assert "alpha_ramp" in labels["swinir-light_x4_r0.99_cpu"]


def test_recordings_are_listed_by_backbone_scale_and_ratio() -> None:
    """The dropdown puts a cell's ratios in numeric order (0.9 before 0.95), not the names' string order."""
    names = [name for _, name in analysis.recording_choices()]
    assert names.index("swinir-light_x2_r0.9_cpu") < names.index("swinir-light_x2_r0.95_cpu")
    assert names.index("swinir-light_x2_r0.95_cpu") < names.index("swinir-light_x3_r0.95_cpu")
    assert names.index("cat-r_x4_r0.95_cpu") < names.index("swinir-light_x2_r0.9_cpu")


def test_the_tab_opens_on_the_default_cells_recording_with_its_contrast() -> None:
    """The default cell (x4 r0.95) has the recording of its shipped runs: the tab opens on it, with no note,
    and its summary reads ISS-P's larger drift off the plot."""
    assert catalog.default_cell() == ("swinir-light", 4, 0.95)
    name = analysis.default_recording()
    assert name == "swinir-light_x4_r0.95_cpu"
    assert analysis.opening_note() == ""
    *_, summary = analysis.recorded_figures(name)
    assert (
        "ISS-P is 63.1‰ from its first selection, IHT 37.3‰ (iteration 29,990): ISS-P moved further"
        in summary
    )


def test_a_default_cell_without_a_shipped_recording_opens_on_the_same_recipes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """x2 r0.95's bundled recording is of 6,000-iteration runs, not the shipped ones: the tab opens on the
    shipped pair of the same recipe and ratio nearest in scale (x3 r0.95) and says why."""
    monkeypatch.setattr(catalog, "default_cell", lambda zoo_path=None: ("swinir-light", 2, 0.95))
    assert analysis.default_recording() == "swinir-light_x3_r0.95_cpu"
    note = analysis.opening_note()
    assert "swinir-light_x2_r0.95_cpu" in note and "same recipe" in note


def test_a_default_cell_with_its_own_shipped_recording_opens_on_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(catalog, "default_cell", lambda zoo_path=None: ("cat-r", 2, 0.95))
    assert analysis.default_recording() == "cat-r_x2_r0.95_cpu"
    assert analysis.opening_note() == ""


def test_a_resumed_live_run_plots_the_layers_that_flip_most_after_its_state() -> None:
    """At the bundled state (x4 r0.95 @ 22,500) the quarter/three-quarter layers barely flip (0.0015-0.05‰ per
    iteration in the recording): a live run there plots the two that flip most in the recorded 2,500
    iterations after it, so its plots move from the first updates."""
    start = analysis.default_start()
    assert analysis.busiest_layers(start) == [
        "layers.0.residual_group.blocks.1.mlp.fc2.weight",
        "layers.1.residual_group.blocks.0.attn.proj.weight",
    ]
    assert analysis.busiest_layers(analysis.RANDOM_INIT) == []
    with pytest.raises(KeyError, match="no recorded state"):
        analysis.busiest_layers("../etc @ 1")
