"""ISS-P: iterative soft shrinkage by percentage (the paper's method)."""

from __future__ import annotations

from torch import nn

from iss.registry import PRUNERS

from .base import PruneOptions, Pruner

PAPER_PRUNE_ITERS = 100_000  # K_p of the paper (Sec. 4, implementation details)


@PRUNERS.register("iss-p")
class ISSP(Pruner):
    """Iterative soft shrinkage by percentage, paper Sec. 3.4, Eq. (ISS-P forward) and Algorithm 1.

    For the first ``prune_iters`` (K_p) iterations, after every optimizer step, the ``ceil(ratio * n)``
    smallest-|w| weights of each layer are re-selected and multiplied by ``alpha`` in place
    (``m = alpha`` on unimportant weights, 1 elsewhere). At iteration K_p the last selection becomes the hard
    0/1 mask ``M^[K_p]`` of the fine-tuning stage (Eq. ISS-P fine-tuning), re-applied after every step.
    ``alpha = 0.95`` as in the paper and the official README.

    ``alpha_ramp`` (default 0: the paper's constant alpha) lowers alpha linearly to 0 over the last
    ``alpha_ramp`` iterations of the pruning stage, so that the network meets the hard mask gradually: an
    alpha schedule over iterations, which the paper leaves open ("could be customized").
    """

    method = "iss-p"

    def __init__(
        self,
        model: nn.Module,
        ratio: float,
        options: PruneOptions | None = None,
        *,
        alpha: float = 0.95,
        alpha_ramp: int = 0,
        prune_iters: int = PAPER_PRUNE_ITERS,
    ) -> None:
        if not 0.0 <= alpha < 1.0:
            raise ValueError(
                f"alpha must lie in [0, 1) (the shrink factor of unimportant weights), got {alpha}"
            )
        if isinstance(alpha_ramp, bool) or not isinstance(alpha_ramp, int) or alpha_ramp < 0:
            raise ValueError(f"alpha_ramp must be an integer >= 0 (iterations), got {alpha_ramp!r}")
        self.alpha = float(alpha)
        self.alpha_ramp = alpha_ramp
        super().__init__(model, ratio, options, prune_iters=prune_iters)

    def current_alpha(self) -> float:
        """The shrink factor of this iteration: ``alpha``, falling to 0 over the ramp's last iterations."""
        left = self.prune_iters - self.iteration
        return self.alpha * min(1.0, left / self.alpha_ramp) if self.alpha_ramp else self.alpha

    def prune_step(self) -> None:
        """Re-select, then multiply the unimportant weights by this iteration's alpha."""
        self.reselect()
        self.shrink(self.current_alpha())
