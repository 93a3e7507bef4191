"""Growing-regularisation schedules (ISS-R, SRP, ASSL) as plain data, official or scaled to a budget.

Official values (``Jiamian-Wang/Iterative-Soft-Shrinkage-SR`` README, from the ASSL/SRP EDSR setup): eta grows
by ``delta = 1e-4`` on the unimportant weights every ``eta_interval = 20`` iterations up to ``eta_max = 0.5``,
i.e. 5,000 updates = 100,000 iterations; SRP and ASSL then keep the regularisation for ``stabilize_iters =
43,150`` iterations; ASSL starts with ``ssa_iters = 17,260`` iterations of sparsity-structure alignment.

To fit a short budget, give ``prune_iters`` only: the phases keep their official proportions and ``delta`` is
chosen so that eta reaches ``eta_max`` exactly at the last update of the growth phase. E.g. SRP with
``prune_iters=2000``: stabilize 603, growth 1397 (70 updates, delta = 0.5/70). A trainer with a budget of N
iterations should pass ``prune_iters`` (e.g. N/5, the paper's K_p/K ratio for the benchmark runs) and nothing
else; explicit ``delta``, ``eta_interval``, ``stabilize_iters`` or ``ssa_iters`` override the scaling.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

DELTA = 1e-4
ETA_INTERVAL = 20
ETA_MAX = 0.5
STABILIZE_ITERS = 43_150
SSA_ITERS = 17_260


@dataclass(frozen=True)
class GrowthSchedule:
    """Phases in iterations (``ssa`` -> ``growth`` -> ``stabilize``) and the eta step of the growth phase."""

    ssa_iters: int
    growth_iters: int
    stabilize_iters: int
    delta: float
    eta_interval: int
    eta_max: float

    @property
    def prune_iters(self) -> int:
        """Length of the whole pruning stage; the mask freezes after it."""
        return self.ssa_iters + self.growth_iters + self.stabilize_iters

    def grows_at(self, iteration: int, start: int = 0) -> bool:
        """Whether eta grows before the step of 0-based ``iteration`` (every ``eta_interval`` from start)."""
        offset = iteration - start
        return (
            offset >= 0 and iteration < self.ssa_iters + self.growth_iters and offset % self.eta_interval == 0
        )


def growth_schedule(
    prune_iters: int | None = None,
    *,
    delta: float | None = None,
    eta_interval: int = ETA_INTERVAL,
    eta_max: float = ETA_MAX,
    stabilize_iters: int | None = None,
    ssa_iters: int | None = None,
    official_stabilize: int = 0,
    official_ssa: int = 0,
) -> GrowthSchedule:
    """The official schedule (``prune_iters=None``) or one scaled into ``prune_iters`` iterations."""
    if eta_interval < 1 or eta_max <= 0 or (delta is not None and delta <= 0):
        raise ValueError(
            f"need eta_interval >= 1, eta_max > 0, delta > 0 (got {eta_interval}, {eta_max}, {delta})"
        )
    for name, value in (("stabilize_iters", stabilize_iters), ("ssa_iters", ssa_iters)):
        if value is not None and value < 0:
            raise ValueError(f"{name} must be >= 0, got {value}")
    if prune_iters is None:
        delta = DELTA if delta is None else delta
        growth = eta_interval * math.ceil(round(eta_max / delta, 6))
        stabilize = official_stabilize if stabilize_iters is None else stabilize_iters
        ssa = official_ssa if ssa_iters is None else ssa_iters
        return GrowthSchedule(ssa, growth, stabilize, delta, eta_interval, eta_max)
    official_growth = ETA_INTERVAL * round(ETA_MAX / DELTA)
    official_total = official_ssa + official_growth + official_stabilize
    stabilize = (
        round(prune_iters * official_stabilize / official_total)
        if stabilize_iters is None
        else stabilize_iters
    )
    ssa = round(prune_iters * official_ssa / official_total) if ssa_iters is None else ssa_iters
    growth = prune_iters - stabilize - ssa
    if growth < 1:
        raise ValueError(
            f"prune_iters={prune_iters} leaves no iteration for eta to grow after ssa_iters={ssa} and "
            f"stabilize_iters={stabilize}; raise prune_iters or shorten the other phases"
        )
    if delta is None:
        delta = eta_max / math.ceil(growth / eta_interval)
    return GrowthSchedule(ssa, growth, stabilize, delta, eta_interval, eta_max)
