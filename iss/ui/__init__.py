"""The Gradio app's logic without gradio, one module per tab (``compare.py``, ``analysis.py``,
``sparsity.py``) over ``catalog.py`` (the zoo as the tabs see it: cells, defaults, cached models, the app's
assets), plus plotly figures (``figures.py``), time and memory estimates (``cost.py``) and how visitors
share the machine (``admission.py``: live runs and comparisons, one per visitor). ``app.py`` only lays
out components and wires them.

``gpu`` is ``spaces.GPU`` when the ``spaces`` package is importable (Hugging Face ZeroGPU Spaces; a no-op
elsewhere), otherwise an identity decorator. It is imported here, before anything initialises CUDA, as
``spaces`` requires.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

try:
    import spaces

    gpu: Callable[..., Any] = spaces.GPU
except ImportError:  # not on a Space: nothing to request

    def gpu(fn: Callable[..., Any] | None = None, **_options: Any) -> Any:
        """Identity stand-in for ``spaces.GPU``: usable as ``@gpu`` and ``@gpu(duration=...)``."""
        return fn if fn is not None else (lambda f: f)


__all__ = ["gpu"]
