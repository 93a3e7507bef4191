"""SRP, unstructured: a growing L2 penalty on a set of weights fixed at initialisation."""

from __future__ import annotations

from torch import nn

from iss.registry import PRUNERS

from .base import PruneOptions
from .iss_r import GrowingL2
from .schedule import ETA_INTERVAL, ETA_MAX, STABILIZE_ITERS, growth_schedule


@PRUNERS.register("srp")
class SRP(GrowingL2):
    """Structure-regularised pruning (Zhang et al. 2022), unstructured as in the paper's Sec. 4 comparison.

    The unimportant set (``ceil(ratio * n)`` smallest |w| per layer of the random initialisation) is fixed
    at build time and never re-picked; its ``eta`` grows by ``delta`` every ``eta_interval`` iterations up to
    ``eta_max``, then ``stabilize_iters`` more iterations keep the penalty, then the set is hard-pruned and
    the network fine-tuned (official ``GReg-1``: 100,000 + 43,150 iterations). Deviations from the original
    filter-level SRP: single weights instead of filters, no residual index alignment (the official
    unstructured run matched no layer either), no pre-trained dense model.
    """

    method = "srp"

    def __init__(
        self,
        model: nn.Module,
        ratio: float,
        options: PruneOptions | None = None,
        *,
        prune_iters: int | None = None,
        delta: float | None = None,
        eta_interval: int = ETA_INTERVAL,
        eta_max: float = ETA_MAX,
        stabilize_iters: int | None = None,
    ) -> None:
        schedule = growth_schedule(
            prune_iters, delta=delta, eta_interval=eta_interval, eta_max=eta_max,
            stabilize_iters=stabilize_iters, official_stabilize=STABILIZE_ITERS,
        )  # fmt: skip
        super().__init__(model, ratio, options, schedule=schedule)

    def regularize(self) -> None:
        """Grow eta on the fixed set on growth iterations; always ``grad += eta * w``."""
        if self.schedule.grows_at(self.iteration):
            self.grow()
        self.apply_l2()
