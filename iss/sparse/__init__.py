"""Sparse CPU inference: ``iss.sparsify(model)`` runs a pruned model's zeros-heavy layers with C kernels.

:mod:`.layers` holds the sparse Conv2d/Linear (timed against dense on their first input), :mod:`.fused`
whole EDSR/Swin blocks in one pass, :mod:`.kernels` the ctypes binding of ``csrc/`` (built on first use),
:mod:`.convert` the ``sparsify`` front, :mod:`.threads` how they share the CPU's threads with torch, and
:mod:`.speed` this machine's measured speeds and when sparse kernels are the default.
"""

from .convert import MIN_ZEROS, layer_modes, sparse_path, sparsify
from .layers import Epilogue, SparseConv2d, SparseLinear, is_convertible, zero_fraction
from .threads import SETUP_CALLS

__all__ = [
    "MIN_ZEROS",
    "SETUP_CALLS",
    "Epilogue",
    "SparseConv2d",
    "SparseLinear",
    "is_convertible",
    "layer_modes",
    "sparse_path",
    "sparsify",
    "zero_fraction",
]
