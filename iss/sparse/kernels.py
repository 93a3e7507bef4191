"""The compiled kernels behind :mod:`iss.sparse`: built once with the system C compiler.

``csrc/*.c`` is plain C (no Python or torch headers): ``spmm.c`` the sparse x dense product for convs and
Linears, ``swin.c`` whole Swin transformer blocks per window. It compiles in a few seconds with ``cc`` and is
called through :mod:`ctypes`, which releases the GIL for the call. The shared library is cached under
``$ISS_CACHE_DIR/kernels`` keyed by the sources, the compiler, its flags and the CPU, and built for the
local CPU (``-march=native``). Without a working compiler, or with ``ISS_NATIVE=0``, :func:`load` returns
None and :mod:`iss.sparse` falls back to its pure-PyTorch path (MKL's CSR product): the same results.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import os
import platform
import shutil
import subprocess
import tempfile
import warnings
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import Tensor

from iss.data import cache_dir

__all__ = [
    "OffsetCSR",
    "SwinBlock",
    "WindowAttention",
    "add_tokens",
    "conv_tiles",
    "lanes",
    "linear_tokens",
    "load",
    "swin_windows",
    "window_attention",
]

CSRC = Path(__file__).with_name("csrc")
SOURCES = (CSRC / "spmm.c", CSRC / "swin.c")
HEADERS = (CSRC / "kernels.h",)
FLAGS = (["-O3", "-march=native"], ["-O3"])  # the second for compilers or CPUs without -march=native


def _cpu_id() -> str:
    """What the compiled code depends on besides the source: machine type and CPU feature flags."""
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
        flags = next(line for line in lines if line.startswith(("flags", "Features")))
    except (OSError, StopIteration):
        flags = platform.processor()
    return f"{platform.machine()} {flags}"


def _compiler() -> str | None:
    return shutil.which(os.environ.get("CC", "cc"))


def _build(target: Path, compiler: str) -> None:
    """Compile ``SOURCES`` into ``target`` (atomically: concurrent builders write their own temp files)."""
    target.parent.mkdir(parents=True, exist_ok=True)
    errors = []
    for flags in FLAGS:
        with tempfile.NamedTemporaryFile(dir=target.parent, suffix=".so", delete=False) as tmp:
            temp = Path(tmp.name)
        cmd = [compiler, *flags, "-shared", "-fPIC", "-o", str(temp), *map(str, SOURCES), "-lm"]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
        if done.returncode == 0:
            os.replace(temp, target)
            return
        temp.unlink(missing_ok=True)
        last_line = (done.stderr.strip().splitlines() or [f"exit status {done.returncode}"])[-1]
        errors.append(f"{' '.join(flags)}: {last_line}")
    raise RuntimeError(f"{compiler} failed ({'; '.join(errors)})")


@functools.cache
def load() -> ctypes.CDLL | None:
    """The compiled library (``iss_conv_tiles``, ``iss_linear_tokens``, ``iss_swin_windows``,
    ``iss_window_attention``, ``iss_mlp_tokens``, ``iss_add_tokens``, ``iss_norm_tokens``), built on first
    use; None (with a warning) when it cannot be built."""
    if os.environ.get("ISS_NATIVE", "1") == "0":
        return None
    compiler = _compiler()
    if compiler is None:
        warnings.warn(
            "no C compiler (cc) found: iss.sparse uses its slower pure-PyTorch kernels", stacklevel=2
        )
        return None
    version = subprocess.run([compiler, "--version"], capture_output=True, text=True).stdout
    code = b"".join(path.read_bytes() for path in (*SOURCES, *HEADERS))
    key = hashlib.sha256(code + version.encode() + _cpu_id().encode() + repr(FLAGS).encode()).hexdigest()[:16]
    target = cache_dir() / "kernels" / f"spmm-{key}.so"
    try:
        if not target.exists():
            _build(target, compiler)
        lib = ctypes.CDLL(str(target))
    except (OSError, RuntimeError, subprocess.TimeoutExpired) as e:
        warnings.warn(f"could not build the sparse kernel ({e}): using pure-PyTorch kernels", stacklevel=2)
        return None
    i64, ptr, f32 = ctypes.c_int64, ctypes.c_void_p, ctypes.c_float
    conv = [ptr, ptr, *[i64] * 3, ptr, *[i64] * 9, ptr, *[i64] * 4, *[ptr] * 4, i64, f32, ptr, i64, i64]
    lib.iss_conv_tiles.argtypes = conv
    lib.iss_linear_tokens.argtypes = [ptr, ptr, *[i64] * 4, ptr, i64, ptr, ptr, ptr, ptr]
    lib.iss_swin_windows.argtypes = [ptr, ptr, ctypes.POINTER(_SwinBlockC), i64, i64, ptr, ptr]
    lib.iss_window_attention.argtypes = [ptr, ptr, ctypes.POINTER(_WindowAttentionC), i64, i64, ptr, ptr]
    lib.iss_window_attention.restype = None
    lib.iss_mlp_tokens.argtypes = [ptr, ptr, ctypes.POINTER(_MLPBlockC), i64, i64, ptr, i64]
    lib.iss_mlp_tokens.restype = None
    lib.iss_add_tokens.argtypes = [ptr, ptr, ptr, *[i64] * 4]
    lib.iss_conv_tiles.restype = lib.iss_linear_tokens.restype = lib.iss_swin_windows.restype = None
    lib.iss_norm_tokens.argtypes = [ptr, ptr, ptr, ptr, f32, *[i64] * 4]
    lib.iss_add_tokens.restype = lib.iss_norm_tokens.restype = None
    lib.iss_lanes.restype = lib.iss_half.restype = ctypes.c_int
    return lib


def half_tiles() -> bool:
    """Whether the kernel can keep conv inputs as IEEE halves (F16C): half the bytes per multiply-add."""
    return bool(_library().iss_half())


def lanes() -> int:
    """Floats per vector of the compiled kernels (16 with AVX-512, 8 with AVX2, else 4)."""
    return _library().iss_lanes()


@dataclass(frozen=True)
class OffsetCSR:
    """A CSR matrix whose column indices are element offsets into the kernel's input (input channel, and
    for a conv the kernel tap, folded together), in the kernel's index types."""

    rowptr: Tensor  # int32 [rows + 1]
    offsets: Tensor  # int32 [nnz]
    values: Tensor  # float32 [nnz]
    reach: int  # 1 + the largest offset (0 when empty): the input must extend this far beyond each row

    @classmethod
    def build(cls, rowptr: Tensor, offsets: Tensor, values: Tensor) -> OffsetCSR:
        if offsets.numel() and not 0 <= offsets.min() <= offsets.max() < 2**31:
            raise ValueError("offsets must be in [0, 2**31)")
        if rowptr.numel() < 1 or rowptr[0] != 0 or rowptr[-1] != offsets.numel() or (rowptr.diff() < 0).any():
            raise ValueError("row pointers must rise from 0 to the number of offsets")
        reach = int(offsets.max()) + 1 if offsets.numel() else 0
        return cls(
            rowptr.to(torch.int32).contiguous(),
            offsets.to(torch.int32).contiguous(),
            values.to(torch.float32).contiguous(),
            reach,
        )


def conv_tiles(
    out: Tensor, image: Tensor, weight: OffsetCSR, bias: Tensor | None, *, kernel_size: int, rows: range,
    cols: range, tile_rows: int, buffer: Tensor, plane: int, ld: int, channels: Tensor | None = None,
    groups: int = 1, relu: bool = False, scale: float = 1.0, residual: Tensor | None = None, shuffle: int = 1,
    half: bool = False,
) -> None:  # fmt: skip
    """Output ``rows`` x ``cols`` of a k x k 'same' convolution of ``image`` [C, H, W] (any strides) into
    contiguous ``out``, then ``(relu(out) if relu else out) * scale + residual`` in the same pass.

    ``tile_rows`` rows at a time, the input they read is zero-padded into ``buffer`` (``plane`` elements per
    used input channel, in rows ``ld`` apart: the layout ``weight``'s offsets were computed for; floats, or
    with ``half`` IEEE halves on ``half_tiles()`` CPUs, unless a tile has an input beyond their range) and
    multiplied there, in C; ``channels`` lists the input channels used (None: all); ``weight`` holds
    ``groups`` CSR matrices of ``out``'s channel count one after the other (``groups * C_out + 1`` row
    pointers), each for a range of input channels; ``residual`` (None, or contiguous float32 shaped like
    ``out``) is added at the end. With ``shuffle`` s > 1 (and s * tile_rows * len(cols) more floats in
    ``buffer``), ``out`` is the pixel-shuffled [C_out / s^2, s H,
    s W] (``F.pixel_shuffle`` of the convolution, without writing the unshuffled tensor).
    """
    lib = _library()
    p = kernel_size // 2
    cout, (c, h, w) = out.shape[0] * shuffle**2, image.shape
    cin, tw = (c if channels is None else channels.numel()), len(cols) + 2 * p
    if not (out.dtype == image.dtype == buffer.dtype == torch.float32):
        raise ValueError("conv_tiles needs float32 tensors")
    if not (out.is_contiguous() and buffer.is_contiguous()) or min(image.stride()) < 0:
        raise ValueError("conv_tiles needs a contiguous output and buffer, and non-negative input strides")
    reach = sum((size - 1) * stride for size, stride in zip(image.shape, image.stride(), strict=True))
    if image.numel() and image.storage_offset() + reach >= image.untyped_storage().nbytes() // 4:
        raise ValueError("conv_tiles: the input view reaches outside its storage")
    if (
        shuffle < 1
        or out.shape != (cout // shuffle**2, h * shuffle, w * shuffle)
        or rows.step != 1
        or cols.step != 1
    ):
        raise ValueError(
            f"conv_tiles: output {tuple(out.shape)} does not fit a {h}x{w} image (shuffle {shuffle})"
        )
    if groups < 1 or weight.rowptr.numel() != groups * cout + 1:
        raise ValueError(f"conv_tiles: weights are not {groups} group(s) of {cout} rows")
    if not (0 <= rows.start <= rows.stop <= h and 0 <= cols.start <= cols.stop <= w):
        raise ValueError(f"conv_tiles: rows {rows} or columns {cols} outside the {h}x{w} image")
    if half and not half_tiles():
        raise ValueError("conv_tiles: this CPU's kernel has no half tiles")
    needed = cin * plane + (shuffle * tile_rows * len(cols) if shuffle > 1 else 0)  # floats, also for halves
    if tile_rows < 1 or ld < tw or plane < (tile_rows + 2 * p) * ld or buffer.numel() < needed:
        raise ValueError("conv_tiles: buffer too small for these tiles")
    if weight.reach and weight.reach - 1 + (tile_rows - 1) * ld + len(cols) > buffer.numel():
        raise ValueError("conv_tiles: weights read outside the buffer")
    if channels is not None and not (
        channels.dtype == torch.int64 and channels.is_contiguous()
        and 0 <= channels.min() <= channels.max() < c
    ):  # fmt: skip
        raise ValueError("conv_tiles: bad channel list")
    if residual is not None and not (
        residual.dtype == torch.float32 and residual.is_contiguous() and residual.shape == out.shape
    ):  # fmt: skip
        raise ValueError("conv_tiles: the residual must be contiguous float32 shaped like the output")
    _check_bias(bias, cout)
    if not rows or not cols:
        return
    lib.iss_conv_tiles(
        out.data_ptr(), image.data_ptr(), *image.stride(), 0 if channels is None else channels.data_ptr(),
        cin, h, w, p,
        rows.start, rows.stop, cols.start, cols.stop, tile_rows, buffer.data_ptr(), plane, ld, cout, groups,
        weight.rowptr.data_ptr(), weight.offsets.data_ptr(), weight.values.data_ptr(),
        0 if bias is None else bias.data_ptr(), int(relu), scale, _ptr(residual), shuffle, int(half),
    )  # fmt: skip


def linear_tokens(
    out: Tensor, tokens: Tensor, weight: OffsetCSR, bias: Tensor | None, *, span: range, buffer: Tensor,
    ld: int,
) -> None:  # fmt: skip
    """Rows ``span`` of ``out`` [N, cout] = ``tokens`` [N, cin] @ W^T + bias, both token-major.

    ``ld`` tokens at a time, they are transposed into ``buffer`` (channel rows ``ld`` apart, the layout
    ``weight``'s offsets were computed for), multiplied there, and the result transposed back, in C.
    """
    lib = _library()
    (n, cin), cout = tokens.shape, weight.rowptr.numel() - 1
    if not (out.dtype == tokens.dtype == buffer.dtype == torch.float32):
        raise ValueError("linear_tokens needs float32 tensors")
    if not (out.is_contiguous() and tokens.is_contiguous() and buffer.is_contiguous()):
        raise ValueError("linear_tokens needs contiguous tensors")
    if out.shape != (n, cout) or span.step != 1 or not 0 <= span.start <= span.stop <= n:
        raise ValueError(f"linear_tokens: output {tuple(out.shape)} or span {span} do not fit ({n}, {cout})")
    if ld < 1 or buffer.numel() < (cin + cout) * ld:
        raise ValueError("linear_tokens: buffer too small")
    if weight.reach > (cin - 1) * ld + 1:
        raise ValueError("linear_tokens: weights read outside the buffer")
    _check_bias(bias, cout)
    if not span:
        return
    lib.iss_linear_tokens(
        out.data_ptr(), tokens.data_ptr(), cin, cout, span.start, span.stop, buffer.data_ptr(), ld,
        weight.rowptr.data_ptr(), weight.offsets.data_ptr(), weight.values.data_ptr(),
        0 if bias is None else bias.data_ptr(),
    )  # fmt: skip


class _CSRC(ctypes.Structure):
    _fields_ = [(name, ctypes.c_void_p) for name in ("rowptr", "off", "val", "bias")]


class _SwinBlockC(ctypes.Structure):
    _fields_ = [
        *[(name, ctypes.c_int64) for name in ("h", "w", "c", "ws", "shift", "heads", "hidden")],
        *[(name, ctypes.c_void_p) for name in ("norm1_w", "norm1_b", "norm2_w", "norm2_b")],
        ("eps1", ctypes.c_float),
        ("eps2", ctypes.c_float),
        *[(name, _CSRC) for name in ("qkv", "proj", "fc1", "fc2")],
        ("position_bias", ctypes.c_void_p),
        ("mask", ctypes.c_void_p),
    ]


@dataclass(frozen=True)
class SwinBlock:
    """A Swin transformer block's weights as ``iss_swin_windows`` reads them (see ``csrc/swin.c``).

    The Linears are CSR with offsets ``input channel * window_size**2`` (channel-major window buffers), the
    qkv query rows pre-scaled by ``head_dim**-0.5``; ``position_bias`` is [heads, N, N] transposed
    ([head, key, query]); norms are (weight, bias, eps). ``mask`` (None for an unshifted block) holds the
    shifted-window masks of a 2x2-window image, transposed likewise: windows 1, 2, 3 are those of any image's
    last column, last row, and both; the others have none.
    """

    window_size: int
    shift: int
    heads: int
    norm1: tuple[Tensor, Tensor, float]
    norm2: tuple[Tensor, Tensor, float]
    linears: tuple[tuple[OffsetCSR, Tensor | None], ...]  # qkv, proj, fc1, fc2
    position_bias: Tensor
    mask: Tensor | None

    @property
    def channels(self) -> int:
        return self.norm1[0].numel()

    @property
    def hidden(self) -> int:
        return self.linears[2][0].rowptr.numel() - 1

    def buffer_size(self) -> int:
        """Floats of scratch one thread needs (one window, channel-major, plus one score row per key)."""
        n = self.window_size**2
        return n * (7 * self.channels + self.hidden + lanes())

    def check(self) -> None:
        """Raise ValueError unless every tensor fits the shapes the C code assumes."""
        c, n, hidden = self.channels, self.window_size**2, self.hidden
        if n % lanes() or c % self.heads:
            raise ValueError(f"swin block: need a window area ({n}) that is a multiple of {lanes()}")
        for g, b, _eps in (self.norm1, self.norm2):
            _check_floats(g, c, "norm weight")
            _check_floats(b, c, "norm bias")
        for (weight, bias), (rows, cin) in zip(
            self.linears, ((3 * c, c), (c, c), (hidden, c), (c, hidden)), strict=True
        ):
            if weight.rowptr.numel() != rows + 1 or weight.reach > (cin - 1) * n + 1:
                raise ValueError("swin block: a Linear's weights do not fit its window buffers")
            _check_bias(bias, rows)
        if self.position_bias.shape != (self.heads, n, n):
            raise ValueError(f"swin block: position bias must be ({self.heads}, {n}, {n})")
        _check_floats(self.position_bias.flatten(), self.heads * n * n, "position bias")
        if (self.mask is None) != (self.shift == 0):
            raise ValueError("swin block: a shifted block needs its masks, an unshifted one none")
        if self.mask is not None:
            _check_floats(self.mask.flatten(), 4 * n * n, "mask")

    def _struct(self, h: int, w: int) -> _SwinBlockC:
        (g1, b1, eps1), (g2, b2, eps2) = self.norm1, self.norm2
        linears = [_CSRC(w.rowptr.data_ptr(), w.offsets.data_ptr(), w.values.data_ptr(), _ptr(b))
                   for w, b in self.linears]  # fmt: skip
        return _SwinBlockC(
            h, w, self.channels, self.window_size, self.shift, self.heads, self.hidden,
            g1.data_ptr(), b1.data_ptr(), g2.data_ptr(), b2.data_ptr(), eps1, eps2, *linears,
            self.position_bias.data_ptr(), _ptr(self.mask),
        )  # fmt: skip


def swin_windows(
    out: Tensor, tokens: Tensor, block: SwinBlock, *, size: tuple[int, int], windows: range, buffer: Tensor,
    claim: Tensor | None = None,
) -> None:  # fmt: skip
    """Windows ``windows`` (row-major) of one Swin block on one image: ``tokens`` and ``out`` are [H*W, C]
    token-major, ``size`` is (H, W), multiples of the window. ``block`` must have passed ``check()``.

    With ``claim``, a one-element int64 tensor that holds ``windows.start`` before the first call, threads
    calling this at once split ``windows``: each runs the windows it claims from that counter, one at a time.
    """
    lib = _library()
    (h, w), ws, c = size, block.window_size, block.channels
    count = (h // ws) * (w // ws)
    if h % ws or w % ws or tokens.shape != (h * w, c) or out.shape != tokens.shape:
        raise ValueError(f"swin_windows: tokens {tuple(tokens.shape)} do not fit {size} x {c} channels")
    if tokens.numel() >= 2**31:  # the kernel indexes tokens with int32 offsets
        raise ValueError(f"swin_windows: {tokens.numel()} values in one image, the kernel takes < 2**31")
    if not all(t.dtype == torch.float32 and t.is_contiguous() for t in (out, tokens, buffer)):
        raise ValueError("swin_windows needs contiguous float32 tensors")
    if out.data_ptr() == tokens.data_ptr() or buffer.numel() < block.buffer_size():
        raise ValueError("swin_windows: output must differ from the input, and the buffer hold one window")
    if windows.step != 1 or not 0 <= windows.start <= windows.stop <= count:
        raise ValueError(f"swin_windows: windows {windows} outside 0..{count}")
    if claim is not None and not (
        claim.dtype == torch.int64 and claim.numel() == 1 and claim.is_contiguous()
    ):
        raise ValueError("swin_windows: claim must be a one-element int64 tensor")
    if not windows:
        return
    struct = block._struct(h, w)
    lib.iss_swin_windows(
        out.data_ptr(), tokens.data_ptr(), ctypes.byref(struct), windows.start, windows.stop,
        buffer.data_ptr(), _ptr(claim),
    )  # fmt: skip


class _WindowAttentionC(ctypes.Structure):
    _fields_ = [
        *[(name, ctypes.c_int64) for name in ("h", "w", "wh", "ww", "sy", "sx", "heads", "d")],
        *[(name, ctypes.c_int64) for name in ("in_row", "out_row", "k_at", "v_at")],
        ("scale", ctypes.c_float),
        ("position_bias", ctypes.c_void_p),
        ("mask", ctypes.c_void_p),
    ]


@dataclass(frozen=True)
class WindowAttention:
    """One attention of windows as ``iss_window_attention`` reads it (see ``csrc/swin.c``): ``window`` (rows,
    columns), cyclic ``shift`` (rows, columns), ``heads`` of ``channels // heads``; ``position_bias``
    [heads, N, N] and ``mask`` (None unshifted) laid out as :class:`SwinBlock`'s. Its queries, keys and
    values are ``channels`` wide, starting at channel ``first`` of each third of a qkv row."""

    window: tuple[int, int]
    shift: tuple[int, int]
    heads: int
    channels: int
    first: int
    position_bias: Tensor
    mask: Tensor | None

    def buffer_size(self) -> int:
        """Floats of scratch one thread needs: a window's q, k, v and output, channel-major, and a score row
        per key."""
        n = self.window[0] * self.window[1]
        return n * (4 * self.channels + lanes())

    def check(self) -> None:
        """Raise ValueError unless every tensor fits the shapes the C code assumes."""
        (wh, ww), n = self.window, self.window[0] * self.window[1]
        if n % lanes() or self.channels % self.heads:
            raise ValueError(f"window attention: need a window area ({n}) that is a multiple of {lanes()}")
        if not (0 <= self.shift[0] < wh and 0 <= self.shift[1] < ww):
            raise ValueError(f"window attention: shift {self.shift} must be smaller than the window")
        _check_floats(self.position_bias.flatten(), self.heads * n * n, "position bias")
        if (self.mask is None) != (self.shift == (0, 0)):
            raise ValueError("window attention: a shifted window needs its masks, an unshifted one none")
        if self.mask is not None:
            _check_floats(self.mask.flatten(), 4 * n * n, "mask")


def window_attention(
    out: Tensor, qkv: Tensor, attn: WindowAttention, *, size: tuple[int, int], windows: range, buffer: Tensor,
    claim: Tensor | None = None,
) -> None:  # fmt: skip
    """Windows ``windows`` (row-major) of ``attn`` on one image: ``qkv`` [H*W, 3C] token-major (queries, keys,
    values), its result into channels ``attn.first`` on of ``out`` [H*W, C]; ``size`` (H, W) a multiple of
    the window. ``attn`` must have passed ``check()``; ``claim`` as in :func:`swin_windows`."""
    lib = _library()
    (h, w), (wh, ww) = size, attn.window
    n, c = qkv.shape[0], out.shape[-1]
    count = (h // wh) * (w // ww)
    if h % wh or w % ww or n != h * w or qkv.shape != (n, 3 * c) or out.shape != (n, c):
        raise ValueError(f"window_attention: qkv {tuple(qkv.shape)}, out {tuple(out.shape)} misfit {size}")
    if attn.first + attn.channels > c or qkv.numel() >= 2**31:  # the kernel indexes with int32 offsets
        raise ValueError(f"window_attention: channels {attn.first}+{attn.channels} of {c}, or 2**31 values")
    if not all(t.dtype == torch.float32 and t.is_contiguous() for t in (out, qkv, buffer)):
        raise ValueError("window_attention needs contiguous float32 tensors")
    if buffer.numel() < attn.buffer_size() or out.data_ptr() == qkv.data_ptr():
        raise ValueError("window_attention: output must differ from the input, the buffer hold one window")
    if windows.step != 1 or not 0 <= windows.start <= windows.stop <= count:
        raise ValueError(f"window_attention: windows {windows} outside 0..{count}")
    if claim is not None and not (
        claim.dtype == torch.int64 and claim.numel() == 1 and claim.is_contiguous()
    ):
        raise ValueError("window_attention: claim must be a one-element int64 tensor")
    if not windows:
        return
    struct = _WindowAttentionC(
        h, w, wh, ww, *attn.shift, attn.heads, attn.channels // attn.heads, 3 * c, c, c, 2 * c,
        (attn.channels // attn.heads) ** -0.5, attn.position_bias.data_ptr(), _ptr(attn.mask),
    )  # fmt: skip
    first = 4 * attn.first  # bytes
    lib.iss_window_attention(
        out.data_ptr() + first, qkv.data_ptr() + first, ctypes.byref(struct), windows.start, windows.stop,
        buffer.data_ptr(), _ptr(claim),
    )  # fmt: skip


class _MLPBlockC(ctypes.Structure):
    _fields_ = [
        ("c", ctypes.c_int64),
        ("hidden", ctypes.c_int64),
        ("norm_w", ctypes.c_void_p),
        ("norm_b", ctypes.c_void_p),
        ("eps", ctypes.c_float),
        ("fc1", _CSRC),
        ("fc2", _CSRC),
    ]


@dataclass(frozen=True)
class MLPBlock:
    """A transformer block's MLP half, ``x + fc2(GELU(fc1(LayerNorm(x))))``, as ``iss_mlp_tokens`` reads it:
    tokens go ``ld`` at a time (a multiple of ``lanes()``) into a channel-major buffer, so the Linears are CSR
    with offsets ``input channel * ld``; ``norm`` is (weight, bias, eps)."""

    ld: int
    norm: tuple[Tensor, Tensor, float]
    fc1: tuple[OffsetCSR, Tensor | None]
    fc2: tuple[OffsetCSR, Tensor | None]

    @property
    def channels(self) -> int:
        return self.norm[0].numel()

    @property
    def hidden(self) -> int:
        return self.fc1[0].rowptr.numel() - 1

    def buffer_size(self) -> int:
        """Floats of scratch one thread needs: ``ld`` tokens' input, normalised and hidden channels."""
        return (2 * self.channels + self.hidden) * self.ld

    def check(self) -> None:
        """Raise ValueError unless every tensor fits the shapes the C code assumes."""
        c, hidden, ld = self.channels, self.hidden, self.ld
        if ld < 1 or ld % lanes():
            raise ValueError(f"mlp block: ld ({ld}) must be a positive multiple of {lanes()}")
        _check_floats(self.norm[0], c, "norm weight")
        _check_floats(self.norm[1], c, "norm bias")
        for (weight, bias), (rows, cin) in zip((self.fc1, self.fc2), ((hidden, c), (c, hidden)), strict=True):
            if weight.rowptr.numel() != rows + 1 or weight.reach > (cin - 1) * ld + 1:
                raise ValueError("mlp block: a Linear's weights do not fit its buffer rows")
            _check_bias(bias, rows)

    def _struct(self) -> _MLPBlockC:
        (g, b, eps) = self.norm
        linears = [_CSRC(w.rowptr.data_ptr(), w.offsets.data_ptr(), w.values.data_ptr(), _ptr(bias))
                   for w, bias in (self.fc1, self.fc2)]  # fmt: skip
        return _MLPBlockC(self.channels, self.hidden, g.data_ptr(), b.data_ptr(), eps, *linears)


def mlp_tokens(out: Tensor, tokens: Tensor, mlp: MLPBlock, *, span: range, buffer: Tensor) -> None:
    """Rows ``span`` of ``out`` [N, C] = ``tokens`` [N, C] + the MLP of their LayerNorm (``out`` may be
    ``tokens``). ``mlp`` must have passed ``check()``."""
    lib = _library()
    n, c = tokens.shape
    if not all(t.dtype == torch.float32 and t.is_contiguous() for t in (out, tokens, buffer)):
        raise ValueError("mlp_tokens needs contiguous float32 tensors")
    if c != mlp.channels or out.shape != tokens.shape:
        shapes = f"{tuple(tokens.shape)}, {tuple(out.shape)}"
        raise ValueError(f"mlp_tokens: tokens and out {shapes} must both be (N, {mlp.channels})")
    if span.step != 1 or not 0 <= span.start <= span.stop <= n:
        raise ValueError(f"mlp_tokens: span {span} outside 0..{n}")
    if buffer.numel() < mlp.buffer_size():
        raise ValueError("mlp_tokens: buffer too small")
    if not span:
        return
    struct = mlp._struct()
    lib.iss_mlp_tokens(
        out.data_ptr(), tokens.data_ptr(), ctypes.byref(struct), span.start, span.stop, buffer.data_ptr(),
        mlp.ld,
    )  # fmt: skip


def add_tokens(out: Tensor, tokens: Tensor, image: Tensor, *, span: range) -> None:
    """Rows ``span`` of ``out`` [N, C] = ``tokens`` [N, C] + ``image`` [C, N] transposed (``out`` may be
    ``tokens``)."""
    lib = _library()
    n, c = tokens.shape
    if not all(t.dtype == torch.float32 and t.is_contiguous() for t in (out, tokens, image)):
        raise ValueError("add_tokens needs contiguous float32 tensors")
    if out.shape != (n, c) or image.shape != (c, n):
        raise ValueError(f"add_tokens: {tuple(image.shape)}, {tuple(out.shape)} do not fit ({n}, {c}) tokens")
    if span.step != 1 or not 0 <= span.start <= span.stop <= n:
        raise ValueError(f"add_tokens: span {span} outside 0..{n}")
    lib.iss_add_tokens(out.data_ptr(), tokens.data_ptr(), image.data_ptr(), c, n, span.start, span.stop)


def norm_tokens(out: Tensor, image: Tensor, weight: Tensor, bias: Tensor, eps: float, *, span: range) -> None:
    """Rows ``span`` of ``out`` [N, C] = LayerNorm(``weight``, ``bias``, ``eps``) of ``image`` [C, N]
    transposed: a token's C channels normalised."""
    lib = _library()
    c, n = image.shape
    if not all(t.dtype == torch.float32 and t.is_contiguous() for t in (out, image, weight, bias)):
        raise ValueError("norm_tokens needs contiguous float32 tensors")
    if out.shape != (n, c) or weight.shape != (c,) or bias.shape != (c,):
        raise ValueError(
            f"norm_tokens: {tuple(out.shape)}, {c} weights and biases do not fit ({n}, {c}) tokens"
        )
    if span.step != 1 or not 0 <= span.start <= span.stop <= n:
        raise ValueError(f"norm_tokens: span {span} outside 0..{n}")
    lib.iss_norm_tokens(
        out.data_ptr(), image.data_ptr(), weight.data_ptr(), bias.data_ptr(), eps, c, n, span.start, span.stop
    )


def _ptr(tensor: Tensor | None) -> int:
    return 0 if tensor is None else tensor.data_ptr()


def _check_floats(tensor: Tensor, numel: int, what: str) -> None:
    if tensor.dtype != torch.float32 or tensor.numel() != numel or not tensor.is_contiguous():
        raise ValueError(f"the kernels need a contiguous float32 {what} of {numel} entries")


def _check_bias(bias: Tensor | None, cout: int) -> None:
    if bias is not None and (bias.dtype != torch.float32 or bias.numel() != cout or not bias.is_contiguous()):
        raise ValueError("the kernels need a contiguous float32 bias with one entry per output channel")


def _library() -> ctypes.CDLL:
    lib = load()
    if lib is None:
        raise RuntimeError("the compiled sparse kernel is not available")
    return lib
