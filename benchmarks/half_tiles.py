"""What ``iss.sparsify``'s default half tiles (conv inputs kept as IEEE halves) cost in accuracy.

    python benchmarks/half_tiles.py checkpoints/swinir-light_x2_iss-p_r0.95.safetensors --datasets Set5

For each checkpoint: Y PSNR of ``sparsify(model)`` (halves where the CPU has them) and of
``sparsify(model, exact=True)`` on the same sets, and the largest absolute difference between their float
outputs (images in [0, 1]) over every image. Writes ``benchmarks/results/half_tiles.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
from pathlib import Path

import torch

from iss import checkpoint
from iss.data import BenchmarkSet, to_tensor
from iss.evaluate import evaluate
from iss.infer import model_upscaler
from iss.sparse import kernels, sparsify
from iss.train.loop import cpu_signature

ROOT = Path(__file__).resolve().parents[1]
DATA = Path(os.environ.get("ISS_DATA_DIR", ROOT.parent / "shared" / "data"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("checkpoints", type=Path, nargs="+")
    parser.add_argument("--datasets", default="Set5")
    parser.add_argument("--data-dir", type=Path, default=DATA / "benchmarks")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "half_tiles.json")
    args = parser.parse_args()
    sets = args.datasets.split(",")
    rows = []
    for path in args.checkpoints:
        model, meta = checkpoint.load(path)
        scale = int(meta["scale"])
        fast, exact = sparsify(model), sparsify(model, exact=True)
        worst = 0.0
        with torch.inference_mode():
            for name in sets:
                for sample in BenchmarkSet(args.data_dir, name, scale):
                    x = to_tensor(sample.lr)
                    worst = max(worst, (fast(x) - exact(x)).abs().max().item())
        psnr = {}
        for label, net in (("half", fast), ("exact", exact)):
            found = evaluate(model_upscaler(net), sets, scale, args.data_dir, progress=False)
            psnr[label] = {s: round(m["psnr"], 4) for s, m in found.items()}
        rows.append({"checkpoint": path.name, "max_abs_error": worst, "psnr": psnr})
        print(rows[-1], flush=True)
    result = {"command": "python benchmarks/half_tiles.py " + " ".join(map(str, args.checkpoints)),
              "cpu": cpu_signature(), "machine": platform.machine(), "half_tiles": kernels.half_tiles(),
              "torch": torch.__version__, "rows": rows}  # fmt: skip
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
