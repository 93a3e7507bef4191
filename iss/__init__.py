"""ISS-SR: Iterative Soft Shrinkage learning for sparse image super-resolution (ICCV 2023).

Submodules load lazily so that ``import iss`` stays cheap for the CLI and the app:
``iss.archs.build``, ``iss.pruning.build``, ``iss.imresize``, ``iss.sparsify``, ... A zoo model in one
line: ``model = iss.load("swinir-light_x4_iss-p_r0.95")``, then ``iss.upscale(model, "photo.png")``.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

_SUBMODULES = (
    "archs", "pruning", "data", "train", "checkpoint", "infer", "evaluate", "sparse", "zoo", "registry",
    "cli",
)  # fmt: skip
_FUNCTIONS = {
    "imresize": "data.resize", "sparsify": "sparse",
    "load": "zoo.pretrained", "list_models": "zoo.pretrained", "upscale": "zoo.pretrained",
}  # fmt: skip

__all__ = [*_SUBMODULES, *_FUNCTIONS]


def __getattr__(name: str) -> Any:
    if name in _SUBMODULES:
        return importlib.import_module(f".{name}", __name__)
    if name in _FUNCTIONS:
        return getattr(importlib.import_module(f".{_FUNCTIONS[name]}", __name__), name)
    raise AttributeError(f"module 'iss' has no attribute '{name}'")
