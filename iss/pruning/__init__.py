"""Pruning methods for training sparse SR networks from random initialisation.

``build(method, model, ratio, **options)`` returns a ``Pruner``; call ``pruner.before_step()`` after
``loss.backward()`` and ``pruner.step()`` after every ``optimizer.step()`` (see ``iss.pruning.base``).
"""

from __future__ import annotations

import inspect
from typing import Any

from torch import nn

from ..registry import PRUNERS
from . import iht, iss_p, l1  # noqa: F401  (registration)
from .base import Pruner
from .telemetry import StepStats

__all__ = ["Pruner", "StepStats", "build", "list_methods", "options"]


def list_methods() -> list[str]:
    """Registered method names: ``scratch``, ``l1``, ``iht``, ``iss-r``, ``iss-p``, ``srp``, ``assl``."""
    return PRUNERS.names()


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
