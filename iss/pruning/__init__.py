"""Pruning methods for training sparse SR networks from random initialisation.

``build(method, model, ratio, **options)`` returns a ``Pruner``; call ``pruner.before_step()`` after
``loss.backward()`` and ``pruner.step()`` after every ``optimizer.step()`` (see ``iss.pruning.base``).
"""

from __future__ import annotations

import inspect
from typing import Any

from torch import nn

from ..registry import PRUNERS
from . import assl, iht, iss_p, iss_r, l1, scratch, srp  # noqa: F401  (registration)
from .base import Pruner
from .telemetry import StepStats

_PAPER_ORDER = ("scratch", "l1", "iht", "iss-r", "iss-p", "srp", "assl")
__all__ = ["Pruner", "StepStats", "build", "list_methods", "options"]


def list_methods() -> list[str]:
    """Registered method names: ``scratch``, ``l1``, ``iht``, ``iss-r``, ``iss-p``, ``srp``, ``assl``."""
    return sorted(
        PRUNERS.names(), key=lambda m: _PAPER_ORDER.index(m) if m in _PAPER_ORDER else len(_PAPER_ORDER)
    )


def options(method: str) -> dict[str, Any]:
    """The keyword options of a method with their defaults (``inspect`` of its constructor)."""
    params = inspect.signature(PRUNERS.get(method)).parameters
    return {n: p.default for n, p in params.items() if p.kind is inspect.Parameter.KEYWORD_ONLY}


def build(method: str, model: nn.Module, ratio: float, **kwargs: Any) -> Pruner:
    """A pruner of ``method`` over the Conv2d/Linear weights of ``model`` (unknown options: ValueError)."""
    accepted = options(method)
    unknown = sorted(set(kwargs) - set(accepted))
    if unknown:
        raise ValueError(f"unknown option(s) {unknown} for '{method}'; accepted: {', '.join(accepted)}")
    return PRUNERS.get(method)(model, ratio, **kwargs)
