"""The Analysis tab's live ISS-P vs IHT run, as a Space's GPU runs it: the time to the
first plot, seconds per iteration of both runs, and whether Figure 3's contrast (ISS-P's mask moving more than
IHT's) shows. It calls ``iss.ui.analysis.train_live`` as the tab does, stops it after ``--seconds`` if the
iterations are not done by then, and at every update rewrites the status (``live_gpu.json``, with the device)
and the figures (``live_gpu_figures.json``, plotly JSON), so a call cut short keeps what it had::

    python benchmarks/live_gpu.py --device cuda --data-dir .gpu/data --iterations 3000 --prune-iters 2400 \
        --batch 32 --patch 64 --seconds 480 --out $OUT
"""

from __future__ import annotations

import argparse
import json
import platform
import threading
import time
from pathlib import Path

import torch

from iss.ui import analysis


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="cuda")
    p.add_argument("--data-dir", required=True, help="folder holding train/T91")
    p.add_argument("--arch", default="swinir-light")
    p.add_argument("--scale", type=int, default=4)
    p.add_argument("--iterations", type=int, default=3000)
    p.add_argument("--prune-iters", type=int, default=2400)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--patch", type=int, default=64)
    p.add_argument("--seconds", type=float, default=120, help="stop the run (as Stop does) after this long")
    p.add_argument("--out", type=Path, required=True)
    args = p.parse_args()

    stop = threading.Event()
    timer = threading.Timer(args.seconds, stop.set)
    timer.start()
    args.out.mkdir(parents=True, exist_ok=True)
    began = time.perf_counter()
    first_plot = None
    for update in analysis.train_live(
        args.arch, args.scale, 0.95, 0.95, args.iterations, args.prune_iters, args.patch, args.batch,
        device=args.device, data_dir=args.data_dir, update_seconds=10.0, stop=stop,
    ):  # fmt: skip
        first_plot = first_plot or time.perf_counter() - began
        print(update[-1].splitlines()[0], flush=True)
        _write(args, update, first_plot, time.perf_counter() - began)  # every update: a killed call keeps it
    timer.cancel()
    print(update[-1])


def _write(args: argparse.Namespace, update: tuple, first_plot: float, wall: float) -> None:
    """The run so far: timings, device and last status (live_gpu.json), and its figures as plotly JSON."""
    result = {
        "command": vars(args) | {"out": str(args.out)},
        "device": torch.cuda.get_device_name() if args.device.startswith("cuda") else platform.processor(),
        "torch": torch.__version__,
        "first_plot_seconds": first_plot,
        "wall_seconds": wall,
        "last_status": update[-1],
    }
    (args.out / "live_gpu.json").write_text(json.dumps(result, indent=1) + "\n")
    names = ("flips", "gradients", "training")
    figures = {name: fig.to_plotly_json() for name, fig in zip(names, update[:3], strict=True)}
    (args.out / "live_gpu_figures.json").write_text(json.dumps(figures, default=str) + "\n")


if __name__ == "__main__":
    main()
