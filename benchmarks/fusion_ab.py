"""What one fusion of ``iss.sparse.fused`` buys: the sparsified model with it and without it, interleaved, in
one process, with each top-level module's share (forward hooks)::

    python benchmarks/fusion_ab.py edsr-l 0.99 128 --without unread-channels
    python benchmarks/fusion_ab.py swinir-light 0.95 64 --without patch-embed
    python benchmarks/fusion_ab.py cat-r 0.95 128 --without cat-block --threads 1 --reps 5

``unread-channels``: the upsampler's last conv computes every channel, also those ``conv_last`` never reads.
``patch-embed``: SwinIR's patch embedding runs as torch's transposed copy and LayerNorm.
``cat-block``: CAT's blocks run as torch ops around their sparse Linears (rolls, window partitions,
batched matmuls, a separate GELU).
"""

from __future__ import annotations

import argparse
import collections
import statistics
import time
from unittest import mock

import torch
from torch import nn

import iss
from iss.sparse import SETUP_CALLS, fused


def without(fusion: str, model: nn.Module) -> nn.Module:
    """``iss.sparsify(model)`` with ``fusion`` left out."""
    if fusion == "unread-channels":
        with mock.patch.object(fused, "_drop_unread_channels", lambda model, plan: None):
            return iss.sparsify(model)
    if fusion == "patch-embed":
        result = iss.sparsify(model)
        result.patch_embed = model.patch_embed
        return result
    if fusion == "cat-block":
        result = iss.sparsify(model)
        for parent in list(result.modules()):
            for name, child in parent.named_children():
                if isinstance(child, fused.FusedCATBlock):
                    setattr(parent, name, child.block)
        return result
    raise ValueError(f"unknown fusion {fusion!r}: unread-channels, patch-embed or cat-block")


def timed_modules(model: nn.Module) -> dict[str, list[float]]:
    """Seconds per call of each top-level module, appended by forward hooks."""
    times: dict[str, list[float]] = collections.defaultdict(list)
    children = [
        (f"{name}.{i}" if isinstance(child, nn.ModuleList) else name, module)
        for name, child in model.named_children()
        for i, module in enumerate(child if isinstance(child, nn.ModuleList) else [child])
    ]  # a ModuleList has no forward of its own: its members
    for name, child in children:
        start: list[float] = []
        child.register_forward_pre_hook(lambda m, a, start=start: start.append(time.perf_counter()))
        child.register_forward_hook(
            lambda m, a, o, name=name, start=start: times[name].append(time.perf_counter() - start.pop())
        )
    return times


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("arch")
    p.add_argument("ratio", type=float)
    p.add_argument("size", type=int, help="LR input height and width (x4)")
    p.add_argument("--without", required=True, choices=["unread-channels", "patch-embed", "cat-block"])
    p.add_argument("--reps", type=int, default=15)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--pause", type=float, default=0.05, help="idle seconds before each timed call")
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    model = iss.archs.build(args.arch, 4).eval()
    iss.pruning.build("scratch", model, args.ratio, seed=0)
    x = torch.rand(1, 3, args.size, args.size)
    with torch.inference_mode():
        models = {"with": iss.sparsify(model), "without": without(args.without, model)}
        for m in models.values():
            for _ in range(SETUP_CALLS + 1):
                m(x)
        torch.testing.assert_close(models["with"](x), models["without"](x), atol=1e-3, rtol=0)
        parts = {name: timed_modules(m) for name, m in models.items()}
        whole: dict[str, list[float]] = {name: [] for name in models}
        for _ in range(args.reps):
            for name, m in models.items():
                time.sleep(args.pause)
                began = time.perf_counter()
                m(x)
                whole[name].append(time.perf_counter() - began)
    print(f"{args.arch} r{args.ratio} {args.size}x{args.size}, {args.threads} threads, {args.reps} "
          f"interleaved calls, median ms, with and without {args.without}:")  # fmt: skip
    for name in models:
        modules_by_time = sorted(parts[name].items(), key=lambda kv: -statistics.median(kv[1]))
        modules = ", ".join(f"{k} {1e3 * statistics.median(v):.1f}" for k, v in modules_by_time)
        print(f"  {name:7s} {1e3 * statistics.median(whole[name]):8.1f}   ({modules})")


if __name__ == "__main__":
    main()
