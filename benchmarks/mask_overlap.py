"""Which weights each checkpoint kept, against a reference checkpoint: the README's mask-overlap figures.

    python benchmarks/mask_overlap.py checkpoints/swinir-light_x4_l1_r0.99.safetensors \
        checkpoints/swinir-light_x4_{iss-p,srp,assl}_r0.99.safetensors

For each other checkpoint, prints the share of its kept weights (its stored mask) that the reference also
kept, per kind of layer (``iss.ui.sparsity.layer_type``: ``layers.2.residual_group.blocks.3.mlp.fc1``
counts as ``mlp.fc1``) and over all pruned layers. The methods of one zoo group start from the same
weights, so an L1 checkpoint as reference (its mask is fixed at initialisation) shows how far each method
moved from there.
"""

from __future__ import annotations

import argparse
from collections import defaultdict
from pathlib import Path

import numpy as np

from iss import checkpoint
from iss.ui.sparsity import layer_type


def kept_masks(path: Path) -> dict[str, np.ndarray]:
    """The stored mask of every pruned weight of a checkpoint, by parameter name (not its nonzero pattern: a
    kept weight that training drove under fp16's range is stored as 0 but still kept)."""
    return {name: mask.numpy() for name, mask in checkpoint.read_masks(path).items()}


def shared(reference: dict[str, np.ndarray], other: dict[str, np.ndarray]) -> dict[str, tuple[int, int]]:
    """Per layer kind (and ``all``): (kept by both, kept by ``other``), over the layers both have."""
    counts: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for name, mask in other.items():
        if name not in reference or reference[name].shape != mask.shape:
            continue
        both, kept = int((mask & reference[name]).sum()), int(mask.sum())
        for key in (layer_type(name), "all"):
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
