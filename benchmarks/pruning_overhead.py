"""Pruner overhead per training step on the CPU, as a fraction of a bare training step.

A bare step is forward + L1 loss + backward + Adam step. Measured inside one real training loop with an ISS-P
pruner (ratio 0.95, telemetry on, a callback consuming ``StepStats`` every step):

* ``ours (prune)``: ``pruner.before_step()`` + ``pruner.step()`` in the pruning stage (exact selection every
  step, shrink, flips, distances, gradient statistics),
* ``ours (finetune)``: the same calls after the freeze (re-applying the mask, gradient statistics),
* ``kthvalue``: a plain per-layer ``kthvalue`` threshold + shrink (no telemetry), on copies of the weights,
* ``argsort (official)``: the official per-layer ``np.argsort`` of |W| copied to the CPU
  (``basicsr/pruner/utils.py:pick_pruned_layer`` + ``_iht``), no telemetry, on copies of the weights.

Repeats are interleaved (each step times all variants), medians are reported; ratios compare medians from
the same run. EDSR-L runs at batch 1, LR patch 16 (a tiny step for 43 M weights: the worst case for the
ratio). On a machine shared with other jobs, OpenMP threads get descheduled and multi-threaded torch ops
slow down far more than numpy's single-threaded argsort: compare the bare step with its idle value
(SwinIR-light x4, batch 4, patch 16, 2 threads: about 160 ms) before reading a row.
Usage: ``python benchmarks/pruning_overhead.py [--quick] [--repeats N] [--threads 1 2] [--arch NAME ...]``.
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

RATIO = 0.95
ALPHA = 0.95


@dataclass(frozen=True)
class Setting:
    arch: str
    batch: int
    patch: int  # LR patch size
    repeats: int  # full run; --quick uses a third


SETTINGS = (Setting("swinir-light", 4, 16, 24), Setting("edsr-l", 1, 16, 6))


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


def timed(fn: Callable[[], object]) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def measure(setting: Setting, threads: int, repeats: int) -> dict[str, float]:
    """Median milliseconds of each variant over interleaved repeats (prune stage, then finetune stage)."""
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    model = iss.archs.build(setting.arch, 4)
    warmup = 2
    pruner = iss.pruning.build("iss-p", model, RATIO, alpha=ALPHA, prune_iters=warmup + repeats)
    seen = []
    pruner.add_callback(lambda stats: seen.append(stats.flips_permille_total))
    opt = torch.optim.Adam(model.parameters(), 2e-4, betas=(0.9, 0.99))
    lr = torch.rand(setting.batch, 3, setting.patch, setting.patch)
    hr = torch.rand(setting.batch, 3, 4 * setting.patch, 4 * setting.patch)
    layers = [m.weight for m in model.modules() if isinstance(m, (nn.Conv2d, nn.Linear))]
    times: dict[str, list[float]] = {k: [] for k in ("bare", "prune", "finetune", "kthvalue", "argsort")}
    for i in range(warmup + 2 * repeats):
        t0 = time.perf_counter()
        opt.zero_grad()
        nn.functional.l1_loss(model(lr), hr).backward()
        t1 = time.perf_counter()
        pruner.before_step()
        t2 = time.perf_counter()
        opt.step()
        t3 = time.perf_counter()
        stage = pruner.stage
        pruner.step()
        t4 = time.perf_counter()
        if i < warmup:
            continue
        times["bare"].append(t1 - t0 + t3 - t2)
        times[stage].append(t2 - t1 + t4 - t3)
        if stage == "prune":
            with torch.no_grad():
                copies = [w.detach().clone() for w in layers]
                times["kthvalue"].append(timed(lambda c=copies: kthvalue_anchor(c)))
                copies = [w.detach().clone() for w in layers]
                times["argsort"].append(timed(lambda c=copies: argsort_anchor(c)))
    assert len(seen) == warmup + 2 * repeats
    return {k: 1e3 * statistics.median(v) for k, v in times.items()}


def table(rows: list[tuple[Setting, int, dict[str, float]]]) -> str:
    """Markdown table: milliseconds and percent of the bare step."""
    head = (
        "| model | batch x LR patch | threads | bare step (ms) | ours, prune stage | ours, finetune stage "
        "| per-layer kthvalue | official argsort |\n|---|---|---|---|---|---|---|---|"
    )
    lines = [head]
    for s, threads, ms in rows:
        cells = [
            f"{ms[k]:.1f} ms ({100 * ms[k] / ms['bare']:.1f}%)"
            for k in ("prune", "finetune", "kthvalue", "argsort")
        ]
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
    args = parser.parse_args()
    rows = []
    for setting in SETTINGS:
        if setting.arch not in args.arch:
            continue
        repeats = args.repeats or (max(2, setting.repeats // 3) if args.quick else setting.repeats)
        for threads in args.threads:
            rows.append((setting, threads, measure(setting, threads, repeats)))
            print(table(rows[-1:]).splitlines()[-1], flush=True)
    print()
    print(table(rows))


if __name__ == "__main__":
    main()
