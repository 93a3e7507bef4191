"""Sparse checkpoint sizes: format 3 (each mask in the smaller of a bitmask and run lengths) against format 2
(bitmasks only), for every backbone at x4 and the paper's ratios, and for the bundled zoo's checkpoints.

    python benchmarks/checkpoint_size.py [--archs swinir-light,edsr-l,cat-r] [--ratios 0.9,0.95,0.99]

Random-init models with random per-layer masks of exactly ``ceil(ratio * n)`` zeros (the ``scratch`` pruner,
as in ``sparse_inference.py``): a mask's code costs the same for any positions with the same count, up to
the escape bytes of runs over 254. Each file is saved by ``iss.checkpoint.save`` and rewritten as format 2
(every mask as a bitmask, re-signed); both must load to the same weights. Writes
``benchmarks/results/checkpoint_size.{json,md}``.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

import torch
from checkpoint_fp16 import _plain_meta
from safetensors.torch import save as st_save
from sparse_inference import build

from iss import checkpoint, zoo

ROOT = Path(__file__).resolve().parents[1]


def as_format_2(path: Path, out: Path) -> Path:
    """``path`` rewritten with every mask as a bitmask, labelled format 2 and re-signed."""
    masks = checkpoint.read_masks(path)
    tensors, metadata = checkpoint.read(path)
    for name, mask in masks.items():
        tensors.pop(name + checkpoint.GAPS_SUFFIX, None)
        tensors[name + checkpoint.MASK_SUFFIX] = checkpoint.pack_mask(mask)
    metadata["format_version"] = "2"
    metadata["sha256"] = checkpoint.payload_sha256(tensors, metadata)
    out.write_bytes(st_save(tensors, metadata=metadata))
    return out


def sizes(path: Path, folder: Path) -> dict[str, int]:
    """Bytes of ``path`` (format 3) and of its format-2 rewrite, after checking both load the same weights."""
    old = as_format_2(path, folder / "format2.safetensors")
    new_state, old_state = (checkpoint.load(p)[0].state_dict() for p in (path, old))
    if not all(torch.equal(new_state[k], old_state[k]) for k in new_state):
        raise AssertionError(f"{path}: format 2 and 3 load different weights")
    return {"format3": path.stat().st_size, "format2": old.stat().st_size}


def random_case(arch: str, ratio: float, dtype: str, folder: Path) -> dict:
    model = build(arch, 4, ratio, seed=0)
    dense = len(st_save({n: p.detach().contiguous() for n, p in model.named_parameters()}))
    meta = {"arch": arch, "scale": 4, "method": "scratch", "ratio": ratio}
    path = checkpoint.save(model, folder / "model.safetensors", meta, dtype=dtype)
    row = {"model": arch, "ratio": ratio, "dtype": dtype, "dense_parameters_fp32": dense}
    return row | sizes(path, folder)


def zoo_case(entry: zoo.ZooEntry, folder: Path) -> dict:
    """A bundled (trained) checkpoint re-saved by the current ``save``, against its format-2 rewrite."""
    model, meta = checkpoint.load(entry.bundled)
    masks = checkpoint.read_masks(entry.bundled)
    path = checkpoint.save(
        model, folder / "model.safetensors", _plain_meta(meta), masks, dtype=meta["values_dtype"]
    )
    return {"model": entry.name, "ratio": entry.ratio, "dtype": meta["values_dtype"], **sizes(path, folder)}


def markdown(rows: list[dict]) -> str:
    lines = [
        "| model | ratio | values | format 2 (bitmasks) | format 3 | format 3 / format 2 |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['model']} | {r['ratio']} | {r['dtype']} | {r['format2']:,} B | {r['format3']:,} B "
            f"| {r['format3'] / r['format2']:.2f} |"
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--archs", default="swinir-light,edsr-l,cat-r")
    parser.add_argument("--ratios", default="0.9,0.95,0.99")
    parser.add_argument("--dtypes", default="fp16,fp32")
    parser.add_argument("--zoo", default="swinir-light_x4_iss-p_r0.95,swinir-light_x4_iss-p_r0.99")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "checkpoint_size")
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for arch in args.archs.split(","):
            for ratio in map(float, args.ratios.split(",")):
                for dtype in args.dtypes.split(","):
                    rows.append(random_case(arch, ratio, dtype, Path(tmp)))
                    print(markdown(rows[-1:]).splitlines()[-1], flush=True)
        entries = {e.name: e for e in zoo.load_zoo()}
        for name in filter(None, args.zoo.split(",")):
            rows.append(zoo_case(entries[name], Path(tmp)))
            print(markdown(rows[-1:]).splitlines()[-1], flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.with_suffix(".json").write_text(json.dumps(rows, indent=2) + "\n")
    args.out.with_suffix(".md").write_text(
        "Sparse checkpoint sizes (`python benchmarks/checkpoint_size.py`): random per-layer masks on x4 "
        "models, then bundled trained checkpoints re-saved.\n\n" + markdown(rows)
    )


if __name__ == "__main__":
    main()
