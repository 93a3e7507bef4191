"""ISS-R: iterative soft shrinkage by a growing L2 regularisation on the current unimportant weights."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from iss.registry import PRUNERS

from .base import PruneOptions, Pruner
from .schedule import ETA_INTERVAL, ETA_MAX, GrowthSchedule, growth_schedule


class GrowingL2(Pruner):
    """Shared by ISS-R, SRP and ASSL: a per-weight penalty ``eta`` and ``grad += eta * w`` before each step.

    ``eta`` grows by ``delta`` on the unimportant weights on the schedule's growth iterations, capped at
    ``eta_max``, and is never reset (a weight that becomes important again keeps its penalty), as in the
    official ``_update_reg``/``_apply_reg``. The gradient term is ``eta * w`` (the official code), i.e. the
    derivative of ``eta/2 * w^2``; the paper's Eq. (ISS-R) writes the step as ``- 2 eta theta``.
    """

    def __init__(
        self, model: nn.Module, ratio: float, options: PruneOptions | None, *, schedule: GrowthSchedule
    ) -> None:
        self.schedule = schedule
        super().__init__(model, ratio, options, prune_iters=schedule.prune_iters)

    @property
    def eta(self) -> dict[str, Tensor]:
        """Layer weight name -> current penalty per weight (shaped like the weight)."""
        return {
            name: row.view(module.weight.shape)
            for g, eta in zip(self.groups, self._eta, strict=True)
            for name, module, row in zip(g.names, g.modules, eta, strict=True)
        }

    def setup(self) -> None:
        """A zero penalty per pruned weight."""
        self._eta = [
            torch.zeros(g.kept.shape, dtype=g.params[0].dtype, device=g.kept.device) for g in self.groups
        ]
        self._eta_views = [g.shaped(eta) for g, eta in zip(self.groups, self._eta, strict=True)]

    def grow(self, rows: list[Tensor] | None = None) -> None:
        """``eta += delta`` on the unimportant weights (of the flagged rows only, if given), capped."""
        for i, (g, eta) in enumerate(zip(self.groups, self._eta, strict=True)):
            grow = ~g.kept if rows is None else ~g.kept & rows[i]
            eta.add_(grow.to(eta.dtype), alpha=self.schedule.delta).clamp_(max=self.schedule.eta_max)

    def apply_l2(self) -> None:
        """``grad += eta * w`` for every pruned weight that has a gradient."""
        for g, etas in zip(self.groups, self._eta_views, strict=True):
            have = [(p.grad, e, p) for p, e in zip(g.params, etas, strict=True) if p.grad is not None]
            if have:
                grads, eta, weights = (list(x) for x in zip(*have, strict=True))
                torch._foreach_addcmul_(grads, eta, weights)

    def extra_state(self) -> dict[str, Any]:
        """The penalties ``eta``."""
        return {"eta": [e.clone() for e in self._eta]}

    def load_extra_state(self, state: dict[str, Any]) -> None:
        for eta, saved in zip(self._eta, state["eta"], strict=True):
            eta.copy_(saved)


@PRUNERS.register("iss-r")
class ISSR(GrowingL2):
    """Iterative soft shrinkage by regularisation, paper Sec. 3.4, Eq. (ISS-R) (official ``IST-GReg``).

    Every ``eta_interval`` (K_eta) iterations the ``ceil(ratio * n)`` smallest-|w| weights of each layer are
    re-picked and their ``eta`` grows by ``delta``; every iteration, before the optimizer step,
    ``grad += eta * w``. The pruning stage ends when eta reaches ``eta_max`` (official: delta 1e-4, K_eta 20,
    eta_max 0.5, i.e. 100,000 iterations) or after ``prune_iters``, scaling the schedule (see
    ``iss.pruning.schedule``); then the last pick is frozen into the hard mask.
    """

    method = "iss-r"

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
    ) -> None:
        schedule = growth_schedule(prune_iters, delta=delta, eta_interval=eta_interval, eta_max=eta_max)
        super().__init__(model, ratio, options, schedule=schedule)

    def regularize(self) -> None:
        """On growth iterations re-pick and grow eta there; always ``grad += eta * w``."""
        if self.schedule.grows_at(self.iteration):
            self.reselect()
            self.grow()
        self.apply_l2()
