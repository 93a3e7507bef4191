"""ISS-SR: Iterative Soft Shrinkage learning for sparse image super-resolution (ICCV 2023).

Submodules load lazily so that ``import iss`` stays cheap for the CLI and the app:
``iss.archs.build``, ``iss.pruning.build``, ``iss.imresize``, ``iss.metrics.psnr_y``, ... A zoo model in one
line: ``model = iss.load("swinir-light_x4_iss-p_r0.95")``, then ``iss.upscale(model, "photo.png")``.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

_SUBMODULES = (
    "archs", "pruning", "resize", "metrics", "data", "infer", "evaluate",
    "train", "train_config", "checkpoint", "hub", "zoo", "sparse", "fused", "spmm", "registry", "speed",
    "pretrained",
)  # fmt: skip
_FUNCTIONS = {
    "imresize": "resize", "sparsify": "sparse", "load": "pretrained", "list_models": "pretrained",
    "upscale": "pretrained",
}  # fmt: skip

__all__ = [*_SUBMODULES, *_FUNCTIONS]


def __getattr__(name: str) -> Any:
    if name in _SUBMODULES:
        return importlib.import_module(f".{name}", __name__)
    if name in _FUNCTIONS:
        return getattr(importlib.import_module(f".{_FUNCTIONS[name]}", __name__), name)
    raise AttributeError(f"module 'iss' has no attribute '{name}'")
