"""PSNR effect and size of storing a sparse checkpoint's floats in fp16 instead of fp32.

    python benchmarks/checkpoint_fp16.py checkpoints/swinir-light_x4_iss-p_r0.95.safetensors --datasets Set5

Re-saves the (fp32) checkpoint with ``dtype="fp16"``, evaluates both versions on the same sets (Y PSNR/SSIM,
through ``iss.evaluate.evaluate``) and writes ``benchmarks/results/checkpoint_fp16.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
from pathlib import Path

import torch
from safetensors.torch import save as st_save

from iss import checkpoint
from iss.evaluate import evaluate
from iss.infer import model_upscaler

ROOT = Path(__file__).resolve().parents[1]
DATA = Path(os.environ.get("ISS_DATA_DIR", ROOT.parent / "shared" / "data"))


def dense_bytes(model: torch.nn.Module) -> tuple[int, int]:
    """Sizes of the dense fp32 state dict in safetensors: everything, and the parameters only."""
    state = {k: v.contiguous() for k, v in model.state_dict().items()}
    params = {name for name, _ in model.named_parameters()}
    return len(st_save(state)), len(st_save({k: v for k, v in state.items() if k in params}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("checkpoint", type=Path)
    parser.add_argument("--datasets", default="Set5")
    parser.add_argument("--data-dir", type=Path, default=DATA / "benchmarks")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "checkpoint_fp16.json")
    args = parser.parse_args()
    torch.set_num_threads(min(2, torch.get_num_threads()))

    model32, meta = checkpoint.load(args.checkpoint)
    masks = checkpoint.read_masks(args.checkpoint)
    with tempfile.TemporaryDirectory() as tmp:
        path16 = checkpoint.save(
            model32, Path(tmp) / "fp16.safetensors", _plain_meta(meta), masks, dtype="fp16"
        )
        size16 = path16.stat().st_size
        model16, _ = checkpoint.load(path16)
    sets = args.datasets.split(",")
    scale = int(meta["scale"])
    results = {
        name: evaluate(model_upscaler(model, device="cpu"), sets, scale, args.data_dir, progress=False)
        for name, model in (("fp32", model32), ("fp16", model16))
    }
    dense_all, dense_params = dense_bytes(model32)
    report = {
        "checkpoint": str(args.checkpoint),
        "bytes": {
            "fp32": args.checkpoint.stat().st_size,
            "fp16": size16,
            "dense_state_dict": dense_all,
            "dense_parameters": dense_params,
        },
        "metrics": results,
        "psnr_delta_fp16_minus_fp32": {
            s: results["fp16"][s]["psnr"] - results["fp32"][s]["psnr"] for s in sets
        },
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report, indent=2))


def _plain_meta(meta: dict) -> dict:
    """The metadata ``save`` accepts again (without the fields it writes itself)."""
    return {k: v for k, v in meta.items() if k not in ("format_version", "sha256", "values_dtype")}


if __name__ == "__main__":
    main()
