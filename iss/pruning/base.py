"""The ``Pruner`` base: layers, exact per-layer selection, masks, the prune -> finetune switch, resume.

How a pruner plugs into a training loop (the contract every method follows)::

    loss.backward()
    pruner.before_step()   # regularisation gradients (ISS-R, SRP, ASSL) and gradient telemetry
    optimizer.step()
    pruner.step()          # shrink / zero / re-apply the mask, in place, right after the optimizer step

Like the official code (``Jiamian-Wang/Iterative-Soft-Shrinkage-SR``, ``basicsr/pruner/ist_pruner.py``) the
pruner works in place on ``weight.data`` right after ``optimizer.step()``: no forward hooks, no renamed
parameters (``weight_orig``), parameter identity kept, so optimizers and ``state_dict`` keys are unaffected.
Gradients of unimportant weights are not masked and the optimizer state is not touched. The selection made at
build time (iteration 0) is the "first selection"; methods that prune during training leave the weights alone
then, so the very first forward sees the dense random initialisation, as in the official code (the paper's
figure draws the mask before the forward; the two differ only at the first iteration).

Selection is exact and on the weights' device: in every pruned layer exactly ``ceil(ratio * n)`` weights of
smallest ``|w|`` are unimportant (ties broken towards the lower flat index), computed with torch, never
sampled and never copied to the CPU. Layers with the same number of weights are stacked and handled by one
batched op. Two modes give bit-identical masks, weights and telemetry (``sync_free``; the default is chosen
by the weights' device):

* fast path (CPU): each step compares ``|w| > tau`` (tau from the last selection) word-wise with the mask;
  only the layers whose selection changed are selected again, where a search next to tau repairs it (a
  batched ``kthvalue`` only as a fallback). A step costs a few elementwise passes, but deciding what to
  skip reads device values on the host (``nonzero``, ``int``, ``bool``);
* sync-free (CUDA): every layer is selected every step with fixed-shape ops (a batched ``kthvalue``, ties
  by a cumulative sum, masks and the shrink scale by ``torch.where``), so ``before_step()``/``step()`` only
  queue work and the host never waits for the GPU. On the CPU, where nothing is waited for, that costs 4x
  (SwinIR-light) to 14x (EDSR-L) the fast path's pruning step (``benchmarks/pruning_overhead.py``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from typing import Any, ClassVar

import numpy as np
import torch
from torch import Tensor, nn

from .telemetry import (
    DeviceStats,
    DriftTracker,
    StepStats,
    as_words,
    count_true,
    grad_moments,
    grad_sums,
    numpy_path,
)

LEARNABLE = (nn.Conv2d, nn.Linear)
STAGES = ("prune", "finetune")
# Largest per-row miss of the threshold hint repaired with a partial top-k (or n/256 if larger): beyond it
# one kthvalue is cheaper (top-2049 of 589,824 values costs a quarter of a kthvalue). The CPU's band search
# has no limit: a band holding tens of thousands of values is still far cheaper than a kthvalue of the row.
_HINT_REPAIR_LIMIT = 128


def n_unimportant(ratio: float, n: int) -> int:
    """``ceil(ratio * n)`` (float noise like 0.9*10 = 9.000000000000002 rounded away), at most ``n - 1``."""
    return min(n - 1, math.ceil(round(ratio * n, 6)))


def check_ratio(ratio: float) -> float:
    """The pruning ratio r (fraction of unimportant weights per layer) must lie in [0, 1)."""
    if isinstance(ratio, bool) or not isinstance(ratio, (int, float)) or not 0.0 <= ratio < 1.0:
        raise ValueError(f"ratio must be a number in [0, 1) (fraction of each layer pruned), got {ratio!r}")
    return float(ratio)


def parse_nm(nm: str | None, ratio: float) -> tuple[int, int] | None:
    """``"19:20"`` -> (19, 20): the N smallest of every M consecutive weights are unimportant."""
    if nm is None:
        return None
    try:
        n_small, m = (int(x) for x in str(nm).split(":"))
    except ValueError:
        raise ValueError(f"nm must look like 'N:M' (e.g. '19:20'), got {nm!r}") from None
    if not 0 < n_small < m:
        raise ValueError(f"nm '{nm}' needs 0 < N < M")
    if abs(n_small / m - ratio) > 0.005:
        raise ValueError(
            f"nm '{nm}' prunes {n_small / m:.4f} of each layer but ratio is {ratio}: make them agree"
        )
    return n_small, m


def find_layers(
    model: nn.Module, include: Sequence[str] | None = None, exclude: Sequence[str] | None = None
) -> list[tuple[str, nn.Module]]:
    """``(weight name, module)`` of every Conv2d/Linear, filtered by fnmatch globs on module/weight name."""
    if isinstance(model, (nn.parallel.DistributedDataParallel, nn.DataParallel)):
        model = model.module
    model = getattr(model, "_orig_mod", model)  # torch.compile wrapper
    include = (include,) if isinstance(include, str) else include
    exclude = (exclude,) if isinstance(exclude, str) else exclude
    seen: set[int] = set()
    layers = []
    for name, module in model.named_modules():
        if not isinstance(module, LEARNABLE) or id(module.weight) in seen:
            continue
        weight_name = f"{name}.weight" if name else "weight"
        names = (name, weight_name)
        if include is not None and not any(fnmatchcase(x, p) for p in include for x in names):
            continue
        if exclude is not None and any(fnmatchcase(x, p) for p in exclude for x in names):
            continue
        seen.add(id(module.weight))
        layers.append((weight_name, module))
    if not layers:
        raise ValueError(f"no Conv2d/Linear layer selected (include={include}, exclude={exclude})")
    return layers


def select_smallest(a: Tensor, k: int, hint: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """The ``k`` smallest entries of each row of ``a`` (rows, n): a bool mask and a threshold per row.

    The set is canonical: the k smallest values, ties at the k-th value resolved towards the lower index.
    Without ``hint``: one batched ``kthvalue`` and fixed-shape ops (no host sync). ``hint`` (rows, 1) is a
    previous threshold (this path reads device values on the host): when ``count(a <= hint) == k`` the set
    is already exact; when it is off by a few, the values next to it on the too-big or too-small side give the
    k-th value; otherwise ``kthvalue``. Every path gives the same set.
    """
    if hint is None:
        tau = a.kthvalue(k, dim=1, keepdim=True).values
        return _break_ties(a, tau, k), tau
    below = a <= hint
    miss = count_true(below) - k
    worst = int(miss.abs().max())
    if worst == 0:
        return below, hint
    if worst > max(_HINT_REPAIR_LIMIT, a.shape[1] // 256) and not _band_search(a):
        return select_smallest(a, k)
    tau = _repair_threshold(a, below, miss, worst, hint)
    below = a <= tau
    if bool((count_true(below) != k).any()):
        below = _break_ties(a, tau, k)
    return below, tau


def _band_search(a: Tensor) -> bool:
    """Whether ``a``'s threshold repair and gap ends are searched in a band around the threshold (CPU, NumPy)
    rather than by masked top-k and reductions over whole rows."""
    return numpy_path(a) and a.dtype == torch.float32


def _repair_threshold(a: Tensor, below: Tensor, miss: Tensor, worst: int, hint: Tensor) -> Tensor:
    """k-th smallest per row when ``a <= hint`` selects ``k + miss`` entries (``|miss| <= worst``)."""
    if _band_search(a):
        tau = hint.numpy().copy()
        for row in np.flatnonzero(miss.numpy()):
            tau[row, 0] = _kth_near(a[row].numpy(), tau[row, 0], int(miss[row, 0]))
        return torch.from_numpy(tau)
    tau = hint.clone()
    if bool((miss > 0).any()):
        # Too many below: the k-th smallest is the (miss+1)-th largest among those below.
        top = torch.where(below, a, float("-inf")).topk(worst + 1, dim=1).values
        tau = torch.where(miss > 0, top.gather(1, miss.clamp(min=0)), tau)
    if bool((miss < 0).any()):
        # Too few below: the k-th smallest is the (-miss)-th smallest among those above.
        low = torch.where(below, float("inf"), a).topk(worst, dim=1, largest=False).values
        tau = torch.where(miss < 0, low.gather(1, (-miss - 1).clamp(min=0)), tau)
    return tau


def _kth_near(row: np.ndarray, hint: np.float32, miss: int) -> np.float32:
    """The k-th smallest of ``row`` where ``row <= hint`` holds for ``k + miss`` entries (``miss != 0``).

    It is the (miss+1)-th largest at or below ``hint`` (miss > 0), or the (-miss)-th smallest above it: found
    among the values of a band next to ``hint`` that widens until it holds that many (the CPU's repair: only
    a few weights cross a step's threshold, so this reads each row once instead of a masked top-k's copy).
    """
    need = miss + 1 if miss > 0 else -miss
    for width in _band_widths(hint, 8 * need / row.size):
        if miss > 0:
            band = row[(row <= hint) & (row > np.float32(hint - width))]
        else:
            band = row[(row > hint) & (row <= np.float32(hint + width))]
        if band.size >= need:
            break
    nth = band.size - need if miss > 0 else need - 1
    return np.partition(band, nth)[nth]


def _band_widths(center: float, fraction: float) -> tuple[float, ...]:
    """Half-widths of a band around ``center`` for the searches above: ``fraction`` of it, growing 4x a try,
    then the whole row (so a search always ends)."""
    first = abs(float(center)) * fraction
    return (*(first * 4.0**i for i in range(8)), np.inf)


def _break_ties(a: Tensor, tau: Tensor, k: int) -> Tensor:
    """``a < tau`` plus as many entries equal to ``tau`` as needed for k, lowest indices first."""
    less = a < tau
    equal = a == tau
    need = k - count_true(less)
    return less | (equal & (equal.cumsum(1, dtype=torch.int32) <= need))


def gap_threshold(a: Tensor, below: Tensor, tau: Tensor) -> Tensor:
    """Per-row threshold halfway between the largest selected value and the smallest other.

    ``below`` is a selection made at ``tau`` (every value under it selected, none over it, ties at it either
    way), as ``select_smallest`` returns. Any value in the gap separates the selection; its middle stays a
    separator longest while the weights move, which is what makes the next steps' ``|w| > tau`` check succeed.
    It is taken before the method shrinks the selected weights: the optimizer moves them back up by about as
    much each step (IHT's zeroed weights come back at about the learning rate), so the next selection's
    boundary is near this one's.
    """
    if _band_search(a):
        ends = _gap_ends_numpy(a.numpy(), below.numpy(), tau.numpy())
        largest_below, smallest_kept = (torch.from_numpy(end) for end in ends)
    else:
        largest_below, smallest_kept = _gap_ends_torch(a, below)
    return (largest_below + smallest_kept) / 2


def _gap_ends_numpy(a: np.ndarray, below: np.ndarray, tau: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Largest selected and smallest other value per row, on the CPU: a selection made at tau has both next
    to tau, so each row reads only a band around it that widens until it holds one of each (5x less work than
    masked reductions over the rows)."""
    largest, smallest = np.zeros_like(tau), np.full_like(tau, np.inf)
    for r, (row, t) in enumerate(zip(a, tau[:, 0], strict=True)):
        for width in _band_widths(t, 64 / row.size):
            near = np.flatnonzero((row > np.float32(t - width)) & (row <= np.float32(t + width)))
            selected = below[r, near]
            if selected.any() and not selected.all():
                break
        values = row[near]
        if selected.any():
            largest[r, 0] = max(values[selected].max(), 0.0)
        if not selected.all():
            smallest[r, 0] = values[~selected].min()
    return largest, smallest


def _gap_ends_torch(a: Tensor, below: Tensor) -> tuple[Tensor, Tensor]:
    """Largest selected and smallest other value per row, off the CPU (tested on it against NumPy)."""
    largest_below = a.masked_fill(~below, 0.0).amax(1, keepdim=True)
    return largest_below, a.masked_fill(below, float("inf")).amin(1, keepdim=True)


def _take(t: Tensor, rows: Tensor) -> Tensor:
    """Rows ``rows`` of ``t``: ``t`` itself when they are all of them (usual while weights move: no copy)."""
    return t if rows.numel() == t.shape[0] else t.index_select(0, rows)


def differing_rows(x: Tensor, y: Tensor) -> Tensor:
    """(rows, 1) bool: where two (rows, n) bool tensors differ, compared as machine words."""
    words_x, words_y = as_words(x, y)
    return (words_x != words_y).any(1, keepdim=True)


def same_mask(x: Tensor, y: Tensor) -> bool:
    """Whether two bool tensors of one shape are equal (compared as machine words; a host sync)."""
    return torch.equal(*as_words(x.reshape(-1), y.reshape(-1)))


def select_nm(a: Tensor, n_small: int, m: int) -> Tensor:
    """The ``n_small`` smallest of every ``m`` consecutive entries of each row (lower index on ties)."""
    blocks = a.view(a.shape[0], -1, m)
    order = blocks.argsort(dim=-1, stable=True)[..., :n_small]
    return torch.zeros_like(blocks, dtype=torch.bool).scatter_(-1, order, True).view_as(a)


@dataclass
class LayerGroup:
    """Pruned layers with the same number of weights, stacked so one batched op selects for all of them."""

    names: list[str]
    modules: list[nn.Module]
    params: list[nn.Parameter]  # the modules' weights (parameter identity is kept for the whole run)
    n: int
    k: int
    kept: Tensor  # (layers, n) bool, True = important
    tau: Tensor | None = None  # (layers, 1) threshold hint from the last selection
    hard: list[Tensor] | None = None  # float 0/1 masks shaped like the weights, once frozen
    grad_sums: Tensor | None = None  # (layers, 3) from the last before_step
    scale_ready: bool = False  # the "scale" buffer holds the shrink factors of the current selection
    _buffers: dict[str, tuple[Tensor, list[Tensor]]] = field(default_factory=dict, repr=False)

    @property
    def rows(self) -> Tensor:
        """``arange(layers)`` on the device: every row, as an index."""
        return torch.arange(len(self.names), device=self.kept.device)

    def shaped(self, t: Tensor) -> list[Tensor]:
        """Rows of a (layers, n) tensor as views shaped like the layers' weights (for ``_foreach`` ops)."""
        return [t[i].view(p.shape) for i, p in enumerate(self.params)]

    def buffer(self, slot: str, dtype: torch.dtype) -> Tensor:
        """A (layers, n) scratch tensor reused across steps (one per slot)."""
        return self.slot(slot, dtype)[0]

    def gather(self, tensors: list[Tensor], slot: str) -> Tensor:
        """Copy one tensor per layer (weights, gradients) into the (layers, n) buffer ``slot``, one call."""
        buf, views = self.slot(slot, tensors[0].dtype)
        torch._foreach_copy_(views, tensors)
        return buf

    def magnitudes(self) -> Tensor:
        """``|w|`` stacked as (layers, n) (one pass per layer, straight into the buffer)."""
        buf, views = self.slot("magnitudes", self.params[0].dtype)
        for view, p in zip(views, self.params, strict=True):
            torch.abs(p, out=view)
        return buf

    def release(self, slot: str) -> None:
        """Free a buffer that is no longer needed."""
        self._buffers.pop(slot, None)

    def slot(self, slot: str, dtype: torch.dtype) -> tuple[Tensor, list[Tensor]]:
        """The (layers, n) buffer ``slot`` and its rows shaped like the weights, made once."""
        entry = self._buffers.get(slot)
        device = self.kept.device
        if entry is None or entry[0].dtype != dtype or entry[0].device != device:
            buf = torch.empty(self.kept.shape, dtype=dtype, device=device)
            entry = self._buffers[slot] = (buf, self.shaped(buf))
        return entry


@dataclass(frozen=True)
class PruneOptions:
    """What every method accepts besides its own hyperparameters: which layers, N:M mode, telemetry, sync.

    Args:
        include: fnmatch globs on module or weight names; only matching layers are pruned.
        exclude: fnmatch globs of layers left dense.
        nm: ``"N:M"``: the N smallest of each M consecutive weights (flattened) are unimportant.
        window: iterations back for ``distance_window_permille``.
        sync_free: ``before_step()``/``step()`` never wait for the device (see the module docstring);
            ``None``: on when the weights are on CUDA. Results are identical either way.
    """

    include: Sequence[str] | None = None
    exclude: Sequence[str] | None = None
    nm: str | None = None
    window: int = 100
    sync_free: bool | None = None


class Pruner:
    """Base class: owns the layers, exact per-layer selection, masks, the stage switch and telemetry.

    After ``prune_iters`` calls of ``step()`` the last selection is frozen into a hard 0/1 mask, applied at
    once and after every later step. A method is a subclass in its own file, registered with
    ``@PRUNERS.register(name)``, whose constructor takes ``(model, ratio, options)`` plus its own keyword-only
    hyperparameters and passes ``prune_iters`` up. It overrides one or two of these extension points (all
    run under ``torch.no_grad()``; the defaults do nothing):

    * ``initial_selection()``: which weights start unimportant (default: the exact |w| selection);
    * ``setup()``: once at build, after the first selection;
    * ``regularize()``: in ``before_step()`` while pruning (gradients exist), e.g. a growing L2 term;
    * ``prune_step()``: in ``step()`` while pruning, after the optimizer step, e.g. ``reselect()`` then
      ``shrink(alpha)``;
    * ``extra_state()`` / ``load_extra_state(state)``: a method's own tensors for exact resume.

    The helpers they build on: ``groups`` (the pruned layers stacked by size, ``LayerGroup``),
    ``reselect()`` and ``shrink(alpha)``.

    Args:
        model: any module; the weights of its Conv2d and Linear layers are pruned (not biases, norms, tables).
        ratio: fraction r of each layer's weights that is unimportant, ``ceil(r * n)`` per layer.
        options: layers, N:M mode, telemetry window and sync-free mode (``PruneOptions``; defaults if None).
        prune_iters: iterations of the pruning stage (K_p); 0 freezes the first selection at once.
    """

    method: ClassVar[str] = ""

    def __init__(
        self, model: nn.Module, ratio: float, options: PruneOptions | None = None, *, prune_iters: int
    ) -> None:
        options = PruneOptions() if options is None else options
        self.ratio = check_ratio(ratio)
        if isinstance(prune_iters, bool) or not isinstance(prune_iters, int) or prune_iters < 0:
            raise ValueError(f"prune_iters must be an integer >= 0, got {prune_iters!r}")
        self.prune_iters = prune_iters
        self.nm = parse_nm(options.nm, self.ratio)
        self.iteration = 0
        self.stage = "prune"
        self._shrink_alpha: float | None = None  # the factor the groups' "scale" buffers hold
        self._callbacks: list[Callable[[StepStats], Any]] = []
        self.groups, self._order = self._make_groups(find_layers(model, options.include, options.exclude))
        device = self.groups[0].kept.device
        self.sync_free = device.type == "cuda" if options.sync_free is None else bool(options.sync_free)
        offsets = [0]
        for g in self.groups:
            offsets.append(offsets[-1] + len(g.names))
        self._model_order = torch.tensor([offsets[gi] + ri for _, (gi, ri) in self._order], device=device)
        self._layer_sizes = [self.groups[gi].n for _, (gi, _) in self._order]
        self._kept_ratio = {
            name: 1.0 - self.groups[gi].k / self.groups[gi].n for name, (gi, _) in self._order
        }
        self._masks: dict[str, Tensor] | None = None
        self._had_grads = self._stats_have_grads = False
        self._stats: StepStats | None = None
        with torch.no_grad():
            for group, kept in zip(self.groups, self.initial_selection(), strict=True):
                group.kept.copy_(kept)
            self._tracker = DriftTracker([g.kept for g in self.groups], options.window)
            self.setup()
            if self.prune_iters == 0:
                self._freeze()

    # ----- public API -----
    @property
    def masks(self) -> dict[str, Tensor]:
        """Layer weight name -> bool mask shaped like the weight, True = kept (live views: clone to keep)."""
        if self._masks is None:
            self._masks = {}
            for g in self.groups:
                for name, module, row in zip(g.names, g.modules, g.kept, strict=True):
                    self._masks[name] = row.view(module.weight.shape)
        return self._masks

    @property
    def layer_names(self) -> list[str]:
        """Names of the pruned weights, in model order."""
        return [name for name, _ in self._order]

    @torch.no_grad()
    def before_step(self) -> None:
        """Call after ``loss.backward()``, before ``optimizer.step()``: gradient telemetry, regularisation."""
        self._had_grads = True
        for g in self.groups:
            g.grad_sums = grad_sums(self._stack_grads(g), g.buffer("magnitudes", g.params[0].dtype))
        if self.stage == "prune":
            self.regularize()

    @torch.no_grad()
    def step(self) -> None:
        """Call right after every ``optimizer.step()``: shrink/mask in place, switch stage, emit telemetry."""
        self.iteration += 1
        if self.stage == "prune":
            self.prune_step()
            if self.iteration >= self.prune_iters:
                self._freeze()
        else:
            self._apply_hard_mask()
        self._tracker.end_iteration()
        self._stats = None
        self._stats_have_grads, self._had_grads = self._had_grads, False
        if self._callbacks:
            stats = self.stats
            for fn in self._callbacks:
                fn(stats)

    def add_callback(self, fn: Callable[[StepStats], Any]) -> None:
        """Call ``fn(StepStats)`` after every ``step()`` (the app streams telemetry this way)."""
        self._callbacks.append(fn)

    @property
    def stats(self) -> StepStats:
        """Telemetry of the last iteration (built on demand; reads device values: a host sync)."""
        if self._stats is None:
            record = self.telemetry()
            self._stats = self.step_stats(record, record.values.tolist())
        return self._stats

    def telemetry(self) -> DeviceStats:
        """Telemetry of the last iteration as one device tensor, without host sync (``TelemetryRecorder``)."""
        blocks = []
        for g, flips in zip(self.groups, self._tracker.last_flips, strict=True):
            if self._stats_have_grads:
                moments = grad_moments(g.grad_sums, g.n)
            else:
                moments = torch.full((len(flips), 3), math.nan, dtype=torch.float64, device=flips.device)
            blocks.append(torch.cat((flips.double().unsqueeze(1), moments), 1))
        table = torch.cat(blocks).index_select(0, self._model_order)
        values = torch.cat((table.T.reshape(-1), self._tracker.counts().double()))
        return DeviceStats(self.iteration, self.stage, self._stats_have_grads, values)

    def step_stats(self, record: DeviceStats, values: Sequence[float]) -> StepStats:
        """``StepStats`` of a ``telemetry()`` record whose ``values`` were copied to the host."""
        names, sizes = self.layer_names, self._layer_sizes
        n, total = len(names), sum(sizes)
        flips, counts = values[:n], values[4 * n :]
        grads = [dict(zip(names, values[i * n : (i + 1) * n], strict=True)) for i in (1, 2, 3)]
        grads = grads if record.have_grads else [{}, {}, {}]
        return StepStats(
            iteration=record.iteration,
            stage=record.stage,
            flips={name: int(f) for name, f in zip(names, flips, strict=True)},
            flips_permille={name: 1000.0 * f / s for name, f, s in zip(names, flips, sizes, strict=True)},
            grad_norm=grads[0],
            grad_var=grads[1],
            grad_var_signed=grads[2],
            kept=dict(self._kept_ratio),
            flips_permille_total=1000.0 * counts[0] / total,
            distance_first_permille=1000.0 * counts[1] / total,
            distance_window_permille=1000.0 * counts[2] / total,
        )

    def state_dict(self) -> dict[str, Any]:
        """All that exact resume needs, as tensors and plain types (``torch.load(weights_only=True)``)."""
        return {
            "method": self.method,
            "ratio": self.ratio,
            "iteration": self.iteration,
            "stage": self.stage,
            "names": self.layer_names,
            "kept": [g.kept.clone() for g in self.groups],
            "tau": [torch.empty(0) if g.tau is None else g.tau.clone() for g in self.groups],
            "tracker": self._tracker.state_dict(),
            "extra": self.extra_state(),
        }

    @torch.no_grad()
    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore a ``state_dict()`` of a pruner built with the same method, ratio and layers.

        Resume order: build the model, the pruner and the optimizer as for a fresh run, then load the model,
        optimizer and pruner states (building a pruner may edit the weights: L1 masks them, Scratch
        re-initialises them).
        """
        same = (state["method"], state["ratio"], state["names"]) == (
            self.method,
            self.ratio,
            self.layer_names,
        )
        if not same:
            raise ValueError(
                f"pruner state is for method={state['method']} ratio={state['ratio']} on "
                f"{len(state['names'])} layers; this pruner is {self.method} ratio={self.ratio} on "
                f"{len(self.layer_names)} layers"
            )
        if state["stage"] not in STAGES:
            raise ValueError(f"bad pruner stage {state['stage']!r}")
        for g, kept, tau in zip(self.groups, state["kept"], state["tau"], strict=True):
            g.kept.copy_(kept)
            g.tau = (
                tau.to(g.kept.device).clone() if tau.numel() else None
            )  # the hint: same code path after resume
            g.hard = None
            g.scale_ready = False
        self.iteration = int(state["iteration"])
        self.stage = state["stage"]
        if self.stage == "finetune":
            self._make_hard()
        self._tracker.load_state_dict(state["tracker"])
        self.load_extra_state(state["extra"])
        self._stats = None

    # ----- extension points (methods override these) -----
    def initial_selection(self) -> list[Tensor]:
        """Kept-masks per group at build time (iteration 0): by default the exact |w| selection."""
        return [~self._select(g) for g in self.groups]

    def setup(self) -> None:
        """Once at build, after the first selection."""

    def regularize(self) -> None:
        """In ``before_step`` during the pruning stage (gradients exist)."""

    def prune_step(self) -> None:
        """In ``step`` during the pruning stage, after ``iteration`` was incremented."""

    def extra_state(self) -> dict[str, Any]:
        """The method's own state for ``state_dict`` (tensors and plain types)."""
        return {}

    def load_extra_state(self, state: dict[str, Any]) -> None:
        """Restore what ``extra_state`` saved."""

    # ----- helpers for methods -----
    def _select(self, g: LayerGroup, a: Tensor | None = None) -> Tensor:
        """Unimportant-mask (layers, n) of a group from |w| (``a`` if given), with no host sync.

        Updates the threshold hint as the fast path does: only in the rows whose kept-mask it no longer
        separates (ASSL's soft masks and resumed runs read it, so both modes must agree on it).
        """
        a = g.magnitudes() if a is None else a
        if self.nm is not None:
            return select_nm(a, *self.nm)
        below, tau = select_smallest(a, g.k)
        gap = gap_threshold(a, below, tau)
        if g.tau is None:
            g.tau = gap
        else:
            moved = differing_rows(torch.gt(a, g.tau, out=g.buffer("kept", torch.bool)), g.kept)
            g.tau = torch.where(moved, gap, g.tau)
        return below

    def reselect(self, fixed_rows: list[Tensor] | None = None) -> None:
        """Re-pick unimportant weights by |w| (rows flagged in ``fixed_rows`` keep theirs); count flips.

        Sync-free mode selects every row. The fast path compares ``|w| > tau`` (tau from the last
        selection) word-wise with the kept-mask and selects again only the layers (rows) where it differs,
        skipping unchanged groups: a row where it still matches is exact, since its old mask has ``n - k``
        entries above tau and the rest at or below, so the k smallest are those.
        """
        for i, g in enumerate(self.groups):
            a = g.magnitudes()
            if self.sync_free or self.nm is not None or g.tau is None:
                rows, kept = g.rows, ~self._select(g, a)
            else:
                candidate = torch.gt(a, g.tau, out=g.buffer("kept", torch.bool))
                rows = differing_rows(candidate, g.kept).nonzero()[:, 0]
                if rows.numel() == 0:
                    continue
                sub = _take(a, rows)
                below, tau = select_smallest(sub, g.k, _take(g.tau, rows))
                g.tau.index_copy_(0, rows, gap_threshold(sub, below, tau))
                kept = ~below
            old = _take(g.kept, rows)  # read before g.kept changes below
            if fixed_rows is not None:
                kept = torch.where(_take(fixed_rows[i], rows), old, kept)
            if not self.sync_free and same_mask(old, kept):
                continue
            self._tracker.record(i, rows, old, kept)
            g.kept.index_copy_(0, rows, kept)
            g.scale_ready = False

    def shrink(self, alpha: float) -> None:
        """Multiply the unimportant weights by ``alpha`` in place (0 = hard thresholding)."""
        if alpha != self._shrink_alpha:  # a scheduled alpha: rebuild the factors
            self._shrink_alpha = alpha
            for g in self.groups:
                g.scale_ready = False
        for g in self.groups:
            scale, views = g.slot("scale", g.params[0].dtype)
            if not g.scale_ready:
                keep, shrink = scale.new_ones(()), scale.new_full((), alpha)
                torch.where(g.kept, keep, shrink, out=scale)  # one pass (fill + masked_fill: two)
                g.scale_ready = True
            torch._foreach_mul_(g.params, views)

    def _freeze(self) -> None:
        """Turn the current selection into the hard 0/1 mask of the fine-tuning stage and apply it."""
        self.stage = "finetune"
        self._make_hard()
        self._apply_hard_mask()

    def _make_hard(self) -> None:
        for g in self.groups:
            g.hard = g.shaped(g.kept.to(g.params[0].dtype))
            g.release("scale")
            g.scale_ready = False

    def _apply_hard_mask(self) -> None:
        for g in self.groups:
            torch._foreach_mul_(g.params, g.hard)

    def _stack_grads(self, g: LayerGroup) -> Tensor:
        """Gradients of a group stacked as (layers, n); a layer without gradient counts as zeros."""
        return g.gather([p.grad if p.grad is not None else torch.zeros_like(p) for p in g.params], "grads")

    # ----- internals -----
    def _make_groups(
        self, layers: list[tuple[str, nn.Module]]
    ) -> tuple[list[LayerGroup], list[tuple[str, tuple[int, int]]]]:
        """Group layers by (numel, device, dtype); also (name, (group, row)) in model order."""
        by_key: dict[tuple, LayerGroup] = {}
        order = []
        for name, module in layers:
            w = module.weight
            if self.nm is not None and w.numel() % self.nm[1]:
                raise ValueError(f"nm mode: {name} has {w.numel()} weights, not a multiple of M={self.nm[1]}")
            key = (w.numel(), w.device, w.dtype)
            if key not in by_key:
                k = w.numel() // self.nm[1] * self.nm[0] if self.nm else n_unimportant(self.ratio, w.numel())
                by_key[key] = LayerGroup([], [], [], w.numel(), k, torch.empty(0))
            order.append((name, (list(by_key).index(key), len(by_key[key].names))))
            by_key[key].names.append(name)
            by_key[key].modules.append(module)
            by_key[key].params.append(w)
        groups = list(by_key.values())
        for g in groups:
            w = g.modules[0].weight
            g.kept = torch.ones(len(g.modules), g.n, dtype=torch.bool, device=w.device)
        return groups, order
