"""Pruner overhead per training step, as a fraction of a bare training step, on the CPU or a GPU.

A bare step is forward + L1 loss + backward + Adam step. Two copies of the model (same init, same
batches) train in lockstep with an ISS-P pruner (ratio 0.95), one per mode, each consuming its telemetry:

* ``fast``: the default on the CPU (``sync_free=False``); a callback reads ``StepStats`` every step;
* ``sync-free``: the default on CUDA (``sync_free=True``); a ``TelemetryRecorder`` records every step and is
  flushed every 50 steps (what a GPU training loop does);

timed as ``pruner.before_step()`` + ``pruner.step()`` (+ telemetry) in the pruning stage (exact selection
every step, shrink, flips, distances, gradient statistics) and after the freeze (re-applying the mask,
gradient statistics). Two anchors run on copies of the weights in the pruning stage, without telemetry:

* ``kthvalue``: a plain per-layer ``kthvalue`` threshold + shrink,
* ``argsort (official)``: the official per-layer ``np.argsort`` of |W| copied to the CPU
  (``basicsr/pruner/utils.py:pick_pruned_layer`` + ``_iht``).

Repeats are interleaved (each step times all variants), medians are reported; ratios compare medians from the
same run. On the CPU times are host clock; on CUDA they are CUDA events on the stream, read once at the end,
so they are the variant's share of the GPU timeline, idle gaps while the host waits (fast mode) included.
EDSR-L runs at batch 1, LR patch 16 on the CPU (a tiny step for 43 M weights: the worst case for the ratio);
pass ``--batch``/``--patch`` for GPU-sized steps. On a machine shared with other jobs, OpenMP threads get
descheduled and multi-threaded torch ops slow down far more than numpy's single-threaded argsort: compare
the bare step with its idle value (SwinIR-light x4, batch 4, patch 16, 2 threads: about 160 ms) first.
Usage: ``python benchmarks/pruning_overhead.py [--quick] [--repeats N] [--threads 1 2] [--arch NAME ...]
[--device cuda] [--batch B] [--patch P]``.
"""

from __future__ import annotations

import argparse
import math
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

import iss.archs
import iss.pruning
from iss.pruning import TelemetryRecorder

RATIO = 0.95
ALPHA = 0.95
FLUSH_EVERY = 50
MODES = {"fast": False, "sync-free": True}
COLUMNS = (
    ("fast prune", "fast, prune stage"),
    ("sync-free prune", "sync-free, prune stage"),
    ("fast finetune", "fast, finetune stage"),
    ("sync-free finetune", "sync-free, finetune stage"),
    ("kthvalue", "per-layer kthvalue"),
    ("argsort", "official argsort"),
)


@dataclass(frozen=True)
class Setting:
    arch: str
    batch: int
    patch: int  # LR patch size
    repeats: int  # full run; --quick uses a third


SETTINGS = (Setting("swinir-light", 4, 16, 24), Setting("edsr-l", 1, 16, 6))


class Clock:
    """Time marks: the host clock on the CPU, CUDA events on the GPU stream (read after one final sync)."""

    def __init__(self, device: torch.device) -> None:
        self.cuda = device.type == "cuda"

    def mark(self) -> object:
        if not self.cuda:
            return time.perf_counter()
        event = torch.cuda.Event(enable_timing=True)
        event.record()
        return event

    def seconds(self, start: object, end: object) -> float:
        return start.elapsed_time(end) / 1e3 if self.cuda else end - start


@dataclass
class Run:
    """One model trained with a pruner in one mode, and how its telemetry is consumed."""

    model: nn.Module
    opt: torch.optim.Optimizer
    pruner: iss.pruning.Pruner
    recorder: TelemetryRecorder | None


def argsort_anchor(weights: list[torch.Tensor]) -> None:
    """Official-style selection: |W| to numpy on the CPU, full argsort, mask of 1/alpha, multiply."""
    for w in weights:
        score = w.abs().flatten().cpu().numpy()
        order = np.argsort(score)
        mask = np.ones(score.size, dtype=np.float32)
        mask[order[: math.ceil(RATIO * score.size)]] = ALPHA
        w.mul_(torch.from_numpy(mask).view_as(w).to(w.device))


def kthvalue_anchor(weights: list[torch.Tensor]) -> None:
    """Plain per-layer torch selection: one kthvalue per layer, then shrink."""
    for w in weights:
        a = w.abs()
        tau = a.flatten().kthvalue(math.ceil(RATIO * a.numel())).values
        w.mul_(torch.where(a <= tau, ALPHA, 1.0))


def make_run(setting: Setting, device: torch.device, sync_free: bool, prune_iters: int) -> Run:
    torch.manual_seed(0)
    model = iss.archs.build(setting.arch, 4).to(device)
    pruner = iss.pruning.build(
        "iss-p", model, RATIO, alpha=ALPHA, prune_iters=prune_iters, sync_free=sync_free
    )
    opt = torch.optim.Adam(model.parameters(), 2e-4, betas=(0.9, 0.99))
    if sync_free:
        return Run(model, opt, pruner, TelemetryRecorder(pruner))
    seen = []
    pruner.add_callback(lambda stats: seen.append(stats.flips_permille_total))
    return Run(model, opt, pruner, None)


def train_step(run: Run, lr: torch.Tensor, hr: torch.Tensor, clock: Clock) -> list[object]:
    """One step of the pruner contract; marks around the bare parts and the pruner's calls."""
    marks = [clock.mark()]
    run.opt.zero_grad()
    nn.functional.l1_loss(run.model(lr), hr).backward()
    marks.append(clock.mark())
    run.pruner.before_step()
    marks.append(clock.mark())
    run.opt.step()
    marks.append(clock.mark())
    run.pruner.step()
    if run.recorder is not None:
        run.recorder.record()
        if len(run.recorder) == FLUSH_EVERY:
            run.recorder.flush()
    marks.append(clock.mark())
    return marks


def timed(clock: Clock, fn: Callable[[], object]) -> tuple[object, object]:
    start = clock.mark()
    fn()
    return start, clock.mark()


def measure(setting: Setting, threads: int, repeats: int, device: torch.device) -> dict[str, float]:
    """Median milliseconds of each variant over interleaved repeats (prune stage, then finetune stage)."""
    torch.set_num_threads(threads)
    clock = Clock(device)
    warmup = 2
    runs = {mode: make_run(setting, device, free, warmup + repeats) for mode, free in MODES.items()}
    lr = torch.rand(setting.batch, 3, setting.patch, setting.patch, device=device)
    hr = torch.rand(setting.batch, 3, 4 * setting.patch, 4 * setting.patch, device=device)
    layers = [m.weight for m in runs["fast"].model.modules() if isinstance(m, (nn.Conv2d, nn.Linear))]
    spans: dict[str, list[tuple[object, object]]] = {k: [] for k, _ in COLUMNS}
    spans["bare"] = []
    for i in range(warmup + 2 * repeats):
        for mode, run in runs.items():
            stage = run.pruner.stage
            m = train_step(run, lr, hr, clock)
            if i >= warmup:
                spans["bare"] += [(m[0], m[1]), (m[2], m[3])]
                spans[f"{mode} {stage}"] += [(m[1], m[2]), (m[3], m[4])]
        if i >= warmup and stage == "prune":
            with torch.no_grad():
                for name, anchor in (("kthvalue", kthvalue_anchor), ("argsort", argsort_anchor)):
                    copies = [w.detach().clone() for w in layers]
                    spans[name].append(timed(clock, lambda c=copies, f=anchor: f(c)))
    if clock.cuda:
        torch.cuda.synchronize()
    times = {k: [clock.seconds(*s) for s in v] for k, v in spans.items()}
    times["bare"] = [a + b for a, b in zip(times["bare"][::2], times["bare"][1::2], strict=True)]
    for k, _ in COLUMNS[:4]:
        times[k] = [a + b for a, b in zip(times[k][::2], times[k][1::2], strict=True)]
    return {k: 1e3 * statistics.median(v) for k, v in times.items()}


def table(rows: list[tuple[Setting, int, dict[str, float]]]) -> str:
    """Markdown table: milliseconds and percent of the bare step."""
    head = (
        "| model | batch x LR patch | threads | bare step (ms) | " + " | ".join(t for _, t in COLUMNS) + " |"
    )
    lines = [head, "|" + "---|" * (4 + len(COLUMNS))]
    for s, threads, ms in rows:
        cells = [f"{ms[k]:.1f} ms ({100 * ms[k] / ms['bare']:.1f}%)" for k, _ in COLUMNS]
        lines.append(
            f"| {s.arch} x4 | {s.batch} x {s.patch} | {threads} | {ms['bare']:.0f} | "
            + " | ".join(cells)
            + " |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a third of the repeats")
    parser.add_argument("--repeats", type=int, default=None, help="override the repeats of every model")
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--arch", nargs="+", default=[s.arch for s in SETTINGS], help="subset of models")
    parser.add_argument("--device", default="cpu", help="cpu or cuda")
    parser.add_argument("--batch", type=int, default=None, help="override the batch of every model")
    parser.add_argument("--patch", type=int, default=None, help="override the LR patch of every model")
    args = parser.parse_args()
    device = torch.device(args.device)
    rows = []
    for setting in SETTINGS:
        if setting.arch not in args.arch:
            continue
        setting = Setting(
            setting.arch, args.batch or setting.batch, args.patch or setting.patch, setting.repeats
        )
        repeats = args.repeats or (max(2, setting.repeats // 3) if args.quick else setting.repeats)
        for threads in args.threads:
            rows.append((setting, threads, measure(setting, threads, repeats, device)))
            print(table(rows[-1:]).splitlines()[-1], flush=True)
    print()
    print(table(rows))


if __name__ == "__main__":
    main()
