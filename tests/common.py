"""Shared by the tests: the repository root, tiny model configurations (fast on CPU), a host-sync detector."""

from pathlib import Path

import torch
from torch.overrides import TorchFunctionMode

ROOT = Path(__file__).resolve().parents[1]
TINY = dict(embed_dim=12, depths=(2,), num_heads=(2,))  # SwinIR-light with a few thousand weights
# Constructor overrides giving a model small enough for a fast forward; every registered arch needs one.
TINY_ARCHS = {
    "swinir-light": dict(embed_dim=12, depths=(2, 2), num_heads=(2, 2)),
    "edsr-l": dict(num_feat=8, num_block=2),
    "edsr-baseline": dict(num_feat=8, num_block=2),
    "cat-r": dict(
        embed_dim=96, depth=(2,), num_heads=(2,), split_size_0=(4,), split_size_1=(16,), mlp_ratio=1.0
    ),
}


class HostSyncError(AssertionError):
    """A torch call that would make the host wait for the device ran inside ``NoHostSync``."""


class NoHostSync(TorchFunctionMode):
    """Raises ``HostSyncError`` on every torch call that reads device data on the host or has a shape that
    depends on it: a CPU stand-in for ``torch.cuda.set_sync_debug_mode("error")``, so tests without a GPU can
    prove a code path sync-free. Only calls made from Python are seen (not those inside torch ops), and
    device-to-device copies cannot be told apart on the CPU.
    """

    SYNCS = frozenset(
        {"item", "tolist", "__bool__", "__int__", "__float__", "__index__", "__complex__", "__repr__",
         "__format__", "is_nonzero", "nonzero", "argwhere", "unique", "unique_consecutive", "masked_select",
         "repeat_interleave", "equal", "allclose", "cpu", "numpy", "tensor", "as_tensor"}
    )  # fmt: skip

    def __torch_function__(self, func, types, args=(), kwargs=None):
        name = getattr(func, "__name__", "")
        if name in self.SYNCS or (name in ("__getitem__", "__setitem__") and _host_index(args[1])):
            raise HostSyncError(f"torch {name} makes the host wait for the device")
        return func(*args, **(kwargs or {}))


def _host_index(index) -> bool:
    """A boolean-mask index (data-dependent shape) or a Python list (copied from the host)."""
    parts = index if isinstance(index, tuple) else (index,)
    return any(
        isinstance(p, list) or (isinstance(p, torch.Tensor) and p.dtype in (torch.bool, torch.uint8))
        for p in parts
    )
