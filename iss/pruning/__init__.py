"""Pruning methods for training sparse SR networks from random initialisation (paper Sec. 3, 4).

``build(method, model, ratio, **options)`` returns a ``Pruner``; in the training loop call
``pruner.before_step()`` after ``loss.backward()`` and ``pruner.step()`` after every ``optimizer.step()``
(details and the first-iteration note in ``iss.pruning.base``)::

    pruner = iss.pruning.build("iss-p", model, 0.95, prune_iters=100_000)   # alpha=0.95
    pruner.add_callback(lambda stats: print(stats.iteration, stats.flips_permille_total))

Methods (``list_methods()``, options with defaults: ``options(method)``):

* ``scratch``: random mask + fresh init; ``l1``: one-shot |w| mask at init (both ``finetune`` at once);
* ``iht`` / ``iss-p``: re-select every step, zero / multiply by ``alpha`` for ``prune_iters``, then freeze;
* ``iss-r``, ``srp``, ``assl``: growing L2 schedules (``iss.pruning.schedule``): give ``prune_iters`` to fit
  the official schedule's proportions into a short budget, or nothing for the official lengths.

Every method accepts the ``PruneOptions``: ``include``/``exclude`` (fnmatch globs), ``nm="N:M"``,
``window`` and ``sync_free`` (default: on for CUDA weights; ``before_step``/``step`` then never make the host
wait for the GPU, with bit-identical results). A GPU training loop reads telemetry through
``TelemetryRecorder`` (one host copy every N iterations) instead of callbacks (one per iteration).

A new method is one small file: a ``Pruner`` subclass registered with ``@PRUNERS.register(name)`` that
overrides the extension points ``Pruner`` documents (``prune_step``, ``regularize``, ``setup``, ...), imported
below so that it registers.
"""

from __future__ import annotations

import dataclasses
import inspect
from typing import Any

from torch import nn

from iss.registry import PRUNERS

from . import assl, iht, iss_p, iss_r, l1, scratch, srp  # noqa: F401  (registration)
from .base import PruneOptions, Pruner
from .telemetry import StepStats, TelemetryRecorder

_PAPER_ORDER = ("scratch", "l1", "iht", "iss-r", "iss-p", "srp", "assl")
__all__ = ["PruneOptions", "Pruner", "StepStats", "TelemetryRecorder", "build", "list_methods", "options"]


def list_methods() -> list[str]:
    """Registered method names: ``scratch``, ``l1``, ``iht``, ``iss-r``, ``iss-p``, ``srp``, ``assl``."""
    return sorted(
        PRUNERS.names(), key=lambda m: _PAPER_ORDER.index(m) if m in _PAPER_ORDER else len(_PAPER_ORDER)
    )


def options(method: str) -> dict[str, Any]:
    """The options of a method with their defaults: its own keyword arguments, then ``PruneOptions``."""
    params = inspect.signature(PRUNERS.get(method)).parameters
    own = {n: p.default for n, p in params.items() if p.kind is inspect.Parameter.KEYWORD_ONLY}
    return {**own, **dataclasses.asdict(PruneOptions())}


def build(method: str, model: nn.Module, ratio: float, **kwargs: Any) -> Pruner:
    """A pruner of ``method`` over the Conv2d/Linear weights of ``model`` (unknown options: ValueError)."""
    accepted = options(method)
    unknown = sorted(set(kwargs) - set(accepted))
    if unknown:
        raise ValueError(f"unknown option(s) {unknown} for '{method}'; accepted: {', '.join(accepted)}")
    shared = {f.name for f in dataclasses.fields(PruneOptions)}
    common = PruneOptions(**{k: v for k, v in kwargs.items() if k in shared})
    own = {k: v for k, v in kwargs.items() if k not in shared}
    return PRUNERS.get(method)(model, ratio, common, **own)
