"""Scratch: a random sparse structure with a fresh initialisation, trained as it is."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from iss.registry import PRUNERS

from .base import PruneOptions, Pruner, select_nm, select_smallest


@PRUNERS.register("scratch")
class Scratch(Pruner):
    """Training a random sparse network from scratch, the paper's baseline of Sec. 3.2 ("Baseline Methods").

    Each layer gets a random mask with exactly ``ceil(ratio * n)`` unimportant weights (drawn from a
    generator seeded with ``seed``), its module is freshly initialised with ``reset_parameters()`` (under the
    same seed; the global RNG is left untouched), and the mask is applied at once and after every step.
    The official code meant to do this (``--reinit pth_reset``) but ``basicsr/utils/options.py`` forces
    ``reinit = False`` and picks the mask by L1, so its "Scratch" ran L1-norm; we do what the paper says.
    """

    method = "scratch"

    def __init__(
        self,
        model: nn.Module,
        ratio: float,
        options: PruneOptions | None = None,
        *,
        seed: int = 0,
    ) -> None:
        self.seed = seed
        super().__init__(model, ratio, options, prune_iters=0)

    def initial_selection(self) -> list[Tensor]:
        """A random selection per layer, from a generator seeded with ``seed``."""
        gen = torch.Generator().manual_seed(self.seed)
        kept = []
        for g in self.groups:
            scores = torch.rand(g.kept.shape, generator=gen)
            below = select_nm(scores, *self.nm) if self.nm else select_smallest(scores, g.k)[0]
            kept.append(~below.to(g.kept.device))
        return kept

    def setup(self) -> None:
        """Fresh initialisation of the pruned modules under ``seed`` (the global RNG is left as it was)."""
        cuda = sorted({g.kept.device.index or 0 for g in self.groups if g.kept.device.type == "cuda"})
        with torch.random.fork_rng(devices=cuda):
            torch.manual_seed(self.seed)
            for g in self.groups:
                for module in g.modules:
                    module.reset_parameters()
