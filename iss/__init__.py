"""ISS-SR: Iterative Soft Shrinkage learning for sparse image super-resolution (ICCV 2023).

Submodules load lazily so that ``import iss`` stays cheap for the CLI and the app:
``iss.archs.build``, ``iss.pruning.build``, ``iss.imresize``, ``iss.sparsify``, ... A zoo model in one
line: ``model = iss.load("swinir-light_x4_iss-p_r0.95")``, then ``iss.upscale(model, "photo.png")``.
"""

from __future__ import annotations

import importlib
import os
from typing import Any

__version__ = "0.1.0"

# Large CPU tensors on transparent huge pages: torch reads this at its first allocation (not at import), so
# it holds when ``iss`` comes first. glibc maps every buffer over 32 MiB afresh and faults it in 4 KiB at a
# time; on large images that made sparse EDSR-L x2 1.37x slower (docs/sparse-inference.md). 0 opts out.
os.environ.setdefault("THP_MEM_ALLOC_ENABLE", "1")

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
