"""Which weights each checkpoint kept, against a reference checkpoint: the README's mask-overlap figures.

    python benchmarks/mask_overlap.py checkpoints/swinir-light_x4_l1_r0.99.safetensors \
        checkpoints/swinir-light_x4_{iss-p,srp,assl}_r0.99.safetensors

For each other checkpoint, prints the share of its kept (nonzero) weights that the reference also kept, per
kind of layer (block and group indices folded: ``layers.2.residual_group.blocks.3.mlp.fc1`` counts as
``mlp.fc1``) and over all pruned layers. The methods of one zoo group start from the same weights, so an L1
checkpoint as reference (its mask is fixed at initialisation) shows how far each method moved from there.
"""

from __future__ import annotations

import argparse
import re
from collections import defaultdict
from pathlib import Path

import torch

from iss import checkpoint

_INDEXED = re.compile(r"^(layers\.\d+\.residual_group\.blocks\.\d+\.|layers\.\d+\.)")


def kept_masks(path: Path) -> dict[str, torch.Tensor]:
    """Nonzero pattern of every weight matrix or kernel in a checkpoint, by parameter name."""
    model, _ = checkpoint.load(path)
    return {
        name: weight != 0
        for name, weight in model.state_dict().items()
        if name.endswith("weight") and weight.dim() > 1
    }


def layer_kind(name: str) -> str:
    """``layers.2.residual_group.blocks.3.mlp.fc1.weight`` -> ``mlp.fc1``: one row per kind of layer."""
    return _INDEXED.sub("", name.removesuffix(".weight"))


def shared(reference: dict[str, torch.Tensor], other: dict[str, torch.Tensor]) -> dict[str, tuple[int, int]]:
    """Per layer kind (and ``all``): (kept by both, kept by ``other``), over the layers both have."""
    counts: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for name, mask in other.items():
        if name not in reference or reference[name].shape != mask.shape:
            continue
        both, kept = int((mask & reference[name]).sum()), int(mask.sum())
        for key in (layer_kind(name), "all"):
            counts[key][0] += both
            counts[key][1] += kept
    return {key: (both, kept) for key, (both, kept) in counts.items()}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("reference", type=Path)
    parser.add_argument("others", type=Path, nargs="+")
    args = parser.parse_args(argv)
    reference = kept_masks(args.reference)
    tables = {path.stem: shared(reference, kept_masks(path)) for path in args.others}
    kinds = list(next(iter(tables.values())))
    kinds.sort(key=lambda kind: kind == "all")
    print(f"share of each checkpoint's kept weights that {args.reference.stem} also kept")
    print("| layer | kept | " + " | ".join(tables) + " |")
    print("|---|---|" + "---|" * len(tables))
    for kind in kinds:
        kept = next(iter(tables.values()))[kind][1]
        cells = [f"{both / max(n, 1):.2f}" for both, n in (table[kind] for table in tables.values())]
        print(f"| {kind} | {kept} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
