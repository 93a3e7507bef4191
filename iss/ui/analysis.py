"""The Analysis tab: ISS-P vs IHT trained side by side (same init, same batches), streamed as figures.

A live run (``train_live``) is planned and bounded by ``plan_live_run`` (expected time and memory, from
``iss.ui.cost``), built by ``build_live_run`` and fed by ``training_batches``; it stops cleanly within a
layer of its current step when its ``stop`` event is set. The recorded runs bundled in ``assets/recordings``
are shown whole and offer states to start a live run from (by default the latest, mid-pruning, where ISS-P
and IHT differ); the zoo factory makes them (``iss.train.recording.TrainRecorder``). No gradio.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import math
import os
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

import iss
import iss.sparse.speed
import iss.train.recording
from iss.train import NonFiniteLossError
from iss.train.interrupt import Interrupted, interruptible
from iss.train.recording import (
    RUNS,
    RunTrace,
    list_recordings,
    load_recording,
    load_state,
    optimizer_runs,
    recording_config,
    state_lr,
    validate,
    validation_pair,
)

from . import catalog, cost, figures
from .catalog import ASSETS, EXAMPLES_DIR, SCALES, default_device

RECORDINGS_DIR = ASSETS / "recordings"

# Live analysis defaults from random init; the app starts from the latest recorded state instead when one is
# bundled (``default_start``), which sets backbone, scale, ratio, alpha and K_p. 300 iterations: about two
# minutes on 2 cores at the 0.31-0.44 s per iteration docs/app.md measured (#latency); the flips counted
# there are in docs/app.md's Analysis section.
LIVE_DEFAULTS = dict(
    arch="swinir-light", scale=2, ratio=0.95, alpha=0.95, iterations=300, prune_iters=80, patch=16, batch=4
)
LIVE_LR = 2e-4  # a run from random init (one from a recorded state holds that state's learning rate)
MAX_LIVE_ITERATIONS = {"cpu": 2000, "cuda": 20000}
MAX_LIVE_SECONDS = 900
MAX_ITERATION_SECONDS = 30.0  # slower (estimated) iterations are shrunk: batch first, then the LR patch
MAX_PATCH, MAX_BATCH = 64, 32  # the sliders' ranges
VALIDATION_SIZE = 96  # HR side of the quick validation crop
BUSY_SPAN = 2500  # recorded iterations after a start point in which busiest_layers counts flips
SHORT_RUN = 1500  # from random init both masks barely move before ~1.5k iterations (measured on CPU)
RANDOM_INIT = "random init"
LIVE_SETS = ("T91",)  # small enough to load in a second or two when a live run starts
RECORDING_SETS = ("T91", "BSD200")


def recorded_states() -> list[str]:
    """Start points offered to a live run: random init, then ``<recording> @ <iteration>`` per saved state."""
    choices = [RANDOM_INIT]
    for folder in list_recordings(RECORDINGS_DIR):
        config = recording_config(folder)
        states = [s for s in config.get("states", []) if (folder / s["file"]).is_file()]
        choices += [f"{folder.name} @ {s['iteration']}" for s in states]
    return choices


def default_start() -> str:
    """The latest recorded state (mid-pruning: where ISS-P and IHT differ most), else random init."""
    states = recorded_states()
    return max(states[1:], key=lambda s: int(s.rpartition(" @ ")[2]), default=RANDOM_INIT)


def start_settings(start: str) -> dict[str, Any] | None:
    """What a recorded start point fixes (backbone and its kwargs, scale, ratio, alpha, K_p) and suggests
    (batch, LR patch), with ``optimizer``: whether the state carries the optimizer's moments; ``None`` for
    random init."""
    if not start or start == RANDOM_INIT:
        return None
    path, config = _recorded_state(start)
    keys = ("arch", "scale", "ratio", "alpha", "prune_iters", "batch", "patch", "arch_kwargs")
    restored = set(optimizer_runs(path)) >= set(RUNS)
    return {**{k: config[k] for k in keys if k in config}, "optimizer": restored, "lr": state_lr(path)}


def _lr_text(lr: float | None) -> str:
    """`` 3.53e-04`` for a recorded learning rate, nothing when the state holds none."""
    return f" {lr:.3g}" if lr else ""


def recording_names() -> list[str]:
    """Names of the recorded runs bundled in ``assets/recordings``."""
    return [p.name for p in list_recordings(RECORDINGS_DIR)]


def _recording_folder(name: str) -> Path:
    """The folder of bundled recording ``name``: only names ``recording_names`` lists, never a path."""
    names = recording_names()
    if name not in names:
        raise KeyError(f"no recording '{name}'; choose one of: {', '.join(names)}")
    return RECORDINGS_DIR / name


def recording_differences(name: str, zoo_path: str | None = None) -> list[str] | None:
    """How recording ``name`` differs from the runs that made the zoo's ISS-P and IHT checkpoints of its cell,
    field by field (budget and ISS-P's options): ``[]`` when it is those runs, None when the zoo has
    neither checkpoint. Fields the recording does not hold are not compared."""
    config = recording_config(_recording_folder(name))
    if not {"arch", "scale", "ratio"} <= set(config):
        return None
    entries = {}
    for run in RUNS:
        with contextlib.suppress(FileNotFoundError):
            entries[run] = catalog.find_entry(config["arch"], config["scale"], config["ratio"], run, zoo_path)
    if not entries:
        return None
    differences = []
    for key, text in _BUDGET_FIELDS.items():
        shipped = {run: e.budget.get(key) for run, e in entries.items() if e.budget.get(key) is not None}
        apart = {run: v for run, v in shipped.items() if not _same(config.get(key), v)}
        if key in config and apart:
            differences.append(f"{text(config[key])} (shipped {_by_run(apart, text)})")
    recorded = config.get("pruner_options", {})
    shipped_options = entries["iss-p"].budget.get("pruner_options", {}) if "iss-p" in entries else {}
    for option in sorted(set(recorded) | set(shipped_options)):
        if not _same(recorded.get(option), shipped_options.get(option)):
            here = f"{option} {_number(recorded[option])}" if option in recorded else f"no {option}"
            there = f"{option} {_number(shipped_options[option])}" if option in shipped_options else "none"
            alpha = (
                f": constant alpha {config['alpha']}" if option == "alpha_ramp" and "alpha" in config else ""
            )
            differences.append(f"ISS-P with {here}{alpha} (shipped ISS-P: {there})")
    return differences


_BUDGET_FIELDS = {
    "iterations": lambda v: f"{int(v):,} iterations",
    "prune_iters": lambda v: f"K_p {int(v):,}",
    "batch": lambda v: f"batch {v}",
    "patch": lambda v: f"LR patch {v}",
    "lr": lambda v: f"peak LR {float(v):g}",
    "seed": lambda v: f"seed {v}",
}


def _same(a: Any, b: Any) -> bool:
    """Whether two budget values agree (numbers to a relative 1e-9)."""
    if isinstance(a, int | float) and isinstance(b, int | float):
        return math.isclose(float(a), float(b), rel_tol=1e-9)
    return a == b


def _number(value: Any) -> str:
    """``10,000`` for whole numbers, else as written."""
    return f"{int(value):,}" if isinstance(value, int | float) and float(value).is_integer() else str(value)


def _by_run(values: dict[str, Any], text: Any) -> str:
    """``ISS-P and IHT: 60,000 iterations``, or each run's value when they differ."""
    labels = {"iss-p": "ISS-P", "iht": "IHT"}
    if len({repr(v) for v in values.values()}) == 1:
        return f"{' and '.join(labels[r] for r in values)}: {text(next(iter(values.values())))}"
    return ", ".join(f"{labels[r]}: {text(v)}" for r, v in values.items())


def recording_origin(name: str, zoo_path: str | None = None) -> str:
    """One sentence: recording ``name`` is the run behind the zoo's checkpoints of its cell, or how not."""
    differences = recording_differences(name, zoo_path)
    if differences is None:
        return "The zoo has no ISS-P or IHT checkpoint of this recording's cell."
    if not differences:
        return "These are the runs that made the zoo's ISS-P and IHT checkpoints of this cell."
    return "Not the runs behind the zoo's checkpoints of this cell: " + "; ".join(differences) + "."


def recording_choices(zoo_path: str | None = None) -> list[tuple[str, str]]:
    """(label, name) per bundled recording, by backbone, scale and ratio (so r0.9 comes before r0.95), the
    label saying whether it made the shipped checkpoints."""
    choices = []
    for name in sorted(recording_names(), key=lambda name: (_cell(name), name)):
        differences = recording_differences(name, zoo_path)
        if differences is None:
            note = "no shipped checkpoint"
        elif differences:
            note = f"differs from the shipped: {differences[0]}"
        else:
            note = "made the shipped ISS-P and IHT"
        choices.append((f"{name} ({note})", name))
    return choices


def _cell(name: str) -> tuple[str, int, float]:
    """(backbone, scale, ratio) of recording ``name``."""
    config = recording_config(_recording_folder(name))
    return config.get("arch", ""), int(config.get("scale", 0)), float(config.get("ratio", 0.0))


def default_recording(zoo_path: str | None = None) -> str | None:
    """The recording the tab opens on: the app's default cell's (``catalog.default_cell``) when it made that
    cell's shipped checkpoints; else, of the default backbone's recordings that made theirs, one trained
    with the default cell's recipe (``_recipe``), nearest in ratio, then scale; else the default cell's
    own; else the first."""
    default = catalog.default_cell(zoo_path)
    cells = {name: _cell(name) for name in recording_names()}
    shipped = [n for n in cells if recording_differences(n, zoo_path) == []]
    own = [n for n, cell in cells.items() if cell == default]
    if mine := [n for n in own if n in shipped]:
        return mine[0]
    recipe = _recipe(default, zoo_path)
    if near := [n for n in shipped if cells[n][0] == default[0]]:
        return min(
            near,
            key=lambda n: (
                _recipe(cells[n], zoo_path) != recipe,
                abs(cells[n][2] - (default[2] or 0)),
                abs(cells[n][1] - default[1]),
            ),
        )
    return own[0] if own else next(iter(cells), None)


def _recipe(cell: tuple[str, int, float | None], zoo_path: str | None) -> tuple | None:
    """The training budget of a cell's shipped ISS-P (iterations, K_p, batch, LR patch, peak LR), if any."""
    with contextlib.suppress(FileNotFoundError):
        budget = catalog.find_entry(*cell, "iss-p", zoo_path).budget
        return tuple(budget.get(k) for k in ("iterations", "prune_iters", "batch", "patch", "lr"))
    return None


def opening_note(zoo_path: str | None = None) -> str:
    """Why the tab opens on ``default_recording`` when that is not the default cell's own recording."""
    name, default = default_recording(zoo_path), catalog.default_cell(zoo_path)
    if name is None or _cell(name) == default:
        return ""
    arch, scale, ratio = default
    own = [n for n in recording_names() if _cell(n) == default]
    why = (
        f"`{own[0]}` is not the run behind its shipped checkpoints "
        f"({'; '.join(recording_differences(own[0], zoo_path) or [])})"
        if own
        else "no recording of it is bundled"
    )
    shown = "{} x{} r{}".format(*_cell(name))
    same = " with the same recipe" if _recipe(_cell(name), zoo_path) == _recipe(default, zoo_path) else ""
    return (
        f"The app's default cell is {arch} x{scale} r{ratio}, but {why}. Shown: `{name}`, the runs behind "
        f"the shipped {shown} checkpoints{same}."
    )


def busiest_layers(start: str, count: int = 2, span: int = BUSY_SPAN) -> list[str]:
    """For a recorded start point, the ``count`` layers whose masks flip most per iteration (both runs
    together) in the recording's ``span`` iterations after it: what a live run resumed there plots by
    default, so that its plots move within its first minutes ([] for random init)."""
    if not start or start == RANDOM_INIT:
        return []
    name, _, iteration = start.partition(" @ ")
    _recorded_state(start)  # a start point that is not offered is a KeyError
    _, traces = load_recording(_recording_folder(name.strip()))
    after = int(iteration)
    busy: dict[str, float] = {}
    for trace in traces.values():
        inside = [i for i, it in enumerate(trace.iterations) if after < it <= after + span]
        for layer, flips in trace.flips.items():
            finite = [flips[i] for i in inside if math.isfinite(flips[i])]
            busy[layer] = busy.get(layer, 0.0) + (sum(finite) / len(finite) if finite else 0.0)
    return sorted(busy, key=busy.__getitem__, reverse=True)[:count]


def default_layers(layers: Sequence[str], count: int = 2) -> list[str]:
    """Two representative layers (a quarter and three quarters into the network), as the paper's Fig. 3."""
    if len(layers) <= count:
        return list(layers)
    return [layers[len(layers) // 4], layers[(3 * len(layers)) // 4]]


def recorded_figures(
    name: str, layers: Sequence[str] | None = None, zoo_path: str | None = None
) -> tuple[Any, Any, Any, str]:
    """The three analysis figures for a whole recorded run, and a summary: the run's settings, whether it
    made the shipped checkpoints (``recording_origin``), and what its mask plot shows (``mask_summary``)."""
    config, traces = load_recording(_recording_folder(name))
    chosen = [layer for layer in (layers or []) if layer in config["layers"]] or default_layers(
        config["layers"]
    )
    summary = (
        f"Recorded run `{name}`: {config.get('arch')} x{config.get('scale')}, ratio {config.get('ratio')}, "
        f"alpha {config.get('alpha')}, batch {config.get('batch')}, LR patch {config.get('patch')}, "
        f"{config['iterations_done']} iterations of each run on {config.get('device', 'cpu')} "
        f"({config.get('seconds_per_iteration', float('nan')):.2f} s per iteration of both runs). "
        + (f"Each point is the mean of {config['every']} iterations. " if config.get("every", 1) > 1 else "")
        + recording_origin(name, zoo_path)
        + "\n\n"
        + mask_summary(traces, chosen)
    )
    return (
        figures.mask_dynamics_figure(traces, chosen),
        figures.gradient_figure(traces, chosen),
        figures.training_figure(traces),
        summary,
    )


def recording_layers(name: str) -> list[str]:
    """Layers traced in recording ``name``."""
    config = recording_config(_recording_folder(name))
    return list(config["layers"])


@functools.lru_cache(maxsize=16)
def prunable_layers(arch: str, scale: int) -> list[str]:
    """Names of the weights the pruners act on for ``arch`` (what the layer picker offers)."""
    if arch not in iss.archs.list_archs():
        raise ValueError(f"unknown backbone {arch!r}; choose one of: {', '.join(iss.archs.list_archs())}")
    model = iss.archs.build(arch, int(scale))
    return iss.pruning.build("iht", model, 0.5, prune_iters=1).layer_names


@dataclass
class LiveRun:
    """Two models (same init), two pruners (ISS-P, IHT), two trainers, fed from one batch stream."""

    models: dict[str, nn.Module]
    pruners: dict[str, Any]
    trainers: dict[str, Any]
    traces: dict[str, RunTrace]
    start_iteration: int
    config: dict[str, Any]
    optimizer_restored: bool = False  # the recorded state carried Adam's moments (else Adam restarts)


def build_live_run(
    arch: str,
    scale: int,
    ratio: float,
    alpha: float,
    prune_iters: int,
    layers: Sequence[str] | None,
    start: str = RANDOM_INIT,
    *,
    seed: int = 0,
    device: str = "cpu",
    arch_kwargs: dict[str, Any] | None = None,
    lr: float | None = None,
    all_layers: bool = False,
) -> LiveRun:
    """Set up ISS-P and IHT from the same random init, or from a recorded state of both runs (with its
    optimizer state when it has one).

    ``lr`` is held constant; by default it is the recorded state's (where the recording's schedule was at
    that iteration: the masks move as they did in the recording only near it), else ``LIVE_LR``.

    Per-layer series are traced for ``layers`` (two representative ones when empty; unknown names are a
    ``ValueError``), or for every pruned layer with ``all_layers`` (recordings).
    """
    config = dict(
        arch=arch, scale=int(scale), ratio=float(ratio), alpha=float(alpha), prune_iters=int(prune_iters)
    )
    state_path = None
    if start and start != RANDOM_INIT:
        state_path, recorded = _recorded_state(start)
        config.update(
            {k: recorded[k] for k in ("arch", "scale", "ratio", "alpha", "prune_iters") if k in recorded}
        )
        arch_kwargs = recorded.get("arch_kwargs", arch_kwargs)
        lr = lr or state_lr(state_path)
    torch.manual_seed(seed)
    first = iss.archs.build(config["arch"], config["scale"], **(arch_kwargs or {})).to(device).train()
    models = {"iss-p": first, "iht": copy.deepcopy(first)}  # on the device before the pruners mask them
    options = {"iss-p": {"alpha": config["alpha"]}, "iht": {}}
    pruners = {
        run: iss.pruning.build(
            run, models[run], config["ratio"], prune_iters=config["prune_iters"], **options[run]
        )
        for run in RUNS
    }
    names = pruners["iss-p"].layer_names
    if unknown := [n for n in (layers or []) if n not in names]:
        raise ValueError(
            f"{config['arch']} has no prunable layer {unknown[0]!r}; it has {len(names)}, e.g. "
            f"{', '.join(default_layers(names))}"
        )
    chosen = names if all_layers else list(layers or []) or busiest_layers(start) or default_layers(names)
    train_config = iss.train.TrainConfig(lr=lr or LIVE_LR)
    trainers = {run: iss.train.Trainer(models[run], pruners[run], train_config) for run in RUNS}
    start_iteration, restored = 0, False
    if state_path is not None:
        optimizers = {run: trainers[run].optimizer for run in RUNS}
        start_iteration = int(load_state(state_path, models, pruners, optimizers)["iteration"])
        restored = set(optimizer_runs(state_path)) >= set(RUNS)
    traces = {run: RunTrace(layers=chosen) for run in RUNS}
    for run in RUNS:
        pruners[run].add_callback(traces[run].observe)
    config = {**config, "layers": chosen, "lr": train_config.lr}
    return LiveRun(models, pruners, trainers, traces, start_iteration, config, restored)


def _recorded_state(start: str) -> tuple[Path, dict[str, Any]]:
    """Path of the state file named ``<recording> @ <iteration>`` and the recording's config."""
    name, _, iteration = start.partition(" @ ")
    with contextlib.suppress(KeyError):  # not a bundled recording: the list of states says what is
        folder = _recording_folder(name.strip())
        config = recording_config(folder)
        for state in config.get("states", []):
            if str(state["iteration"]) == iteration.strip():
                return folder / state["file"], config
    raise KeyError(f"no recorded state '{start}'; choose one of: {', '.join(recorded_states())}")


def training_batches(
    scale: int,
    patch: int,
    batch: int,
    data_dir: str | None = None,
    seed: int = 0,
    sets: Sequence[str] = LIVE_SETS,
) -> Iterator:
    """Endless (lr, hr) batches of random patches: the training sets when present, else the bundled photos."""
    folders = training_folders(data_dir, sets)
    dataset = iss.data.TrainPatches(folders, int(scale), int(patch), length=int(batch) * 1000, seed=seed)
    epoch = 0
    while True:
        dataset.set_epoch(epoch)
        for start in range(0, len(dataset), int(batch)):
            pairs = [dataset[i] for i in range(start, start + int(batch))]
            yield torch.stack([p[0] for p in pairs]), torch.stack([p[1] for p in pairs])
        epoch += 1


def training_folders(data_dir: str | None, sets: Sequence[str] = LIVE_SETS) -> list[Path]:
    """The training ``sets`` under ``data_dir``/``$ISS_DATA_DIR`` when present, else ``assets/examples``."""
    root = data_dir or os.environ.get("ISS_DATA_DIR")
    if root:
        found = [Path(root) / "train" / name for name in sets if (Path(root) / "train" / name).is_dir()]
        if found:
            return found
    return [EXAMPLES_DIR]


@dataclass
class LivePlan:
    """A live run as it will run: its size after the bounds, its expected cost, and why it was changed."""

    arch: str
    scale: int
    batch: int
    patch: int
    iterations: int
    seconds_per_iteration: float  # both runs
    first_update_seconds: float
    memory_bytes: float
    budget_bytes: float
    device: str
    flops_per_iteration: float = 0.0  # both runs' training steps (what the speed estimate divides)
    notes: list[str] = field(default_factory=list)

    def describe(self) -> str:
        """The expected cost as one Markdown paragraph (shown before a run starts and above its status)."""
        total = self.first_update_seconds + (self.iterations - 1) * self.seconds_per_iteration
        where = "GPU" if self.device.startswith("cuda") else "CPU"
        text = (
            f"**Expected on this {where}**: {self.arch} x{self.scale}, batch {self.batch}, "
            f"LR patch {self.patch}: "
            f"first plot after {cost.approximately(self.first_update_seconds)}, then "
            f"{cost.format_seconds(self.seconds_per_iteration)} per iteration of both runs "
            f"({self.iterations} iterations: {cost.approximately(total)}); memory about "
            f"{cost.format_bytes(self.memory_bytes)} (bound {cost.format_bytes(self.budget_bytes)})."
        )
        if total > MAX_LIVE_SECONDS:
            fit = max(1, int((MAX_LIVE_SECONDS - self.first_update_seconds) / self.seconds_per_iteration) + 1)
            text += f" A live run stops after {MAX_LIVE_SECONDS // 60} min: about {fit} iterations will run."
        return " ".join([text, *self.notes])


def plan_live_run(
    arch: str,
    scale: int,
    iterations: int,
    patch: int,
    batch: int,
    start: str = RANDOM_INIT,
    *,
    device: str | None = None,
    arch_kwargs: dict[str, Any] | None = None,
) -> LivePlan:
    """Check the size of a live run and bound it before anything is built.

    Memory (weights, gradients, Adam and masks of both runs, plus the activations of one batch) must fit
    ``cost.memory_budget`` and an iteration must take at most ``MAX_ITERATION_SECONDS`` (estimated): the batch
    shrinks first, then the LR patch, each with a note; a run that cannot fit at batch 1 and patch 8 is a
    ``ValueError``. Iterations are capped at ``MAX_LIVE_ITERATIONS``.
    """
    device = device or default_device()
    settings = start_settings(start) or {}
    arch, scale = settings.get("arch", arch), int(settings.get("scale", scale))
    arch_kwargs = settings.get("arch_kwargs", arch_kwargs)
    iterations = _whole(iterations, "iterations")
    patch, batch = _whole(patch, "LR patch"), _whole(batch, "batch")
    if arch not in iss.archs.list_archs():
        raise ValueError(f"unknown backbone {arch!r}; choose one of: {', '.join(iss.archs.list_archs())}")
    if scale not in SCALES:
        raise ValueError(f"scale must be one of {SCALES}, got {scale}")
    if not (1 <= batch <= MAX_BATCH and 8 <= patch <= MAX_PATCH):
        raise ValueError(f"batch must be 1-{MAX_BATCH} and LR patch 8-{MAX_PATCH}, got {batch} and {patch}")
    notes = []
    if settings:
        optimizer = "with" if settings["optimizer"] else "without (an older recording: Adam restarts)"
        notes.append(
            f"Starts from `{start}` {optimizer} optimizer state; backbone, scale, ratio "
            f"{settings.get('ratio')}, alpha {settings.get('alpha')} and "
            f"K_p {settings.get('prune_iters', 0):,} are the recording's, and so is the learning rate"
            f"{_lr_text(settings.get('lr'))} (*random init* lets you set them)."
        )
    cap = MAX_LIVE_ITERATIONS["cuda" if device.startswith("cuda") else "cpu"]
    if iterations > cap:
        notes.append(f"Iterations capped at {cap} (asked for {iterations}).")
        iterations = cap
    budget = cost.memory_budget(device)
    speed = iss.sparse.speed.gflops("train", arch, device) * 1e9

    def flops(b: int, p: int) -> float:
        """FLOPs of one iteration of both runs at batch ``b`` and LR patch ``p``."""
        traced = cost.trace(arch, scale, p, p, arch_kwargs=arch_kwargs)
        return len(RUNS) * b * (traced.forward_flops + traced.backward_flops)

    def estimate(b: int, p: int) -> tuple[float, float]:
        """(bytes, seconds per iteration of both runs) at batch ``b`` and LR patch ``p``, traced at ``p``:
        windowed attention pads the patch, so cost does not follow its pixels (CAT-R costs as much at 56
        as at 64)."""
        traced = cost.trace(arch, scale, p, p, arch_kwargs=arch_kwargs)
        weights = len(RUNS) * traced.parameters * cost.BYTES_PER_PARAMETER
        activations = b * traced.saved_bytes * cost.ACTIVATION_OVERHEAD
        return cost.RUN_OVERHEAD + weights + activations, flops(b, p) / speed

    sizes = [(b, patch) for b in range(batch, 0, -1)] + [(1, p) for p in range(patch - 8, 7, -8)]
    fits = next(((b, p) for b, p in sizes if _fits(estimate(b, p), budget)), None)  # traces what it tries
    if fits is None:
        memory, seconds = estimate(1, 8)
        raise ValueError(
            f"{arch} x{scale} is too big for a live run here even at batch 1 and LR patch 8: about "
            f"{cost.format_bytes(memory)} (bound {cost.format_bytes(budget)}) and "
            f"{cost.format_seconds(seconds)} per iteration (bound {MAX_ITERATION_SECONDS:.0f} s)"
        )
    new_batch, new_patch = fits
    if (new_batch, new_patch) != (batch, patch):
        memory, seconds = estimate(batch, patch)
        notes.append(
            f"⚠️ Batch {batch} with LR patch {patch} would need about {cost.format_bytes(memory)} and "
            f"{cost.format_seconds(seconds)} per iteration: shrunk to batch {new_batch}, "
            f"LR patch {new_patch} "
            f"(bounds: {cost.format_bytes(budget)}, {MAX_ITERATION_SECONDS:.0f} s per iteration)."
        )
    memory, seconds = estimate(new_batch, new_patch)
    traced = cost.trace(arch, scale, new_patch, new_patch, arch_kwargs=arch_kwargs)
    validation = len(RUNS) * traced.forward_flops / new_patch**2 * (VALIDATION_SIZE / scale) ** 2
    validation_seconds = validation / (iss.sparse.speed.gflops("dense", arch, device) * 1e9)
    first = iss.sparse.speed.setup_seconds(arch, device) + seconds + validation_seconds
    if note := iss.sparse.speed.load_note(device):
        notes.append(note)
    return LivePlan(
        arch, scale, new_batch, new_patch, iterations, seconds, first, memory, budget, device,
        flops(new_batch, new_patch), notes,
    )  # fmt: skip


def _fits(estimate: tuple[float, float], budget: float) -> bool:
    """Whether (bytes, seconds per iteration) is within the memory budget and the time bound."""
    memory, seconds = estimate
    return memory <= budget and seconds <= MAX_ITERATION_SECONDS


def _whole(value: Any, name: str) -> int:
    """A positive whole number from a UI/API value, or a ``ValueError`` naming the field."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a whole number, got {value!r}") from None
    if not math.isfinite(number) or number < 1 or number != int(number):
        raise ValueError(f"{name} must be a whole number of at least 1, got {value!r}")
    return int(number)


def _check_settings(ratio: Any, alpha: Any, prune_iters: Any) -> tuple[float, float, int]:
    """Ratio in (0, 1), alpha in (0, 1] and K_p >= 1 as numbers, or a ``ValueError`` naming the field."""
    ratio_f, alpha_f = _finite(ratio, "pruning ratio"), _finite(alpha, "alpha")
    if not 0 < ratio_f < 1:
        raise ValueError(f"pruning ratio must be between 0 and 1, got {ratio}")
    if not 0 < alpha_f <= 1:
        raise ValueError(f"alpha must be in (0, 1], got {alpha}")
    return ratio_f, alpha_f, _whole(prune_iters, "K_p (pruning iterations)")


def _finite(value: Any, name: str) -> float:
    """A finite float, or a ``ValueError`` naming the field."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a number, got {value!r}") from None
    if not math.isfinite(number):
        raise ValueError(f"{name} must be a finite number, got {value!r}")
    return number


def train_live(
    arch: str = LIVE_DEFAULTS["arch"],
    scale: int = LIVE_DEFAULTS["scale"],
    ratio: float = LIVE_DEFAULTS["ratio"],
    alpha: float = LIVE_DEFAULTS["alpha"],
    iterations: int = LIVE_DEFAULTS["iterations"],
    prune_iters: int = LIVE_DEFAULTS["prune_iters"],
    patch: int = LIVE_DEFAULTS["patch"],
    batch: int = LIVE_DEFAULTS["batch"],
    layers: Sequence[str] | None = None,
    start: str = RANDOM_INIT,
    *,
    data_dir: str | None = None,
    device: str | None = None,
    seed: int = 0,
    update_seconds: float = 1.0,
    validate_every: int = 25,
    arch_kwargs: dict[str, Any] | None = None,
    stop: threading.Event | None = None,
) -> Iterator[tuple[Any, Any, Any, str]]:
    """Train ISS-P and IHT side by side on the same batches, yielding (flips, gradients, training, status).

    The first update comes after the first iteration; then one about every ``update_seconds``, and the last at
    the end. The size is bounded first (``plan_live_run``), the length by ``MAX_LIVE_SECONDS``. Setting
    ``stop`` ends the run within a layer of the current step (that step is dropped); a NaN loss or running
    out of memory ends it too. Each ends with a last update whose status says why, so the plots drawn so far
    stay.
    """
    device = device or default_device()
    ratio, alpha, prune_iters = _check_settings(ratio, alpha, prune_iters)
    plan = plan_live_run(arch, scale, iterations, patch, batch, start, device=device, arch_kwargs=arch_kwargs)
    building = time.perf_counter()
    run = build_live_run(
        plan.arch, plan.scale, ratio, alpha, prune_iters, layers, start,
        seed=seed, device=device, arch_kwargs=arch_kwargs,
    )  # fmt: skip
    batches = training_batches(plan.scale, plan.patch, plan.batch, data_dir, seed)
    pair = validation_pair(plan.scale)
    iss.sparse.speed.observe_setup(plan.arch, device, time.perf_counter() - building)
    started = last_yield = time.perf_counter()
    stepping = 0.0  # seconds spent in training steps (for the speed estimate of later runs)
    done = 0
    pressed = stop.is_set if stop is not None else lambda: False
    try:
        for done in range(1, plan.iterations + 1):
            lr, hr = next(batches)
            lr, hr = lr.to(device), hr.to(device)
            iteration = run.start_iteration + done
            step_start = time.perf_counter()
            with interruptible(run.models.values(), pressed):  # Stop ends a step of seconds mid-way
                for name in RUNS:
                    run.traces[name].commit(iteration, run.trainers[name].step(lr, hr))
            stepping += time.perf_counter() - step_start
            if done % validate_every == 0 or done in (1, plan.iterations):
                for name in RUNS:
                    run.traces[name].val_iterations.append(iteration)
                    run.traces[name].val_psnr.append(validate(run.models[name], pair, plan.scale))
            elapsed = time.perf_counter() - started
            if stop is not None and stop.is_set():
                yield _live_update(run, done, plan, elapsed, _stopped(run, done, "you pressed Stop"))
                return
            if elapsed > MAX_LIVE_SECONDS:
                reason = f"the {MAX_LIVE_SECONDS // 60} min bound of a live run"
                yield _live_update(run, done, plan, elapsed, _stopped(run, done, reason))
                return
            if done == 1 or done == plan.iterations or time.perf_counter() - last_yield >= update_seconds:
                last_yield = time.perf_counter()
                yield _live_update(run, done, plan, elapsed)
    except Interrupted:
        note = _stopped(run, done - 1, "you pressed Stop")
        yield _live_update(run, done - 1, plan, time.perf_counter() - started, note)
    except NonFiniteLossError as e:
        yield _live_update(run, done - 1, plan, time.perf_counter() - started, f"⚠️ Stopped: {e}")
    except (RuntimeError, MemoryError) as e:
        if not _out_of_memory(e):
            raise
        note = (
            f"⚠️ Stopped: out of memory at iteration {run.start_iteration + done} (batch {plan.batch}, LR "
            f"patch {plan.patch}, estimated {cost.format_bytes(plan.memory_bytes)}). Try a smaller batch "
            "or patch."
        )
        yield _live_update(run, done - 1, plan, time.perf_counter() - started, note)
    finally:
        iss.sparse.speed.observe("train", plan.arch, device, plan.flops_per_iteration * done, stepping)


def mask_summary(traces: dict[str, Any], layers: Sequence[str] = ()) -> str:
    """What the mask plot shows, in sentences computed from its own series: the whole mask's distance to its
    first selection at the last iteration plotted in the pruning stage, then the mean flips per iteration of
    each plotted layer in that stage; each says which run moved more (or that they are level)."""
    if set(traces) < set(RUNS):
        return ""
    found = {run: _pruning_stage(traces[run]) for run in RUNS}
    distance = {run: _last_finite(found[run][1]) for run in RUNS}
    if any(value is None for value in distance.values()):
        return ""
    sentences = [
        f"Whole mask: ISS-P is {distance['iss-p']:.3g}‰ from its first selection, IHT {distance['iht']:.3g}‰ "
        f"(iteration {found['iss-p'][0]:,}): {_compare(distance['iss-p'], distance['iht'], 'moved further')}."
    ]
    for layer in layers:
        flips = {run: _mean(traces[run].flips.get(layer, []), len(found[run][1])) for run in RUNS}
        if None in flips.values():
            continue
        sentences.append(
            f"{layer.removesuffix('.weight')}: ISS-P flips {flips['iss-p']:.3g}‰ of its weights per "
            f"iteration on average, IHT {flips['iht']:.3g}‰: "
            f"{_compare(flips['iss-p'], flips['iht'], 'flips more')}."
        )
    return " ".join(sentences)


def _pruning_stage(trace: Any) -> tuple[int, list[float]]:
    """(last iteration, distance series) of ``trace`` up to the end of its pruning stage."""
    end = trace.finetune_from if trace.finetune_from is not None else math.inf
    kept = [i for i, iteration in enumerate(trace.iterations) if iteration < end] or [0]
    last = kept[-1]
    return (trace.iterations[last] if trace.iterations else 0), list(trace.distance_first[: last + 1])


def _last_finite(values: Sequence[float]) -> float | None:
    """The last finite value of ``values`` (None when there is none)."""
    finite = [v for v in values if math.isfinite(v)]
    return finite[-1] if finite else None


def _mean(values: Sequence[float], count: int) -> float | None:
    """Mean of the finite values among the first ``count`` (None when there is none)."""
    finite = [v for v in values[:count] if math.isfinite(v)]
    return sum(finite) / len(finite) if finite else None


def _compare(iss_p: float, iht: float, verb: str) -> str:
    """Which run ``verb`` (e.g. "moved further"): level within 10% of the larger, or when both are 0."""
    if max(iss_p, iht) <= 0 or abs(iss_p - iht) <= 0.1 * max(iss_p, iht):
        return "about level"
    return f"{'ISS-P' if iss_p > iht else 'IHT'} {verb}"


def _stopped(run: LiveRun, done: int, reason: str) -> str:
    """The status note of a run ended early on purpose."""
    return (
        f"**Stopped at iteration {run.start_iteration + done}** ({done} done; {reason}). The plots show "
        "every iteration up to there."
    )


def _out_of_memory(error: BaseException) -> bool:
    """Whether ``error`` is PyTorch or Python running out of (CPU or GPU) memory."""
    text = str(error)
    return isinstance(error, MemoryError) or "out of memory" in text or "can't allocate memory" in text


def _live_update(run: LiveRun, done: int, plan: LivePlan, elapsed: float, note: str = "") -> tuple[Any, ...]:
    """Figures and a status line for the current state of a live run."""
    layers = run.config["layers"]
    return (
        figures.mask_dynamics_figure(run.traces, layers),
        figures.gradient_figure(run.traces, layers),
        figures.training_figure(run.traces),
        live_status(run, done, plan, elapsed, note),
    )


def live_status(run: LiveRun, done: int, plan: LivePlan, elapsed: float, note: str = "") -> str:
    """Progress, speed, the settings in use, and a warning when the run is too short for the contrast."""
    c = run.config
    cap = MAX_LIVE_ITERATIONS["cuda" if plan.device.startswith("cuda") else "cpu"]
    lines = [note] if note else []
    lines.append(
        f"**{done} / {plan.iterations}** iterations of both runs in {elapsed:.1f} s "
        f"({elapsed / max(done, 1):.2f} s per iteration; expected {plan.seconds_per_iteration:.2f}). "
        f"In use: {c['arch']} x{c['scale']}, ratio {c['ratio']}, alpha {c['alpha']}, "
        f"K_p {c['prune_iters']:,}, "
        f"batch {plan.batch}, LR patch {plan.patch}, learning rate {c['lr']:.3g}. Now at training iteration "
        f"{run.start_iteration + done:,} (stage: {run.pruners['iss-p'].stage}). A live run does at most "
        f"{cap:,} iterations and {MAX_LIVE_SECONDS // 60} min.",
    )
    movement = mask_summary(run.traces, run.config["layers"])
    if movement:
        lines.append(movement)
    if run.start_iteration == 0 and plan.iterations < SHORT_RUN:
        lines.append(
            f"⚠️ This run may be too short for the paper's Fig. 3 contrast: from random init both masks "
            f"barely move for the first ~{SHORT_RUN} iterations. Start from a recorded mid-pruning state, "
            "or open the recorded runs, to see a long pruning stage."
        )
    if run.start_iteration:
        optimizer = (
            "with the optimizer's state (Adam's moments) as recorded"
            if run.optimizer_restored
            else "without optimizer state (this recording predates it): Adam restarts, so the first steps "
            "are larger and the validation PSNR dips for a few dozen iterations"
        )
        lines.append(
            f"Resumed both runs from a recorded state at iteration {run.start_iteration:,}, {optimizer}. "
            "Backbone, scale, ratio, alpha, K_p and the learning rate (its schedule's at that iteration, "
            "held constant) come from the recording."
        )
    return "\n\n".join(lines)
