"""A small name -> factory registry, one instance per kind (archs, pruners)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


class Registry:
    """Maps user-facing names (``swinir-light``, ``iss-p``) to classes or factory functions."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._entries: dict[str, Callable[..., Any]] = {}

    def register(self, name: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        """Decorator registering ``fn`` under ``name``; a duplicate name is a bug and raises."""

        def decorator(fn: Callable[..., Any]) -> Callable[..., Any]:
            if name in self._entries:
                raise ValueError(f"{self.kind} '{name}' is already registered")
            self._entries[name] = fn
            return fn

        return decorator

    def get(self, name: str) -> Callable[..., Any]:
        """The factory registered as ``name``; unknown names raise ``KeyError`` listing the valid ones."""
        try:
            return self._entries[name]
        except KeyError:
            valid = ", ".join(self.names())
            raise KeyError(f"unknown {self.kind} '{name}'; choose one of: {valid}") from None

    def names(self) -> list[str]:
        return list(self._entries)

    def __contains__(self, name: object) -> bool:
        return name in self._entries


ARCHS = Registry("architecture")
PRUNERS = Registry("pruning method")
