"""ASSL, unstructured: soft-mask alignment among same-shape layers, then a growing L2 penalty like SRP."""

from __future__ import annotations

from collections.abc import Sequence
from fnmatch import fnmatchcase

import torch
from torch import Tensor, nn

from iss.registry import PRUNERS

from .base import LayerGroup, PruneOptions
from .iss_r import GrowingL2
from .schedule import ETA_INTERVAL, ETA_MAX, SSA_ITERS, STABILIZE_ITERS, growth_schedule


@PRUNERS.register("assl")
class ASSL(GrowingL2):
    """Aligned structured sparsity learning (Zhang et al. 2021), adapted to single weights (paper Sec. 4).

    Phases (official unstructured schedule: 17,260 + 100,000 + 43,150 iterations, scaled by ``prune_iters``):

    1. SSA (``ssa_iters``): every iteration each layer's soft mask ``s = sigmoid((|w| - tau) / (T tau))`` is
       computed (tau = the exact ``ceil(ratio * n)``-th smallest |w|, ``T = temperature``), and for the
       *constrained* layers (``constrain`` globs; all layers by default) the gradient of
       ``lw_spr * mean_pairs mean_i (s_a,i - s_b,i)^2`` over pairs of constrained layers of the same shape is
       added to the weight gradients (real gradients through the sigmoid). Unconstrained layers meanwhile get
       SRP's growing L2 on the set picked at initialisation.
    2. At the end of SSA the unimportant set of every layer is re-picked by |w|, and eta grows on it as in SRP
       (``delta`` every ``eta_interval`` iterations to ``eta_max``), then ``stabilize_iters`` iterations.
    3. The set is hard-pruned and the network fine-tuned.

    Deviations from the original filter-level ASSL: single weights instead of filters and no weight
    normalisation (the soft mask acts on |w| instead of the WN scale); the alignment term is the pairwise
    squared distance of soft masks (ASSL's ``-mean(S S^T)`` plus its diagonal, so it aligns without
    pushing every mask towards 1) and only among layers of the same shape, where positions correspond; each
    layer keeps its own exact ``ceil(ratio * n)`` (the official ``adjust_pr`` averaging, which fully pruned
    EDSR-L's first and last convs, is not reproduced). Unlike the official unstructured code, whose SSA term
    was computed from detached weights and had no effect, the term here has gradients. In N:M mode there is
    no per-layer threshold and the alignment phase only re-picks.
    """

    method = "assl"

    def __init__(
        self,
        model: nn.Module,
        ratio: float,
        options: PruneOptions | None = None,
        *,
        prune_iters: int | None = None,
        ssa_iters: int | None = None,
        delta: float | None = None,
        eta_interval: int = ETA_INTERVAL,
        eta_max: float = ETA_MAX,
        stabilize_iters: int | None = None,
        lw_spr: float = 1.0,
        temperature: float = 0.1,
        constrain: Sequence[str] | None = None,
    ) -> None:
        if lw_spr < 0 or temperature <= 0:
            raise ValueError(f"need lw_spr >= 0 and temperature > 0, got {lw_spr} and {temperature}")
        self.lw_spr = float(lw_spr)
        self.temperature = float(temperature)
        self.constrain = constrain
        schedule = growth_schedule(
            prune_iters, delta=delta, eta_interval=eta_interval, eta_max=eta_max,
            stabilize_iters=stabilize_iters, ssa_iters=ssa_iters,
            official_stabilize=STABILIZE_ITERS, official_ssa=SSA_ITERS,
        )  # fmt: skip
        super().__init__(model, ratio, options, schedule=schedule)

    def setup(self) -> None:
        """Zero penalties, and which rows of each group are constrained and aligned with which."""
        super().setup()
        self._constrained = []  # per group: (layers, 1) bool
        self._aligned = []  # per group: (row-index tensor, rows) of same-shape constrained layers (2 or more)
        for g in self.groups:
            flags = [
                self.constrain is None or any(fnmatchcase(n, p) for p in self.constrain) for n in g.names
            ]
            self._constrained.append(torch.tensor(flags, device=g.kept.device).view(-1, 1))
            by_shape: dict[tuple, list[int]] = {}
            for row, (flag, module) in enumerate(zip(flags, g.modules, strict=True)):
                if flag:
                    by_shape.setdefault(tuple(module.weight.shape), []).append(row)
            rows = [(torch.tensor(r, device=g.kept.device), r) for r in by_shape.values() if len(r) > 1]
            self._aligned.append(rows)

    def regularize(self) -> None:
        """SSA phase: re-pick and align the constrained layers; then SRP's growing L2."""
        ssa = self.schedule.ssa_iters
        if self.iteration < ssa:
            self.reselect(fixed_rows=[~c for c in self._constrained])
            self._align()
            if self.iteration % self.schedule.eta_interval == 0:
                self.grow(rows=[~c for c in self._constrained])
        elif self.iteration == ssa:
            self.reselect()
        if self.schedule.grows_at(self.iteration, start=ssa):
            self.grow()
        self.apply_l2()

    def _align(self) -> None:
        """Add the gradient of the soft-mask alignment term to the constrained layers' weight gradients."""
        if self.lw_spr == 0:
            return
        for g, groups in zip(self.groups, self._aligned, strict=True):
            if not groups or g.tau is None:
                continue
            soft, scale = self._soft_masks(g)
            for index, rows in groups:
                s = soft.index_select(0, index)
                n_layers = len(rows)
                pairs = n_layers * (n_layers - 1) / 2
                d_soft = (n_layers * s - s.sum(0, keepdim=True)) * (2 / (pairs * g.n))
                d_mag = d_soft * s * (1 - s) / scale.index_select(0, index)
                for row, d in zip(rows, d_mag, strict=True):
                    w = g.params[row]
                    if w.grad is not None:
                        w.grad.add_((d.view(w.shape) * w.detach().sign()), alpha=self.lw_spr)

    @torch.no_grad()
    def alignment_loss(self) -> float:
        """Current value of the alignment term (without ``lw_spr``), for tests and logs."""
        total = 0.0
        for g, groups in zip(self.groups, self._aligned, strict=True):
            if groups and g.tau is not None:
                soft, _ = self._soft_masks(g)
                for index, rows in groups:
                    s = soft.index_select(0, index)
                    diff = (s.unsqueeze(0) - s.unsqueeze(1)).pow(2).mean(-1)
                    total += float(diff.sum() / (len(rows) * (len(rows) - 1)))
        return total

    def _soft_masks(self, g: LayerGroup) -> tuple[Tensor, Tensor]:
        """``sigmoid((|w| - tau) / (T tau))`` of a group (layers, n) and the per-row scale ``T tau``."""
        a = g.magnitudes()
        scale = (self.temperature * g.tau).clamp(min=torch.finfo(a.dtype).tiny)
        return torch.sigmoid((a - g.tau) / scale), scale
