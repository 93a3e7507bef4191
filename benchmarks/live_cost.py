"""Live runs against the app's estimate of them (``iss.ui.analysis.plan_live_run``): memory and time.

Each configuration runs in its own process (peak RSS is per process): three iterations of ISS-P and IHT from
random init, as the Analysis tab runs them. Printed: the plan's memory estimate and the peak RSS above the
process's RSS before the run (the constants in ``iss/ui/cost.py`` are fitted to it), and the plan's seconds
to the first plot and per iteration of both runs against the measured ones (the second iteration's: after
warm-up, before the last validation)::

    python benchmarks/live_cost.py --data-dir ../shared/data [--configs swinir-light:2:4:16,cat-r:2:2:16]
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time

DEFAULT = "swinir-light:2:4:16,swinir-light:2:2:32,edsr-baseline:4:3:32,cat-r:2:2:16,edsr-l:2:1:16"


def measure(arch: str, scale: int, batch: int, patch: int, data_dir: str | None, threads: int) -> dict:
    """Estimated and measured peak memory (above the starting RSS) and speed of one live run."""
    import torch

    from iss.ui import analysis

    torch.set_num_threads(threads)
    plan = analysis.plan_live_run(arch, scale, 2, patch, batch, analysis.RANDOM_INIT, device="cpu")
    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    start = time.perf_counter()
    run = analysis.train_live(
        arch, scale, 0.95, 0.95, 3, 100, plan.patch, plan.batch, None, analysis.RANDOM_INIT,
        device="cpu", data_dir=data_dir, update_seconds=0.0,
    )  # fmt: skip
    times = [time.perf_counter() for _ in run]  # one update per iteration
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - base
    return {
        "config": f"{arch} x{scale} batch {plan.batch} patch {plan.patch}",
        "estimate_mb": round(plan.memory_bytes / 1e6),
        "measured_mb": round(peak / 1e6),
        "estimate_first_s": round(plan.first_update_seconds, 1),
        "measured_first_s": round(times[0] - start, 1),
        "estimate_s_per_iteration": round(plan.seconds_per_iteration, 2),
        "measured_s_per_iteration": round(times[1] - times[0], 2),
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--configs", default=DEFAULT, help="arch:scale:batch:patch, comma-separated")
    p.add_argument("--data-dir", default=None)
    p.add_argument("--threads", type=int, default=2, help="as the speed priors were measured (app_speed.py)")
    p.add_argument("--one", default=None, help=argparse.SUPPRESS)  # a single config, in a child process
    args = p.parse_args(argv)
    if args.one:
        arch, scale, batch, patch = args.one.split(":")
        print(json.dumps(measure(arch, int(scale), int(batch), int(patch), args.data_dir, args.threads)))
        return 0
    for config in args.configs.split(","):
        command = [sys.executable, __file__, "--one", config, "--threads", str(args.threads)]
        command += ["--data-dir", args.data_dir] if args.data_dir else []
        out = subprocess.run(command, capture_output=True, text=True, check=True).stdout
        print(out.strip().splitlines()[-1], flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
