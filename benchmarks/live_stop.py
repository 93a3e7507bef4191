"""Seconds from Stop to the end of a live run (its last update sent): docs/security.md's figures.

    python benchmarks/live_stop.py --archs edsr-l cat-r --trials 3 --threads 2

For each backbone, starts ``analysis.train_live`` from random init at the app's live defaults (the Stop
button and ``Job.cancel()`` set the same flag), waits for its first update, then presses Stop at a random
point of a later iteration and times until the generator has yielded its last update and returned. Time
is what it measures: run it with nothing else on the machine.
"""

from __future__ import annotations

import argparse
import json
import platform
import random
import threading
import time
from pathlib import Path

import torch

from iss.ui import analysis


def stop_seconds(arch: str, scale: int, delay: float) -> tuple[float, str]:
    """(seconds from Stop to the run's end, its last status line), Stop pressed ``delay`` s after the first
    update."""
    stop = threading.Event()
    pressed: list[float] = []

    def press() -> None:
        pressed.append(time.perf_counter())
        stop.set()

    run = analysis.train_live(arch, scale, iterations=2000, stop=stop)
    next(run)  # the first update: the run is built and one iteration done
    timer = threading.Timer(delay, press)
    timer.start()
    last = None
    for update in run:
        last = update
    ended = time.perf_counter()
    timer.join()
    return ended - pressed[0], (last[3].splitlines()[0] if last else "")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--archs", nargs="+", default=["edsr-l", "cat-r"])
    parser.add_argument("--scale", type=int, default=4)
    parser.add_argument("--trials", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", default="benchmarks/results/live_stop.json")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    rng = random.Random(0)
    rows = []
    for arch in args.archs:
        for trial in range(args.trials):
            seconds, status = stop_seconds(arch, args.scale, rng.uniform(1.0, 4.0))
            rows.append({"arch": arch, "scale": args.scale, "trial": trial, "stop_to_end_s": seconds})
            print(f"{arch} x{args.scale} trial {trial}: ended {seconds:.2f} s after Stop ({status})")
    machine = f"{platform.processor() or platform.machine()}, {args.threads} threads"
    Path(args.out).write_text(json.dumps({"machine": machine, "rows": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()
