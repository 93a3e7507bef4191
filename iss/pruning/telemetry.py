"""Pruning telemetry: mask flips, drift of the selection and gradient statistics, cheap enough to leave on.

Everything is accumulated as tensor ops on the weights' device; Python floats are made once per step, and
only when someone asks (a callback is registered or ``pruner.stats`` is read).

Definitions (per layer l with n_l weights; masks are True = kept):

* ``flips[l]``: positions whose important/unimportant label changed during this iteration;
  ``flips_permille[l] = 1000 * flips[l] / n_l``. The paper's mask-dynamics figure plots this (Sec. 3.4).
* ``flips_permille_total``: all flips of the iteration over all pruned weights, per mille.
* ``distance_first_permille``: Hamming distance between the current selection and the first one (made when
  the pruner was built), per mille of all pruned weights.
* ``distance_window_permille``: Hamming distance to the selection ``window`` iterations earlier (to the first
  selection while fewer than ``window`` iterations have run). Kept exactly and cheaply: the flip positions of
  the last ``window`` iterations are stored (flips are rare), and their parity is the XOR of both masks.
* ``grad_norm[l]``: L2 norm of the weight gradient. ``grad_var[l]``: population variance of ``|grad|`` over
  all positions of the layer, pruned ones included, which is how the official code logged it (the paper's
  trainability figure). ``grad_var_signed[l]``: population variance of the signed gradient.
* ``kept[l]``: fraction of the layer's weights currently selected as important.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

import torch
from torch import Tensor


@dataclass(frozen=True)
class StepStats:
    """Telemetry of one iteration, delivered to ``pruner.add_callback`` functions after ``pruner.step()``."""

    iteration: int
    stage: str
    flips: dict[str, int]
    flips_permille: dict[str, float]
    grad_norm: dict[str, float]
    grad_var: dict[str, float]
    grad_var_signed: dict[str, float]
    kept: dict[str, float]
    flips_permille_total: float
    distance_first_permille: float
    distance_window_permille: float


def grad_sums(grads: Tensor, scratch: Tensor | None = None) -> Tensor:
    """Per-row ``[sum g, sum |g|, sum g^2]`` of a stacked (layers, n) gradient block: (layers, 3).

    ``scratch`` (same shape) receives ``|g|``; plain sums and the L2 norm are the fast reductions on CPU.
    """
    l2 = torch.linalg.vector_norm(grads, ord=2, dim=1)
    return torch.stack([grads.sum(1), torch.abs(grads, out=scratch).sum(1), l2 * l2], dim=1)


def grad_moments(sums: Tensor, n: int) -> Tensor:
    """(layers, 3) float64: L2 norm, variance of |g| and variance of g, from ``grad_sums`` (one pass)."""
    s = sums.double()
    mean_sq = s[:, 2] / n
    var_abs = (mean_sq - (s[:, 1] / n) ** 2).clamp_(min=0)
    var_signed = (mean_sq - (s[:, 0] / n) ** 2).clamp_(min=0)
    return torch.stack([s[:, 2].sqrt(), var_abs, var_signed], dim=1)


def same_mask(x: Tensor, y: Tensor) -> bool:
    """Equality of two bool tensors of one shape, compared as machine words (about 10x faster than bools)."""
    n = x.numel()
    word = next(
        d for b, d in ((8, torch.int64), (4, torch.int32), (2, torch.int16), (1, torch.uint8)) if n % b == 0
    )
    return torch.equal(x.reshape(-1).view(word), y.reshape(-1).view(word))


class DriftTracker:
    """Flip counts and Hamming distances of a sequence of stacked (layers, n) kept-masks, per layer group."""

    def __init__(self, first: list[Tensor], window: int) -> None:
        if window < 1:
            raise ValueError(f"window must be >= 1 iteration, got {window}")
        self.window = window
        self.first = [m.clone() for m in first]
        self._window_xor = [torch.zeros_like(m) for m in first]
        self._ring: deque[list[Tensor]] = deque()
        self._pending: list[list[Tensor]] = [[] for _ in first]  # flip positions of this iteration
        self._empty = [torch.zeros(0, dtype=torch.long, device=m.device) for m in first]
        self.last_flips = [torch.zeros(m.shape[0], dtype=torch.long, device=m.device) for m in first]
        self.flips = [f.clone() for f in self.last_flips]
        self.dist_first = [torch.zeros(m.shape[0], dtype=torch.long, device=m.device) for m in first]
        self.dist_window = [torch.zeros((), dtype=torch.long, device=m.device) for m in first]

    def record(self, group: int, rows: Tensor, old: Tensor, new: Tensor) -> bool:
        """Flips between old and new masks of some rows (layers) of a group; update distances; any flip?"""
        if same_mask(old, new):
            return False
        changed = old ^ new
        self.flips[group].index_add_(0, rows, changed.sum(1, dtype=torch.int32).long())
        first = self.first[group].index_select(0, rows)
        self.dist_first[group].index_copy_(0, rows, (new ^ first).sum(1, dtype=torch.int32).long())
        where = changed.nonzero()
        self._pending[group].append(rows[where[:, 0]] * changed.shape[1] + where[:, 1])
        return True

    def end_iteration(self) -> None:
        """Close the iteration: keep its flips as ``last_flips``, slide the window by one iteration."""
        entry = [self._join(g) for g in range(len(self.first))]
        self._ring.append(entry)
        touched = {g for g, idx in enumerate(entry) if idx.numel()}
        for g in touched:
            self._toggle(g, entry[g])
        if len(self._ring) > self.window:
            for g, idx in enumerate(self._ring.popleft()):
                if idx.numel():
                    self._toggle(g, idx)
                    touched.add(g)
        for g in touched:
            self.dist_window[g] = self._window_xor[g].sum(dtype=torch.int32).long()
        self.last_flips = self.flips
        self.reset_flips()

    def reset_flips(self) -> None:
        """Start counting the flips of a new iteration."""
        self.flips = [torch.zeros_like(f) for f in self.last_flips]
        self._pending = [[] for _ in self.first]

    def _join(self, group: int) -> Tensor:
        parts = self._pending[group]
        if not parts:
            return self._empty[group]
        return parts[0] if len(parts) == 1 else torch.cat(parts)

    def _toggle(self, group: int, idx: Tensor) -> None:
        flat = self._window_xor[group].view(-1)
        flat[idx] = ~flat[idx]

    def state_dict(self) -> dict:
        """The first masks and the flip positions of the window, as tensors (``weights_only``-loadable)."""
        ring = [[entry[g] for entry in self._ring] for g in range(len(self.first))]
        return {
            "window": self.window,
            "first": self.first,
            "ring_index": [torch.cat(r) if r else torch.zeros(0, dtype=torch.long) for r in ring],
            "ring_length": [torch.tensor([e.numel() for e in r], dtype=torch.long) for r in ring],
            "ring_size": len(self._ring),
        }

    def load_state_dict(self, state: dict, current: list[Tensor]) -> None:
        """Restore the window and the first masks; ``current`` are the restored kept-masks."""
        self.window = int(state["window"])
        self.first = [f.to(c.device).clone() for f, c in zip(state["first"], current, strict=True)]
        size = int(state["ring_size"])
        per_group = []
        for index, lengths, c in zip(state["ring_index"], state["ring_length"], current, strict=True):
            parts = list(torch.split(index.to(c.device), lengths.tolist())) if size else []
            per_group.append(parts)
        self._ring = deque([[per_group[g][i] for g in range(len(current))] for i in range(size)])
        self._window_xor = [torch.zeros_like(c) for c in current]
        for entry in self._ring:
            for g, idx in enumerate(entry):
                if idx.numel():
                    self._toggle(g, idx)
        self.dist_first = [
            (c ^ f).sum(1, dtype=torch.int32).long() for c, f in zip(current, self.first, strict=True)
        ]
        self.dist_window = [x.sum() for x in self._window_xor]
        self.last_flips = [torch.zeros_like(f) for f in self.last_flips]
        self.reset_flips()
