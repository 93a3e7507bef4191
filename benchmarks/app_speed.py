"""Measure this machine's speed per backbone for the app's time estimates and write ``iss/sparse/speed.json``.

For every registered backbone: one training step of one run (the default live-run step: x2, batch 4, LR
patch 16, ISS-P, Adam), x4 inference on a 64x64 LR input, dense and through ``iss.sparsify`` (95% of each
layer's weights zeroed by the scratch pruner), each the median of ``--reps`` timings after one warm-up, and
the seconds to build both runs of a live run (models, masks, optimizers).
Speeds are GFLOP/s of the FLOPs ``iss.ui.cost.trace`` counts, so the app can scale them to any input size::

    python benchmarks/app_speed.py --threads 2 [--out iss/sparse/speed.json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch

import iss
from iss.sparse import speed
from iss.ui import analysis, cost


def median_seconds(fn: Callable[[], object], reps: int) -> float:
    """Median wall time of ``fn`` over ``reps`` calls after one warm-up call."""
    fn()
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def train_speed(arch: str, reps: int, batch: int = 4, patch: int = 16, scale: int = 2) -> float:
    """GFLOP/s of one ISS-P training step (forward, L1, backward, pruner, Adam)."""
    torch.manual_seed(0)
    model = iss.archs.build(arch, scale)
    pruner = iss.pruning.build("iss-p", model, 0.95, prune_iters=10_000)
    trainer = iss.train.Trainer(model, pruner, iss.train.TrainConfig())
    lr, hr = torch.rand(batch, 3, patch, patch), torch.rand(batch, 3, patch * scale, patch * scale)
    seconds = median_seconds(lambda: trainer.step(lr, hr), reps)
    c = cost.trace(arch, scale, patch, patch)
    return batch * (c.forward_flops + c.backward_flops) / seconds / 1e9


def setup_seconds(arch: str, reps: int) -> float:
    """Seconds to build both runs of a live run (SwinIR-light's default: x2, ratio 0.95) from random init."""
    return median_seconds(lambda: analysis.build_live_run(arch, 2, 0.95, 0.95, 100, None), reps)


def inference_speeds(arch: str, reps: int, size: int = 64, scale: int = 4) -> tuple[float, float]:
    """GFLOP/s of dense and of ``iss.sparsify`` inference of a 95%-sparse model on one LR image."""
    torch.manual_seed(0)
    model = iss.archs.build(arch, scale).eval()
    iss.pruning.build("scratch", model, 0.95)  # zeroes 95% of every prunable weight (random mask)
    fast = iss.sparsify(model)
    x = torch.rand(1, 3, size, size)
    flops = cost.trace(arch, scale, size, size, train=False).forward_flops
    with torch.inference_mode():
        for _ in range(iss.sparse.SETUP_CALLS - 1):  # median_seconds warms up once more
            fast(x)
        dense = median_seconds(lambda: model(x), reps)
        sparse = median_seconds(lambda: fast(x), reps)
    return flops / dense / 1e9, flops / sparse / 1e9


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--archs", default=",".join(iss.archs.list_archs()))
    p.add_argument("--out", type=Path, default=speed.SPEED_FILE)
    args = p.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    load_before = round(os.getloadavg()[0], 1)
    speeds: dict[str, dict[str, float]] = {kind: {} for kind in (*speed.KINDS, speed.SETUP)}
    for arch in args.archs.split(","):
        speeds["train"][arch] = round(train_speed(arch, args.reps), 1)
        dense, sparse = inference_speeds(arch, args.reps)
        speeds["dense"][arch], speeds["sparse"][arch] = round(dense, 1), round(sparse, 1)
        speeds[speed.SETUP][arch] = round(setup_seconds(arch, min(args.reps, 2)), 1)
        print(arch, {kind: table[arch] for kind, table in speeds.items()}, flush=True)
    for kind in speed.KINDS:  # unknown backbones: the slowest measured, so estimates err on the long side
        speeds[kind]["default"] = min(speeds[kind].values())
    speeds[speed.SETUP]["default"] = max(speeds[speed.SETUP].values())
    record = {
        "command": "python benchmarks/app_speed.py " + " ".join(sys.argv[1:] if argv is None else argv),
        "machine": f"{platform.processor() or platform.machine()}, {torch.get_num_threads()} threads",
        "load_average": [load_before, round(os.getloadavg()[0], 1)],  # 1 min, before and after the run
        "unit": "GFLOP/s (FLOPs counted by iss.ui.cost.trace); setup: seconds to build a live run",
        "cpu": speeds,
    }
    args.out.write_text(json.dumps(record, indent=1) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
