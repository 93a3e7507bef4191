"""What a live run or a comparison will cost before it runs, so the app can say so and bound it.

FLOPs and autograd's saved activations come from tracing the backbone on PyTorch's ``meta`` device (shapes
only: no memory, no arithmetic), once per backbone, scale and input size. Seconds come from FLOPs and this
machine's speed per backbone, plus the time to build a live run (``iss.sparse.speed``: measured priors,
replaced by what the app measures itself as it runs, both at the machine's load now). No gradio.
"""

from __future__ import annotations

import ctypes
import functools
import gc
import json
import os
from dataclasses import dataclass
from typing import Any

import torch
from torch.utils.flop_counter import FlopCounterMode

import iss

# Peak memory of a live run ~ RUN_OVERHEAD + parameters x BYTES_PER_PARAMETER (per run)
# + saved activations x ACTIVATION_OVERHEAD: fitted to peak RSS (benchmarks/live_cost.py).
BYTES_PER_PARAMETER = 42  # weight, gradient, Adam's moments, pruner masks and scores, copies while building
ACTIVATION_OVERHEAD = 1.3  # backward's gradient buffers on top of the saved activations
RUN_OVERHEAD = 150e6  # training images, the validation pass, figures


@dataclass(frozen=True)
class ModelCost:
    """Per-sample cost of one forward (and backward) of a backbone at one input size."""

    forward_flops: float
    backward_flops: float
    saved_bytes: float  # autograd's saved activations of the forward, weights aside (0 for inference)
    parameters: int


def trace(
    arch: str,
    scale: int,
    height: int,
    width: int,
    *,
    train: bool = True,
    arch_kwargs: dict[str, Any] | None = None,
) -> ModelCost:
    """FLOPs and saved activations of ``arch`` on one ``height x width`` LR input, traced on ``meta``."""
    kwargs = json.dumps(arch_kwargs or {}, sort_keys=True)
    return _trace(arch, int(scale), int(height), int(width), bool(train), kwargs)


@functools.lru_cache(maxsize=256)
def _trace(arch: str, scale: int, height: int, width: int, train: bool, kwargs: str) -> ModelCost:
    """``trace`` with hashable arguments (cached: a trace takes ~0.1-5 s on the CPU)."""
    with torch.device("meta"):
        model = iss.archs.build(arch, scale, **json.loads(kwargs))
    model.to("meta")  # buffers some architectures create explicitly on the CPU
    x = torch.empty(1, 3, height, width, device="meta")
    parameters = {id(p) for p in model.parameters()}
    saved = [0]

    def pack(t: torch.Tensor) -> torch.Tensor:
        if id(t if t._base is None else t._base) not in parameters:  # weights are counted apart
            saved[0] += t.numel() * t.element_size()
        return t

    hooks = torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t)
    with torch.autograd.set_grad_enabled(train), FlopCounterMode(display=False) as forward, hooks:
        loss = model(x).abs().mean()
    backward_flops = 0
    if train:
        with FlopCounterMode(display=False) as backward:
            loss.backward()
        backward_flops = backward.get_total_flops()
    count = sum(p.numel() for p in model.parameters())
    return ModelCost(float(forward.get_total_flops()), float(backward_flops), float(saved[0]), count)


def memory_budget(device: str) -> int:
    """Bytes a live run may use: 1/4 of the machine's memory (at most 4 GiB) on the CPU, 80% of free GPU."""
    if device.startswith("cuda") and torch.cuda.is_available():
        free, _total = torch.cuda.mem_get_info()
        return int(0.8 * free)
    physical = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    return int(min(physical // 4, 4 << 30))


def release_memory() -> None:
    """Give what a finished run freed back to the system: glibc keeps freed blocks in its heap, so without
    ``malloc_trim`` a server's RSS stays at the peak of its largest run (a no-op where there is no glibc)."""
    gc.collect()
    if _LIBC is not None:
        _LIBC.malloc_trim(0)


def _glibc() -> Any:
    """glibc, where this process runs on it (it has ``malloc_trim``), else None."""
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:
        return None
    return libc if hasattr(libc, "malloc_trim") else None


_LIBC = _glibc()


def format_seconds(seconds: float) -> str:
    """``under 0.1 s``, ``0.4 s``, ``12 s``, ``3.5 min``, ``1.2 h``: a duration as a person reads it."""
    if seconds < 0.1:
        return "under 0.1 s"
    if seconds < 10:
        return f"{seconds:.1f} s"
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"


def approximately(seconds: float) -> str:
    """``about 3.5 min``, or ``under 0.1 s`` (never "about under")."""
    text = format_seconds(seconds)
    return text if text.startswith("under") else f"about {text}"


def format_bytes(count: float) -> str:
    """``350 MB``, ``2.4 GB``."""
    return f"{count / 1e9:.1f} GB" if count >= 1e9 else f"{count / 1e6:.0f} MB"
