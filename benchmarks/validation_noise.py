"""Is the live run's validation PSNR noisy because of too few pixels? Both validations on the same run.

A live ISS-P vs IHT run from the default start (a recorded mid-pruning state) is validated every
``--every`` iterations on the app's quick crop (the centre 96 px of one photo) and, on the same weights, on
the centre 144 px of all four bundled photos (9x the pixels). If the swings came from sampling, the larger
set would swing less; if they are the model's own, both swing alike.

    python benchmarks/validation_noise.py --iterations 200 --every 10 --threads 1
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from iss.data import modcrop, read_image  # noqa: E402
from iss.data.resize import imresize  # noqa: E402
from iss.train import recording  # noqa: E402
from iss.ui import analysis  # noqa: E402


def larger_set(scale: int, size: int = 144) -> list[tuple[np.ndarray, np.ndarray]]:
    """The centre ``size`` px of every bundled photo, as (LR, HR) pairs."""
    pairs = []
    for path in sorted(recording.EXAMPLES_DIR.glob("*.png")):
        hr = read_image(path)
        side = min(size, *hr.shape[:2])
        y0, x0 = (hr.shape[0] - side) // 2, (hr.shape[1] - side) // 2
        hr = modcrop(hr[y0 : y0 + side, x0 : x0 + side], scale)
        pairs.append((imresize(hr, 1 / scale), hr))
    return pairs


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--iterations", type=int, default=200)
    p.add_argument("--every", type=int, default=10)
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    quick = analysis.validate
    seen: dict[str, list[float]] = {"quick crop": [], "4 photos, 9x pixels": []}

    def both(model: torch.nn.Module, pair: tuple, scale: int) -> float:
        """The app's validation, plus the larger set's on the same weights."""
        value = quick(model, pair, scale)
        seen["quick crop"].append(value)
        seen["4 photos, 9x pixels"].append(
            float(np.mean([quick(model, q, scale) for q in larger_set(scale)]))
        )
        return value

    analysis.validate = both  # the live run validates both runs in turn: ISS-P, then IHT
    start = analysis.default_start()
    for _ in analysis.train_live(iterations=args.iterations, validate_every=args.every, start=start,
                                 update_seconds=1e9, device="cpu"):  # fmt: skip
        pass
    result = {"start": start, "iterations": args.iterations, "every": args.every}
    for name, values in seen.items():
        for i, run in enumerate(analysis.RUNS):
            series = np.asarray(values[i :: len(analysis.RUNS)])
            result[f"{run}, {name}"] = {
                "mean_db": round(float(series.mean()), 3),
                "std_of_successive_differences_db": round(float(np.diff(series).std()), 3),
            }
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
