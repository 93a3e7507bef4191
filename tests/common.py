"""Shared by the tests: the repository root, the benchmark scripts, tiny model configurations (fast on CPU),
random masks, hostile image files, a host-sync detector."""

import importlib.util
import io
import os
import struct
import sys
import zlib
from pathlib import Path
from types import ModuleType

import numpy as np
import torch
from PIL import Image
from torch import nn
from torch.overrides import TorchFunctionMode

import iss.pruning
from iss.pruning import telemetry

ROOT = Path(__file__).resolve().parents[1]


def load_benchmark(name: str) -> ModuleType:
    """``benchmarks/<name>.py`` as a module (the scripts are not a package)."""
    spec = importlib.util.spec_from_file_location(name, ROOT / "benchmarks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


TINY = dict(embed_dim=12, depths=(2,), num_heads=(2,))  # SwinIR-light with a few thousand weights
# The tiny SwinIR that training tests run on LR patches of 8 (windows of 4; lists, as a JSON plan holds them).
TINY_SWINIR = {"embed_dim": 12, "depths": [2], "num_heads": [2], "window_size": 4}
# Constructor overrides giving a model small enough for a fast forward; every registered arch needs one.
TINY_ARCHS = {
    "swinir-light": dict(embed_dim=12, depths=(2, 2), num_heads=(2, 2)),
    "edsr-l": dict(num_feat=8, num_block=2),
    "edsr-baseline": dict(num_feat=8, num_block=2),
    "cat-r": dict(
        embed_dim=96, depth=(2,), num_heads=(2,), split_size_0=(4,), split_size_1=(16,), mlp_ratio=1.0
    ),
}


def masked(module: nn.Module, ratio: float = 0.95, seed: int = 0) -> nn.Module:
    """``module`` freshly initialised with a random mask of exactly ``ceil(ratio * n)`` zeros per
    Conv2d/Linear weight (the scratch pruner), in eval mode."""
    iss.pruning.build("scratch", module, ratio, seed=seed)
    return module.eval()


def png_bytes(width: int, height: int, depth: int, color_type: int, raw_rows: bytes) -> bytes:
    """A PNG file holding ``raw_rows`` (filter byte + pixels per row), written by hand: Pillow refuses
    to write 16-bit colour or absurd headers."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    header = struct.pack(">IIBBBBB", width, height, depth, color_type, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(raw_rows, 1))
        + chunk(b"IEND", b"")
    )


def _one_colour_png(side: int) -> bytes:
    """A side x side 1-bit PNG of one colour: tiny on disk, ``side**2`` bytes once Pillow decodes it."""
    return png_bytes(side, side, 1, 0, b"\x00" * (1 + (side + 7) // 8) * side)


def bad_uploads() -> dict[str, tuple[bytes, str]]:
    """File name -> (content, what the one-line error must say): hostile uploads."""
    buffer = io.BytesIO()
    noise = np.random.default_rng(0).integers(0, 256, (64, 64, 3), dtype=np.uint8)
    Image.fromarray(noise).save(buffer, format="PNG")
    png = buffer.getvalue()
    over = "too large: over 178,956,970 pixels"  # Pillow refuses these at open, before our own limit
    return {
        "empty.png": (b"", "not an image (empty file)"),
        "truncated.png": (png[: len(png) // 2], "corrupt or truncated image data"),
        "document.png": (b"%PDF-1.4\n1 0 obj<<>>endobj\ntrailer<<>>\n%%EOF\n", "looks like a PDF document"),
        "drawing.png": (
            b'<svg xmlns="http://www.w3.org/2000/svg" width="9" height="9"><rect width="9"/></svg>',
            "looks like an SVG drawing",
        ),
        "page.png": (b"<!DOCTYPE html><html><script>alert(1)</script></html>", "looks like an HTML page"),
        "header.png": (png_bytes(65535, 65535, 8, 2, b"\x00" * 64), over),
        "bomb.png": (_one_colour_png(30000), over),
        "large.png": (_one_colour_png(8000), "too large: 8000x8000 = 64,000,000 pixels"),
    }


def as_format_1(path: Path) -> None:
    """Rewrite a checkpoint as format 1 (before the sha256 covered the metadata), as old files are."""
    from safetensors.torch import save

    from iss import checkpoint

    tensors, metadata = checkpoint.read(path)
    old = {key: value for key, value in metadata.items() if key != "sha256"} | {"format_version": "1"}
    path.write_bytes(save(tensors, metadata=old | {"sha256": checkpoint.payload_sha256(tensors)}))


def rewrite_checkpoint(path: str | Path, *, tensors=None, meta=None, drop=(), resign: bool = True) -> None:
    """Edit a checkpoint's tensors (``drop`` removes some) and/or metadata, then recompute its sha256 as a
    forger would (or not)."""
    import json

    from safetensors.torch import load, save

    from iss import checkpoint

    raw = Path(path).read_bytes()
    stored = load(raw)
    metadata = json.loads(raw[8 : 8 + int.from_bytes(raw[:8], "little")])["__metadata__"]
    stored.update(tensors or {})
    for name in drop:
        del stored[name]
    metadata.update(meta or {})
    if resign:
        metadata["sha256"] = checkpoint.payload_sha256(stored, metadata)
    Path(path).write_bytes(save(stored, metadata=metadata))


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

    def __enter__(self):
        self._cpu_numpy, telemetry.CPU_NUMPY = telemetry.CPU_NUMPY, False  # a GPU runs the torch ops
        return super().__enter__()

    def __exit__(self, *exc):
        telemetry.CPU_NUMPY = self._cpu_numpy
        return super().__exit__(*exc)

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


def load_app() -> ModuleType:
    """``app.py`` imported as a module (registered: gradio looks a component subclass's module up by name)."""
    os.environ["GRADIO_ANALYTICS_ENABLED"] = "False"
    if "app" not in sys.modules:
        spec = importlib.util.spec_from_file_location("app", ROOT / "app.py")
        sys.modules["app"] = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(sys.modules["app"])
    return sys.modules["app"]
