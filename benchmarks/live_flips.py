"""How much a live run's masks move, resumed from the app's default recorded state: docs/app.md's figures.

    python benchmarks/live_flips.py --iterations 60 --data-dir ../shared/data

Resumes ISS-P and IHT from ``analysis.default_start()`` (the recorded mid-pruning state the Analysis tab
starts from) at each learning rate (default: the state's own, where the recording's schedule was, and the
random-init ``LIVE_LR``), trains them on the same batches as the app does, and prints mean flips per mille per
iteration of the whole mask and of the two layers the live run plots, next to the recording's own over its
``BUSY_SPAN`` iterations after the state. Counts flips, not time: it may run beside other work.
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

import numpy as np
import torch

from iss.train.recording import load_recording
from iss.ui import analysis


def live_flips(start: str, lr: float, iterations: int, data_dir: str | None) -> dict[str, dict[str, float]]:
    """Mean flips per mille per iteration (``whole`` and per plotted layer) of each run, resumed at ``lr``."""
    settings = analysis.start_settings(start)
    run = analysis.build_live_run(
        settings["arch"], settings["scale"], settings["ratio"], settings["alpha"], settings["prune_iters"],
        None, start, lr=lr,
    )  # fmt: skip
    batches = analysis.training_batches(settings["scale"], settings["patch"], settings["batch"], data_dir, 0)
    for i in range(1, iterations + 1):
        lr_batch, hr_batch = next(batches)
        for name in analysis.RUNS:
            run.traces[name].commit(run.start_iteration + i, run.trainers[name].step(lr_batch, hr_batch))
    return {
        name: {"whole": float(np.mean(t.flips_total)), **{k: float(np.mean(v)) for k, v in t.flips.items()}}
        for name, t in run.traces.items()
    }


def recorded_flips(start: str, layers: list[str]) -> dict[str, dict[str, float]]:
    """The same means in the recording, over its ``BUSY_SPAN`` iterations after ``start``."""
    name, _, at = start.partition(" @ ")
    _, traces = load_recording(analysis.RECORDINGS_DIR / name)
    out = {}
    for run, t in traces.items():
        inside = [i for i, it in enumerate(t.iterations) if int(at) < it <= int(at) + analysis.BUSY_SPAN]
        series = {"whole": t.flips_total, **{k: t.flips[k] for k in layers}}
        out[run] = {
            k: float(np.mean([v[i] for i in inside if math.isfinite(v[i])])) for k, v in series.items()
        }
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--iterations", type=int, default=60)
    parser.add_argument("--lr", type=float, nargs="*", help="default: the state's and LIVE_LR")
    parser.add_argument("--data-dir", help="training sets as the app's --data-dir (default: bundled photos)")
    parser.add_argument("--out", default="benchmarks/results/live_flips.json")
    args = parser.parse_args()
    torch.set_num_threads(1)
    start = analysis.default_start()
    rates = args.lr or [analysis.start_settings(start)["lr"], analysis.LIVE_LR]
    layers = analysis.busiest_layers(start)
    results = {"start": start, "iterations": args.iterations, "data": args.data_dir or "bundled photos",
               "recorded": recorded_flips(start, layers), "live": {}}  # fmt: skip
    print(f"{start}: mean flips per mille per iteration (whole mask; {', '.join(layers)})")
    print(f"recording, {analysis.BUSY_SPAN} iterations after: {results['recorded']}")
    for lr in rates:
        results["live"][f"{lr:.3g}"] = live_flips(start, lr, args.iterations, args.data_dir)
        print(f"live at LR {lr:.3g}, {args.iterations} iterations: {results['live'][f'{lr:.3g}']}")
    Path(args.out).write_text(json.dumps(results, indent=1) + "\n")


if __name__ == "__main__":
    main()
