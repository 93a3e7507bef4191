"""IHT: iterative hard thresholding, ISS-P with the unimportant weights set to zero."""

from __future__ import annotations

from torch import nn

from iss.registry import PRUNERS

from .base import PruneOptions
from .iss_p import ISSP, PAPER_PRUNE_ITERS


@PRUNERS.register("iht")
class IHT(ISSP):
    """Iterative hard thresholding, paper Sec. 3.3, Eq. (H).

    After every optimizer step of the first ``prune_iters`` (K_p) iterations the ``ceil(ratio * n)``
    smallest-|w| weights of each layer are set to 0 (``H(theta) = 0`` below ``tau``); the zeroed weights keep
    receiving gradients, so they can grow back. At K_p the last selection is frozen (as for ISS-P).
    """

    method = "iht"

    def __init__(
        self,
        model: nn.Module,
        ratio: float,
        options: PruneOptions | None = None,
        *,
        prune_iters: int = PAPER_PRUNE_ITERS,
    ) -> None:
        super().__init__(model, ratio, options, alpha=0.0, prune_iters=prune_iters)
