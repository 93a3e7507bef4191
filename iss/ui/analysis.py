"""The Analysis tab: ISS-P vs IHT trained side by side (same init, same batches), streamed as figures.

A live run (``train_live``) is built by ``build_live_run`` and fed by ``training_batches``; the recorded runs
bundled in ``assets/recordings`` are shown whole and offer states to start a live run from. Also used by
``benchmarks/record_analysis.py`` to make those recordings. No gradio.
"""

from __future__ import annotations

import copy
import json
import os
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

import iss
from iss.ui import figures
from iss.ui.compare import ASSETS, EXAMPLES_DIR, default_device
from iss.ui.recording import RUNS, RunTrace, list_recordings, load_recording, load_state

RECORDINGS_DIR = ASSETS / "recordings"

# Live analysis defaults: first point well under 10 s, ~100 iterations of SwinIR-light in a minute on CPU.
LIVE_DEFAULTS = dict(
    arch="swinir-light", scale=2, ratio=0.95, alpha=0.95, iterations=100, prune_iters=80, patch=16, batch=4
)
MAX_LIVE_ITERATIONS = {"cpu": 2000, "cuda": 20000}
MAX_LIVE_SECONDS = 900
SHORT_RUN = 1500  # from random init both masks barely move before ~1.5k iterations (issue 4, measured on CPU)
RANDOM_INIT = "random init"
LIVE_SETS = ("T91",)  # small enough to load in a second or two when a live run starts
RECORDING_SETS = ("T91", "BSD200")


def recorded_states() -> list[str]:
    """Start points offered to a live run: random init, then ``<recording> @ <iteration>`` per saved state."""
    choices = [RANDOM_INIT]
    for folder in list_recordings(RECORDINGS_DIR):
        config = json.loads((folder / "run.json").read_text())
        states = [s for s in config.get("states", []) if (folder / s["file"]).is_file()]
        choices += [f"{folder.name} @ {s['iteration']}" for s in states]
    return choices


def recording_names() -> list[str]:
    """Names of the recorded runs bundled in ``assets/recordings``."""
    return [p.name for p in list_recordings(RECORDINGS_DIR)]


def default_layers(layers: Sequence[str], count: int = 2) -> list[str]:
    """Two representative layers (a quarter and three quarters into the network), as the paper's Fig. 3."""
    if len(layers) <= count:
        return list(layers)
    return [layers[len(layers) // 4], layers[(3 * len(layers)) // 4]]


def recorded_figures(name: str, layers: Sequence[str] | None = None) -> tuple[Any, Any, Any, str]:
    """The three analysis figures for a whole recorded run, and a summary line."""
    config, traces = load_recording(RECORDINGS_DIR / name)
    chosen = [layer for layer in (layers or []) if layer in config["layers"]] or default_layers(
        config["layers"]
    )
    summary = (
        f"Recorded run `{name}`: {config.get('arch')} x{config.get('scale')}, ratio {config.get('ratio')}, "
        f"alpha {config.get('alpha')}, batch {config.get('batch')}, LR patch {config.get('patch')}, "
        f"{config['iterations_done']} iterations of each run on {config.get('device', 'cpu')} "
        f"({config.get('seconds_per_iteration', float('nan')):.2f} s per iteration of both runs)."
    )
    return (
        figures.mask_dynamics_figure(traces, chosen),
        figures.gradient_figure(traces, chosen),
        figures.training_figure(traces),
        summary,
    )


def recording_layers(name: str) -> list[str]:
    """Layers traced in recording ``name``."""
    config, _ = load_recording(RECORDINGS_DIR / name)
    return list(config["layers"])


def prunable_layers(arch: str, scale: int) -> list[str]:
    """Names of the weights the pruners act on for ``arch`` (what the layer picker offers)."""
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
    lr: float = 2e-4,
    all_layers: bool = False,
) -> LiveRun:
    """Set up ISS-P and IHT from the same random init, or from a recorded state of both runs.

    Per-layer series are traced for ``layers`` (two representative ones when empty), or for every pruned
    layer with ``all_layers`` (recordings).
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
    torch.manual_seed(seed)
    first = iss.archs.build(config["arch"], config["scale"], **(arch_kwargs or {}))
    models = {"iss-p": first, "iht": copy.deepcopy(first)}
    options = {"iss-p": {"alpha": config["alpha"]}, "iht": {}}
    pruners = {
        run: iss.pruning.build(
            run, models[run], config["ratio"], prune_iters=config["prune_iters"], **options[run]
        )
        for run in RUNS
    }
    start_iteration = 0
    if state_path is not None:
        meta = load_state(state_path, models, pruners)
        start_iteration = int(meta["iteration"])
    for model in models.values():
        model.to(device).train()
    names = pruners["iss-p"].layer_names
    chosen = names if all_layers else [n for n in (layers or []) if n in names] or default_layers(names)
    traces = {run: RunTrace(layers=chosen) for run in RUNS}
    for run in RUNS:
        pruners[run].add_callback(traces[run].observe)
    train_config = iss.train_config.TrainConfig(lr=lr)
    trainers = {run: iss.train.Trainer(models[run], pruners[run], train_config) for run in RUNS}
    return LiveRun(models, pruners, trainers, traces, start_iteration, {**config, "layers": chosen})


def _recorded_state(start: str) -> tuple[Path, dict[str, Any]]:
    """Path of the state file named ``<recording> @ <iteration>`` and the recording's config."""
    name, _, iteration = start.partition(" @ ")
    folder = RECORDINGS_DIR / name.strip()
    config, _ = load_recording(folder)
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


def validation_pair(scale: int, size: int = 96) -> tuple[np.ndarray, np.ndarray]:
    """A small fixed (LR, HR) pair for the quick validation PSNR: the centre of the first bundled photo."""
    hr = iss.data.read_image(sorted(EXAMPLES_DIR.glob("*.png"))[0])
    h, w = hr.shape[:2]
    side = min(size - size % int(scale), h, w)
    y0, x0 = (h - side) // 2, (w - side) // 2
    hr = iss.data.modcrop(hr[y0 : y0 + side, x0 : x0 + side], int(scale))
    return iss.imresize(hr, 1 / int(scale)), hr


def validate(model: nn.Module, pair: tuple[np.ndarray, np.ndarray], scale: int) -> float:
    """PSNR (Y) of ``model`` on the validation pair."""
    lr, hr = pair
    return iss.metrics.psnr_y(iss.infer.upscale(model, lr), hr, crop_border=int(scale))


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
) -> Iterator[tuple[Any, Any, Any, str]]:
    """Train ISS-P and IHT side by side on the same batches, yielding (flips, gradients, training, status).

    The first update comes after the first iteration; then one about every ``update_seconds``, and the last at
    the end. Runs are bounded by ``MAX_LIVE_ITERATIONS`` and ``MAX_LIVE_SECONDS``.
    """
    device = device or default_device()
    cap = MAX_LIVE_ITERATIONS["cuda" if device.startswith("cuda") else "cpu"]
    if int(iterations) < 1:
        raise ValueError(f"iterations must be at least 1, got {iterations}")
    iterations = min(int(iterations), cap)
    run = build_live_run(
        arch,
        scale,
        ratio,
        alpha,
        prune_iters,
        layers,
        start,
        seed=seed,
        device=device,
        arch_kwargs=arch_kwargs,
    )
    scale = run.config["scale"]
    batches = training_batches(scale, patch, batch, data_dir, seed)
    pair = validation_pair(scale)
    started = last_yield = time.perf_counter()
    done = 0
    for done in range(1, iterations + 1):
        lr, hr = next(batches)
        lr, hr = lr.to(device), hr.to(device)
        iteration = run.start_iteration + done
        for name in RUNS:
            run.traces[name].commit(iteration, run.trainers[name].step(lr, hr))
        if done % validate_every == 0 or done in (1, iterations):
            for name in RUNS:
                run.traces[name].val_iterations.append(iteration)
                run.traces[name].val_psnr.append(validate(run.models[name], pair, scale))
        elapsed = time.perf_counter() - started
        if done == 1 or done == iterations or time.perf_counter() - last_yield >= update_seconds:
            last_yield = time.perf_counter()
            yield _live_update(run, done, iterations, elapsed, cap)
        if elapsed > MAX_LIVE_SECONDS:
            yield _live_update(
                run, done, iterations, elapsed, cap, f"stopped at the {MAX_LIVE_SECONDS} s bound"
            )
            return


def _live_update(
    run: LiveRun, done: int, total: int, elapsed: float, cap: int, note: str = ""
) -> tuple[Any, Any, Any, str]:
    """Figures and a status line for the current state of a live run."""
    layers = run.config["layers"]
    return (
        figures.mask_dynamics_figure(run.traces, layers),
        figures.gradient_figure(run.traces, layers),
        figures.training_figure(run.traces),
        live_status(run, done, total, elapsed, cap, note),
    )


def live_status(run: LiveRun, done: int, total: int, elapsed: float, cap: int, note: str = "") -> str:
    """Progress, speed, stage, and a warning when the run is too short for the ISS-P vs IHT contrast."""
    c = run.config
    stage = run.pruners["iss-p"].stage
    lines = [
        f"**{done} / {total}** iterations of both runs ({elapsed:.1f} s, "
        f"{elapsed / max(done, 1):.2f} s per iteration), "
        f"{c['arch']} x{c['scale']}, ratio {c['ratio']}, alpha {c['alpha']}, K_p {c['prune_iters']}, "
        f"iteration {run.start_iteration + done}, stage: {stage}. Runs are capped at {cap} iterations.",
    ]
    if run.start_iteration == 0 and total < SHORT_RUN:
        lines.append(
            f"⚠️ This run is too short for the ISS-P vs IHT contrast: from random init both masks barely "
            f"move for the first ~{SHORT_RUN} iterations, and the ISS-P mask keeps its first selection "
            "longest "
            "(the shrinking makes it self-reinforcing). Start from a recorded mid-pruning state, or open the "
            "recorded runs, to see "
            "the steady-state regime where ISS-P's mask moves faster than IHT's."
        )
    if run.start_iteration:
        lines.append(
            f"Resumed both runs from a recorded state at iteration {run.start_iteration} (backbone, scale, "
            "ratio, alpha and K_p come from the recording; Adam restarts, so the first steps are larger)."
        )
    if note:
        lines.append(note)
    return "\n\n".join(lines)
