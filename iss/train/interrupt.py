"""Ending a training step part-way: a stop asked for mid-step takes effect within one layer, not one step.

A step of a big model (EDSR-L, CAT-R at a live run's batch) takes seconds; a stop checked only between steps
answers that late. Inside :func:`interruptible`, every module's forward and every parameter's gradient first
ask ``stop()`` and raise :class:`Interrupted` once it says yes. The optimizer has not stepped then, so the
weights are those after the last whole step; only the gradients are partial.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import Any

from torch import nn

__all__ = ["Interrupted", "interruptible"]


class Interrupted(Exception):
    """Raised in a forward or backward pass run inside :func:`interruptible` once its ``stop()`` is true."""


@contextmanager
def interruptible(models: Iterable[nn.Module], stop: Callable[[], bool]) -> Iterator[None]:
    """While inside, forwards and backwards of ``models`` raise :class:`Interrupted` at the next module or
    parameter once ``stop()`` is true (hooks removed on leaving)."""

    def check(*_: Any) -> None:
        if stop():
            raise Interrupted

    handles = []
    for model in models:
        handles += [module.register_forward_pre_hook(check) for module in model.modules()]
        handles += [p.register_hook(check) for p in model.parameters() if p.requires_grad]
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()
