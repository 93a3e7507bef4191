"""Pruning telemetry: mask flips, drift of the selection and gradient statistics, cheap enough to leave on.

Everything is accumulated with fixed-shape tensor ops on the weights' device, without waiting for it. The
numbers of an iteration form one device tensor (``Pruner.telemetry()``, a ``DeviceStats``); Python numbers
are made only when someone asks: ``pruner.stats`` or a callback (one host copy per iteration), or
``TelemetryRecorder.flush()`` (one host copy for many iterations, for training loops on a GPU).

Definitions (per layer l with n_l weights; masks are True = kept):

* ``flips[l]``: positions whose important/unimportant label changed during this iteration;
  ``flips_permille[l] = 1000 * flips[l] / n_l``. The paper's mask-dynamics figure plots this (Sec. 3.4).
* ``flips_permille_total``: all flips of the iteration over all pruned weights, per mille.
* ``distance_first_permille``: Hamming distance between the current selection and the first one (made when
  the pruner was built), per mille of all pruned weights.
* ``distance_window_permille``: Hamming distance to the selection ``window`` iterations earlier (to the first
  selection while fewer than ``window`` iterations have run). Kept exactly in bounded memory: the masks of
  the last ``window`` iterations stay on the device bit-packed (an iteration that changed nothing shares the
  previous one's bits), and a distance is the popcount of an XOR. At most ``(window + 1) / 8`` bytes per
  pruned weight: 544 MB for EDSR-L's 43 M weights and ``window=100``, 11 MB for SwinIR-light's 0.88 M.
* ``grad_norm[l]``: L2 norm of the weight gradient. ``grad_var[l]``: population variance of ``|grad|`` over
  all positions of the layer, pruned ones included, which is how the official code logged it (the paper's
  trainability figure). ``grad_var_signed[l]``: population variance of the signed gradient.
* ``kept[l]``: fraction of the layer's weights currently selected as important.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import pairwise
from typing import Protocol

import numpy as np
import torch
from torch import Tensor

# Bits set in each byte value, for popcount on the CPU.
_BITS = np.array([bin(i).count("1") for i in range(256)], dtype=np.uint8)
# CPU tensors take NumPy's faster kernels where exact (tests that stand the CPU in for a GPU turn this off).
CPU_NUMPY = True


def numpy_path(t: Tensor) -> bool:
    """Whether ``t`` goes through the CPU's NumPy fast paths."""
    return CPU_NUMPY and t.device.type == "cpu"


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


@dataclass(frozen=True)
class DeviceStats:
    """One iteration's telemetry on the device, made without host sync by ``Pruner.telemetry()``.

    ``values`` (float64) holds four blocks of one number per pruned layer in model order (flips, gradient L2
    norm, variance of |grad|, variance of grad; NaN gradients when ``before_step`` was not called), then three
    whole-model counts: flips, Hamming distance to the first selection and to ``window`` iterations earlier.
    """

    iteration: int
    stage: str
    have_grads: bool
    values: Tensor


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


def count_true(mask: Tensor) -> Tensor:
    """Per-row count of a (rows, n) bool tensor as (rows, 1) int64. On the CPU NumPy counts row by row (its
    sum along an axis converts every entry; torch's bool sum is slower still), since the pruners count masks
    of millions of weights every step."""
    if numpy_path(mask):
        rows = mask.numpy()
        return torch.from_numpy(np.fromiter(map(np.count_nonzero, rows), np.int64, len(rows)).reshape(-1, 1))
    return _count_true_torch(mask)


def count_differing(x: Tensor, y: Tensor) -> Tensor:
    """Per-row count of the entries where two (rows, n) bool tensors differ, as (rows, 1) int64: their XOR
    taken on machine words (fewer, wider operations than on bools), whose bytes are each entry's 0/1."""
    words_x, words_y = as_words(x, y)
    return count_true((words_x ^ words_y).view(torch.bool))


def as_words(*masks: Tensor) -> tuple[Tensor, ...]:
    """Bool tensors of one shape viewed as the widest integers their last dimension and layouts allow
    (compare ~10x faster), the same for all; slices that start mid-word stay in bytes."""

    def fits(mask: Tensor, size: int) -> bool:
        starts = (mask.storage_offset(), mask.shape[-1], *mask.stride()[:-1])  # where words would begin
        return mask.stride(-1) == 1 and all(x % size == 0 for x in starts)

    words = ((8, torch.int64), (4, torch.int32), (2, torch.int16))
    word = next((w for size, w in words if all(fits(m, size) for m in masks)), torch.uint8)
    return tuple(m.view(word) for m in masks)


def _count_true_torch(mask: Tensor) -> Tensor:
    """``count_true`` off the CPU (tested on it against the NumPy path)."""
    return mask.sum(1, keepdim=True, dtype=torch.int32).long()  # int32 sums are ~6x faster than int64


def pack_bits(mask: Tensor) -> Tensor:
    """A bool tensor as flat uint8, 8 entries a byte, the first in the lowest bit (little-endian machines)."""
    flat = mask.reshape(-1)
    if numpy_path(flat):  # NumPy's packbits: ~100x the bit tricks below on a CPU
        return torch.from_numpy(np.packbits(flat.numpy(), bitorder="little"))
    return _pack_bits_torch(flat)


def _pack_bits_torch(flat: Tensor) -> Tensor:
    """``pack_bits`` of a flat bool tensor off the CPU, in int64 words (tested on it against NumPy)."""
    words = torch.nn.functional.pad(flat.view(torch.uint8), (0, -flat.numel() % 8)).view(torch.int64)
    # Move the 0/1 of byte i to bit i: gather pairs, then nibbles, then the byte (no overflow, no carries).
    words = (words | words >> 7) & 0x0003000300030003
    words = (words | words >> 14) & 0x0000000F0000000F
    return ((words | words >> 28) & 0xFF).to(torch.uint8)


def unpack_bits(packed: Tensor, numel: int) -> Tensor:
    """The first ``numel`` entries of a ``pack_bits`` result as a flat bool tensor."""
    shifts = torch.arange(8, dtype=torch.uint8, device=packed.device)
    return (packed.unsqueeze(1) >> shifts & 1).view(-1)[:numel].bool()


def popcount(packed: Tensor) -> Tensor:
    """Number of set bits in a uint8 tensor, as an int64 scalar tensor (bit-parallel adds per byte)."""
    if numpy_path(packed):
        return torch.tensor(int(_BITS[packed.numpy()].sum(dtype=np.int64)))
    return _popcount_torch(packed)


def _popcount_torch(packed: Tensor) -> Tensor:
    """``popcount`` off the CPU (tested on it against the NumPy path)."""
    x = packed - (packed >> 1 & 0x55)
    x = (x & 0x33) + (x >> 2 & 0x33)
    return ((x + (x >> 4)) & 0x0F).sum(dtype=torch.int64)


class DriftTracker:
    """Flip counts and Hamming distances of the live stacked (layers, n) kept-masks of the layer groups.

    ``record`` counts flips as the pruner changes masks, ``end_iteration`` closes an iteration; neither waits
    for the device. The masks of the last ``window`` iterations are kept packed in ``_history``; a group's
    distance is counted again only when one of its two packed masks is a new tensor (fast path: rarely).
    """

    def __init__(self, masks: list[Tensor], window: int) -> None:
        if window < 1:
            raise ValueError(f"window must be >= 1 iteration, got {window}")
        self.window = window
        self.masks = masks  # live: the pruner updates them in place
        self.first = [pack_bits(m) for m in masks]
        self._history: deque[list[Tensor]] = deque([self.first], maxlen=window + 1)
        self._changed = [False] * len(masks)
        self.flips = [torch.zeros(m.shape[0], dtype=torch.long, device=m.device) for m in masks]
        self.last_flips = [f.clone() for f in self.flips]
        zero = [torch.zeros((), dtype=torch.long, device=m.device) for m in masks]
        self._distances = [list(zip(self.first, self.first, zero, strict=True)) for _ in ("first", "window")]

    def record(self, group: int, rows: Tensor, old: Tensor, new: Tensor) -> None:
        """Count the flips between old and new masks of some rows (layers) of a group; the mask changes."""
        self.flips[group].index_add_(0, rows, count_differing(old, new).view(-1))
        self._changed[group] = True

    def end_iteration(self) -> None:
        """Close the iteration: keep its flips as ``last_flips`` and its masks (packed) in the window."""
        groups = zip(self.masks, self._changed, self._history[-1], strict=True)
        self._history.append([pack_bits(m) if changed else last for m, changed, last in groups])
        self._changed = [False] * len(self.masks)
        self.last_flips, self.flips = self.flips, [torch.zeros_like(f) for f in self.flips]

    def counts(self) -> Tensor:
        """int64 (3,): flips of the last iteration, distance to the first masks and to ``window`` back."""
        flips = torch.stack([f.sum() for f in self.last_flips]).sum()
        now = self._history[-1]
        return torch.stack(
            (flips, self._distance(0, now, self.first), self._distance(1, now, self._history[0]))
        )

    def _distance(self, kind: int, now: list[Tensor], then: list[Tensor]) -> Tensor:
        """Total Hamming distance of two lists of packed masks, per group cached while both stay the same."""
        cache = self._distances[kind]
        for g, (a, b) in enumerate(zip(now, then, strict=True)):
            if cache[g][0] is not a or cache[g][1] is not b:
                cache[g] = (a, b, popcount(a ^ b))
        return torch.stack([count for _, _, count in cache]).sum()

    def state_dict(self) -> dict:
        """The first masks and the flip positions of each iteration in the window (compact; any mode)."""
        ring: list[list[Tensor]] = [[] for _ in self.masks]
        for before, after in pairwise(self._history):
            for positions, b, a, m in zip(ring, before, after, self.masks, strict=True):
                flipped = (
                    b.new_zeros(0, dtype=torch.long) if a is b else unpack_bits(a ^ b, m.numel()).nonzero()
                )
                positions.append(flipped.view(-1))
        return {
            "window": self.window,
            "first": [
                unpack_bits(f, m.numel()).view_as(m) for f, m in zip(self.first, self.masks, strict=True)
            ],
            "ring_index": [torch.cat(r) if r else torch.zeros(0, dtype=torch.long) for r in ring],
            "ring_length": [torch.tensor([len(p) for p in r], dtype=torch.long) for r in ring],
            "ring_size": len(self._history) - 1,
        }

    def load_state_dict(self, state: dict) -> None:
        """Restore a ``state_dict()``; the live masks must already hold the restored selection."""
        self.window = int(state["window"])
        self.first = [pack_bits(f.to(m.device)) for f, m in zip(state["first"], self.masks, strict=True)]
        size = int(state["ring_size"])
        entries = []  # per group, the flip positions of each iteration in the window
        for index, lengths, m in zip(state["ring_index"], state["ring_length"], self.masks, strict=True):
            entries.append(torch.split(index.to(m.device), lengths.tolist()) if size else ())
        masks = [m.reshape(-1).clone() for m in self.masks]
        history = [[pack_bits(m) for m in masks]]
        for i in reversed(range(size)):  # undo the window's iterations, newest first
            entry = []
            for m, positions, packed in zip(masks, entries, history[0], strict=True):
                if positions[i].numel():
                    m[positions[i]] ^= True
                    packed = pack_bits(m)
                entry.append(packed)
            history.insert(0, entry)
        self._history = deque(history, maxlen=self.window + 1)
        self._changed = [False] * len(self.masks)
        self.flips = [torch.zeros_like(f) for f in self.flips]
        self.last_flips = [torch.zeros_like(f) for f in self.flips]


class TelemetrySource(Protocol):
    """What ``TelemetryRecorder`` reads from a pruner (``iss.pruning.Pruner`` is one)."""

    def telemetry(self) -> DeviceStats: ...

    def step_stats(self, record: DeviceStats, values: Sequence[float]) -> StepStats: ...


class TelemetryRecorder:
    """Every iteration's telemetry of a pruner kept on its device, turned into ``StepStats`` in batches.

    For training loops on a GPU, where ``pruner.stats`` or a callback would make the host wait for the device
    each iteration: ``record`` after every ``pruner.step()`` only queues device ops, and ``flush`` (e.g. every
    100 iterations, when the loss is checked anyway) copies all queued iterations to the host at once::

        recorder = TelemetryRecorder(pruner)
        for iteration, (lr, hr) in enumerate(batches, 1):
            ...  # backward, pruner.before_step(), optimizer.step(), pruner.step()
            recorder.record(loss.detach())
            if iteration % 100 == 0:
                for stats, loss_value in recorder.flush():
                    trace.observe(stats)
                    trace.commit(stats.iteration, loss_value)
    """

    def __init__(self, pruner: TelemetrySource) -> None:
        self.pruner = pruner
        self._pending: list[tuple[DeviceStats, Tensor]] = []

    def __len__(self) -> int:
        """Iterations recorded since the last flush."""
        return len(self._pending)

    def record(self, loss: Tensor | float | None = None) -> None:
        """Queue the telemetry of the iteration the pruner just closed, with its loss (a tensor on the
        pruner's device or a number; NaN if not given). No host sync."""
        stats = self.pruner.telemetry()
        if isinstance(loss, Tensor):
            value = loss.detach().reshape(()).to(stats.values.dtype)
        else:
            value = stats.values.new_full((), math.nan if loss is None else float(loss))
        self._pending.append((stats, value))

    def flush(self) -> list[tuple[StepStats, float]]:
        """The queued iterations as ``(StepStats, loss)``, oldest first (one host copy); empties the queue."""
        if not self._pending:
            return []
        values = torch.stack([s.values for s, _ in self._pending])
        losses = torch.stack([loss for _, loss in self._pending])
        rows = torch.cat((values, losses.unsqueeze(1)), 1).tolist()
        out = [
            (self.pruner.step_stats(s, row[:-1]), row[-1])
            for (s, _), row in zip(self._pending, rows, strict=True)
        ]
        self._pending.clear()
        return out
