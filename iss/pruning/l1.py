"""L1-norm: a one-shot magnitude mask on the random initialisation, then sparse training."""

from __future__ import annotations

from torch import nn

from iss.registry import PRUNERS

from .base import PruneOptions, Pruner


@PRUNERS.register("l1")
class L1(Pruner):
    """L1-norm pruning (Li et al. 2017), the paper's baseline of Sec. 3.2 ("Baseline Methods"), unstructured.

    At build time the ``ceil(ratio * n)`` smallest-|w| weights of each layer of the randomly initialised
    network become a hard mask, applied at once and after every optimizer step; the stage is ``finetune``
    from iteration 0 (official ``train_L1norm.py``: no dense pre-training).
    """

    method = "l1"

    def __init__(self, model: nn.Module, ratio: float, options: PruneOptions | None = None) -> None:
        super().__init__(model, ratio, options, prune_iters=0)
