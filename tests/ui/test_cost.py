"""What live runs and comparisons cost before they run: FLOPs and activations traced on ``meta``, formats."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from common import TINY_ARCHS
from torch import nn

import iss
from iss.ui import cost


def _conv_flops(model: nn.Module, x: torch.Tensor) -> int:
    """2 x the multiply-adds of every Conv2d in a real forward of ``model`` (what a FLOP counter counts)."""
    total = 0

    def hook(module: nn.Conv2d, _inputs: tuple, out: torch.Tensor) -> None:
        nonlocal total
        kh, kw = module.kernel_size
        total += 2 * out.numel() * (module.in_channels // module.groups) * kh * kw

    handles = [m.register_forward_hook(hook) for m in model.modules() if isinstance(m, nn.Conv2d)]
    with torch.no_grad():
        model(x)
    for h in handles:
        h.remove()
    return total


def test_traced_flops_match_a_real_forward() -> None:
    kwargs = TINY_ARCHS["edsr-baseline"]
    model = iss.archs.build("edsr-baseline", 2, **kwargs).eval()
    traced = cost.trace("edsr-baseline", 2, 12, 16, train=False, arch_kwargs=kwargs)
    assert traced.forward_flops == _conv_flops(model, torch.rand(1, 3, 12, 16))
    assert traced.parameters == sum(p.numel() for p in model.parameters())
    assert traced.backward_flops == 0 and traced.saved_bytes == 0  # traced for inference


def test_training_trace_scales_with_pixels() -> None:
    small = cost.trace("edsr-baseline", 2, 16, 16, arch_kwargs=TINY_ARCHS["edsr-baseline"])
    large = cost.trace("edsr-baseline", 2, 32, 32, arch_kwargs=TINY_ARCHS["edsr-baseline"])
    assert large.forward_flops == 4 * small.forward_flops
    assert small.backward_flops > small.forward_flops  # gradients of inputs and of weights
    assert large.saved_bytes == pytest.approx(4 * small.saved_bytes, rel=0.01) and small.saved_bytes > 0


@pytest.mark.parametrize("arch", sorted(TINY_ARCHS))
def test_every_backbone_traces(arch: str) -> None:
    traced = cost.trace(arch, 4, 16, 16, arch_kwargs=TINY_ARCHS[arch])
    assert traced.forward_flops > 0 and traced.saved_bytes > 0 and traced.parameters > 0


def test_memory_budget_and_formats() -> None:
    assert 0 < cost.memory_budget("cpu") <= 4 << 30
    assert cost.format_seconds(3.21) == "3.2 s" and cost.format_seconds(200) == "3.3 min"
    assert cost.format_seconds(0.004) == "under 0.1 s" == cost.approximately(0.004)
    assert cost.approximately(3.21) == "about 3.2 s"
    assert cost.format_bytes(2.5e9) == "2.5 GB" and cost.format_bytes(3.4e8) == "340 MB"


@pytest.mark.skipif(cost._LIBC is None, reason="malloc_trim is glibc's")
def test_release_memory_gives_freed_heap_back() -> None:
    """What a run freed leaves the process's RSS, not only Python's objects."""

    def rss() -> int:
        status = Path("/proc/self/status").read_text().splitlines()
        return int(next(line for line in status if line.startswith("VmRSS:")).split()[1]) * 1024

    cost.release_memory()  # what earlier tests freed would otherwise be reused by the blocks below
    base = rss()
    blocks = [torch.ones(16_000) for _ in range(4000)]  # 256 MB in 64 KB blocks: glibc's heap, not mmap
    assert rss() - base > 150e6
    del blocks
    cost.release_memory()
    assert rss() - base < 50e6
