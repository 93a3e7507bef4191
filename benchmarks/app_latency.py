"""Latency of the app's two heavy events on this machine, measured through the same functions the app calls.

1. Compare: a 128x128 LR image upscaled x4 by bicubic and every bundled x4 r0.95 checkpoint ("LR image" mode),
   cold (models loaded from disk) and warm (models cached in memory), with the per-method times.
2. Analysis: seconds from pressing Train (defaults: SwinIR-light x2, batch 4, LR patch 16) to the first plot,
   and the seconds per iteration of both runs over the first ``--iterations``.

    python benchmarks/app_latency.py --threads 2
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np
import torch

import iss
from iss.ui import analysis, catalog, compare


def compare_latency(size: int = 128, scale: int = 4, zoo_path: str | None = None) -> dict:
    """Cold and warm wall time of one comparison over bicubic and all bundled x{scale} r0.95 checkpoints."""
    hr = iss.data.read_image(catalog.EXAMPLES_DIR / "pagoda.png")
    lr = np.ascontiguousarray(hr[:size, :size])
    arch, ratio = "swinir-light", 0.95
    methods = catalog.method_choices(arch, scale, ratio, zoo_path)
    result = {"input": f"{size}x{size} LR, x{scale}", "methods": methods}
    for run in ("cold", "warm"):
        start = time.perf_counter()
        comp = compare.compare(
            lr, arch, scale, ratio, methods, compare.MODE_LR, sparse=False, device="cpu", zoo_path=zoo_path
        )
        result[f"{run}_seconds"] = round(time.perf_counter() - start, 2)
        result[f"{run}_per_method"] = {row[0]: row[-1] if row[-1] != "" else row[1] for row in comp.rows}
    return result


def first_plot_latency(iterations: int) -> dict:
    """Seconds to the first streamed update of the default live run, and per iteration afterwards."""
    start = time.perf_counter()
    stream = analysis.train_live(iterations=iterations, update_seconds=0.0, device="cpu")
    next(stream)
    first = time.perf_counter() - start
    for _ in stream:
        pass
    total = time.perf_counter() - start
    return {
        "defaults": analysis.LIVE_DEFAULTS,
        "first_plot_seconds": round(first, 2),
        "iterations": iterations,
        "seconds_per_iteration_after_first": round((total - first) / max(iterations - 1, 1), 3),
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--iterations", type=int, default=20, help="live iterations to time after the first plot")
    p.add_argument("--zoo", default=None, help="zoo manifest (default checkpoints/zoo.json)")
    args = p.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    report = {"threads": torch.get_num_threads(), "compare": compare_latency(zoo_path=args.zoo)}
    report["live"] = first_plot_latency(args.iterations)
    print(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
