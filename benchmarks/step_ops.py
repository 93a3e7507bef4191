"""Operator calls in one training step (forward, L1 loss, backward, bf16 autocast) of each backbone.

    python benchmarks/step_ops.py --archs swinir-light,cat-r --scale 2 --batch 4 --patch 16

An eager GPU step launches a kernel for most of them, each costing the host microseconds, so at a small batch
their count, not the pixels, sets how fast a cell trains there: why a GPU lease finishes some CPU cells
sooner and not others (docs/training.md). Counted on the CPU; the GPU runs the same ops.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from iss.archs import build


class _Counter(TorchDispatchMode):
    """Counts the ATen operator calls made while it is active."""

    def __init__(self) -> None:
        super().__init__()
        self.calls = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.calls += 1
        return func(*args, **(kwargs or {}))


def count_ops(fn: Callable[[], object]) -> int:
    """ATen operator calls made by ``fn()``."""
    with _Counter() as counter:
        fn()
    return counter.calls


def step_ops(arch: str, scale: int, batch: int, patch: int) -> tuple[int, int]:
    """(forward, forward + loss + backward) operator calls of one bf16 step of ``arch``, after a warm-up."""
    model = build(arch, scale=scale)
    lr = torch.rand(batch, 3, patch, patch)
    hr = torch.rand(batch, 3, patch * scale, patch * scale)

    def forward() -> torch.Tensor:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            return model(lr)

    def step() -> None:
        (forward().float() - hr).abs().mean().backward()

    step()  # first calls may build caches (shifted-window masks, relative positions)
    return count_ops(forward), count_ops(step)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--archs", default="swinir-light,edsr-l,cat-r")
    parser.add_argument("--scale", type=int, default=2)
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--patch", type=int, default=16, help="LR patch side")
    args = parser.parse_args()
    print(f"x{args.scale}, batch {args.batch}, LR patch {args.patch}, bf16 autocast")
    for arch in args.archs.split(","):
        forward, step = step_ops(arch, args.scale, args.batch, args.patch)
        print(f"{arch:13s} forward {forward:6d}  step {step:6d} operator calls")


if __name__ == "__main__":
    main()
