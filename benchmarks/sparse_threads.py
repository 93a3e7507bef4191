"""How a sparsified model's forward uses the CPU's threads: the choices ``iss.sparse.threads`` makes, timed.

    python benchmarks/sparse_threads.py --archs swinir-light edsr-l cat-r --size 64

For each arch (x4, random per-layer masks of ``--ratio``, 2 threads), interleaved, median ms of:

* ``one`` / ``all``: the forward with torch's own ops on one thread or on all of them
  (:class:`iss.sparse.threads.ForwardThreads`'s two modes, forced), and the mode it chose itself;
* ``pinned`` / ``unpinned``: the forward after an idle pause of ``--pause`` seconds (as between a user's
  images), with the threads kept to CPUs of their own during the forward (the default) or not.

Writes nothing; prints one line per arch with the CPU signature. Run with nothing else on the machine.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import torch
from sparse_inference import build

from iss.sparse import SETUP_CALLS, sparsify, threads
from iss.train.loop import cpu_signature


def forward_threads(model: torch.nn.Module) -> threads.ForwardThreads:
    (choice,) = [hook.__self__ for hook in model._forward_pre_hooks.values()]
    return choice


def interleaved(runs: dict[str, Callable[[], object]], reps: int, pause: float) -> dict[str, float]:
    """Median ms of each run, in turn, each after ``pause`` seconds idle."""
    times: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(reps):
        for name, run in runs.items():
            time.sleep(pause)
            start = time.perf_counter()
            run()
            times[name].append((time.perf_counter() - start) * 1e3)
    return {name: round(statistics.median(t), 1) for name, t in times.items()}


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--archs", nargs="+", default=["swinir-light", "edsr-l", "cat-r"])
    p.add_argument("--ratio", type=float, default=0.95)
    p.add_argument("--size", type=int, default=64, help="LR input height and width")
    p.add_argument("--reps", type=int, default=8)
    p.add_argument("--pause", type=float, default=0.1, help="idle seconds before each pinned/unpinned run")
    args = p.parse_args(argv)
    torch.set_num_threads(2)
    x = torch.rand(1, 3, args.size, args.size)
    print(f"{cpu_signature()}, 2 threads, x4, r{args.ratio}, {args.size}x{args.size}")
    for arch in args.archs:
        base = build(arch, 4, args.ratio, 0)
        models = {mode: sparsify(base) for mode in ("one", "all", "chosen")}
        with torch.inference_mode():
            for model in models.values():
                for _ in range(SETUP_CALLS):
                    model(x)
            forward_threads(models["one"]).mode, forward_threads(models["all"]).mode = "one", "all"
            modes = interleaved({mode: lambda m=m: m(x) for mode, m in models.items()}, args.reps, 0.0)
            chosen = models["chosen"]
            runs = {"pinned": lambda m=chosen: m(x), "unpinned": lambda m=chosen: unpinned(lambda: m(x))}
            pins = interleaved(runs, args.reps, args.pause)
        choice = forward_threads(chosen).mode
        print(f"{arch}: torch ops {modes} (chose {choice}); after a {args.pause} s pause {pins}")


def unpinned(run: Callable[[], object]) -> object:
    """``run()`` with the forward's CPU pinning switched off."""
    pin, threads._pin_caller = threads._pin_caller, lambda *_: None
    try:
        return run()
    finally:
        threads._pin_caller = pin


if __name__ == "__main__":
    main()
