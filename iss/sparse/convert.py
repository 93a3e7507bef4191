"""``sparsify(model)``: swap a pruned model's mostly-zero layers for sparse kernels; fuse whole blocks.

Every converted layer times its dense and sparse kernels on its first input and keeps the faster
(:mod:`iss.sparse.layers`); EDSR residual blocks, conv + pixel shuffle and Swin blocks then run in one pass
(:mod:`iss.sparse.fused`). ``layer_modes`` and ``sparse_path`` say what a converted model chose.
"""

from __future__ import annotations

import copy

from torch import nn

from . import kernels
from .fused import FusedCATBlock, FusedSwinBlock, SparseResidualBlock
from .fused import fuse as fuse_blocks
from .layers import SparseConv2d, SparseLinear, _Plan, _SparseBase, is_convertible, zero_fraction
from .threads import ForwardThreads

MIN_ZEROS = 0.5  # below this the sparse kernels cannot win (break-even ~0.8): such layers are not even timed


def _candidates(model: nn.Module, min_zeros: float) -> list[tuple[nn.Module, str, nn.Module]]:
    """(parent, attribute, layer) for every convertible layer with at least ``min_zeros`` zero weights."""
    found = []
    for parent in model.modules():
        for name, child in parent.named_children():
            if is_convertible(child) and child.weight.numel() and zero_fraction(child.weight) >= min_zeros:
                found.append((parent, name, child))
    return found


def sparsify(
    model: nn.Module,
    *,
    min_speedup: float = 1.0,
    threads: int | None = None,
    min_zeros: float = MIN_ZEROS,
    fuse: bool = True,
    exact: bool = False,
) -> nn.Module:
    """Copy of ``model`` whose mostly-zero Conv2d/Linear layers run sparse kernels where measured faster.

    Args:
        model: any module; it is not modified (the weights of converted layers are shared during the copy
            instead of duplicated, then re-encoded as CSR).
        min_speedup: a layer runs sparse only if dense time / sparse time >= this on its first input
            (0: always sparse; ``math.inf``: always dense).
        threads: thread count to time the kernels with (default: torch's setting at the first call).
        min_zeros: layers with a smaller zero fraction stay plain ``nn.Conv2d`` / ``nn.Linear``.
        fuse: also run whole blocks made of sparse layers in one pass where the compiled kernels know them
            (EDSR residual blocks, Swin transformer blocks: see :mod:`iss.sparse.fused`).
        exact: keep every input in float32, so outputs equal the dense model's within float rounding. By
            default, on AVX-512 CPUs (``kernels.half_tiles()``), the C conv kernel keeps its inputs as IEEE
            halves (products and sums stay float32; a tile with an input beyond 65504 stays float32): up to
            1.4x faster, outputs within about 1e-3 of dense (docs/sparse-inference.md).

    The result is for CPU inference (``torch.inference_mode()``); its first forward is slower since it times
    each distinct layer once. ``layer_modes(result)`` says what each layer chose. Its second and third
    calls also time whether torch's own ops (all but the kernels) should run on one thread during its forward
    (:class:`iss.sparse.threads.ForwardThreads`; ``torch.set_num_threads`` is process-wide).
    """
    if not min_speedup >= 0:
        raise ValueError(f"min_speedup must be >= 0, got {min_speedup}")
    if not 0.0 <= min_zeros <= 1.0:
        raise ValueError(f"min_zeros must be in [0, 1], got {min_zeros}")
    if threads is not None and threads < 1:
        raise ValueError(f"threads must be >= 1, got {threads}")
    shared = {id(t): t for _, _, layer in _candidates(model, min_zeros) for t in layer.parameters()}
    result = copy.deepcopy(model, memo=shared)
    plan = _Plan(min_speedup=min_speedup, threads=threads, exact=exact)
    for parent, name, layer in _candidates(result, min_zeros):
        cls = SparseLinear if isinstance(layer, nn.Linear) else SparseConv2d
        setattr(parent, name, cls(layer, plan))
    if fuse:
        fuse_blocks(result, plan)
    threads = ForwardThreads()
    result.register_forward_pre_hook(threads.enter)
    result.register_forward_hook(threads.exit, always_call=True)
    return result.eval()


def layer_modes(model: nn.Module) -> dict[str, str]:
    """Name -> mode of every sparse layer ("sparse" / "dense" / "undecided", or "fused" where a fused block
    runs it in its own kernel) and fused Swin or CAT block ("fused" / "layers" / "undecided") of a
    :func:`sparsify`-ed model."""
    kinds = (_SparseBase, FusedSwinBlock, FusedCATBlock)
    modes = {name: m.mode for name, m in model.named_modules() if isinstance(m, kinds)}
    for name, m in model.named_modules():  # layers a fused block runs in its own kernel
        if isinstance(m, FusedCATBlock) and m.mode == "fused":
            modes.update({f"{name}.{layer}": "fused" for layer in m.fused_layers})
    return modes


def sparse_path(model: nn.Module) -> str:
    """Which kernels a :func:`sparsify`-ed model runs (after its first call), in a few words for tables:
    "fused C kernels", "C kernels", "PyTorch kernels (no C compiler)" or "dense kernels"."""
    modes = set(layer_modes(model).values())
    if not modes & {"sparse", "fused"}:
        return "dense kernels"
    if kernels.load() is None:
        return "PyTorch kernels (no C compiler)"
    residual = any(
        isinstance(m, SparseResidualBlock) and "sparse" in (m.conv1.mode, m.conv2.mode)
        for m in model.modules()
    )
    return "fused C kernels" if "fused" in modes or residual else "C kernels"
