"""Shared by the tests: the repository root, tiny model configurations (fast on CPU), random masks."""

from pathlib import Path

from torch import nn

import iss.pruning

ROOT = Path(__file__).resolve().parents[1]
TINY = dict(embed_dim=12, depths=(2,), num_heads=(2,))  # SwinIR-light with a few thousand weights
# Constructor overrides giving a model small enough for a fast forward; every registered arch needs one.
TINY_ARCHS = {
    "swinir-light": dict(embed_dim=12, depths=(2, 2), num_heads=(2, 2)),
    "edsr-l": dict(num_feat=8, num_block=2),
    "edsr-baseline": dict(num_feat=8, num_block=2),
    "cat-r": dict(
        embed_dim=96, depth=(2,), num_heads=(2,), split_size_0=(4,), split_size_1=(16,), mlp_ratio=1.0
    ),
}


def masked(module: nn.Module, ratio: float = 0.95, seed: int = 0) -> nn.Module:
    """``module`` freshly initialised with a random mask of exactly ``ceil(ratio * n)`` zeros per
    Conv2d/Linear weight (the scratch pruner), in eval mode."""
    iss.pruning.build("scratch", module, ratio, seed=seed)
    return module.eval()
