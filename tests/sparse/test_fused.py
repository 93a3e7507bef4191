"""iss.sparse.fused: whole EDSR residual and Swin blocks, CAT's window attention, equal the dense model, fall
back, and say so."""

from __future__ import annotations

import dataclasses
import math
import threading
import time

import pytest
import torch
from common import TINY_ARCHS, masked
from torch import nn

from iss import archs
from iss.sparse import SparseConv2d, kernels, layer_modes, layers, sparse_path, sparsify, threads
from iss.sparse.fused import (
    FusedCATBlock,
    FusedPatchEmbed,
    FusedRSTB,
    FusedSwinBlock,
    SparseConvShuffle,
    SparseResidualBlock,
)

SWIN = dict(embed_dim=12, depths=(2, 2), num_heads=(2, 3))  # window 8: shifted and unshifted blocks
# CAT: 4x16 / 16x4 windows with one head per half (head dim 48), 2x8 / 8x2 windows with two (24)
CAT = dict(
    embed_dim=96, depth=(2, 2), num_heads=(2, 4), split_size_0=(4, 2), split_size_1=(16, 8), mlp_ratio=1.0
)


def needs_c() -> None:
    if kernels.load() is None:
        pytest.skip("no C compiler: the fused blocks need the compiled kernels (CI installs gcc)")


@pytest.mark.parametrize("ratio", [0.5, 0.95, 0.99])
@pytest.mark.parametrize("size", [(16, 16), (13, 30), (40, 24)])
def test_fused_swin_blocks_equal_dense(ratio: float, size: tuple[int, int]) -> None:
    """Padding, several windows across and down, cyclic shift and mask, 2 and 3 heads: all as PyTorch."""
    needs_c()
    torch.manual_seed(0)
    model = masked(archs.build("swinir-light", 2, **SWIN), ratio)
    fast = sparsify(model, exact=True, min_speedup=0.0)
    x = torch.rand(2, 3, *size)
    with torch.inference_mode():
        torch.testing.assert_close(fast(x), model(x), atol=1e-4, rtol=0)
    blocks = [m for m in fast.modules() if isinstance(m, FusedSwinBlock)]
    assert len(blocks) == 4 and all(b.mode == "fused" and b.block is None for b in blocks)
    assert sum(isinstance(m, FusedRSTB) for m in fast.modules()) == 2
    assert sparse_path(fast) == "fused C kernels"


@pytest.mark.parametrize("size", [(16, 16), (13, 30), (40, 24)])
def test_fused_cat_blocks_equal_dense(size: tuple[int, int]) -> None:
    """Both halves' windows, shifted with masks and not, padding, two images: all as PyTorch."""
    needs_c()
    torch.manual_seed(0)
    model = masked(archs.build("cat-r", 2, **CAT), 0.9)
    fast = sparsify(model, exact=True, min_speedup=0.0)
    x = torch.rand(2, 3, *size)
    with torch.inference_mode():
        torch.testing.assert_close(fast(x), model(x), atol=1e-4, rtol=0)
    assert [m.mode for m in fast.modules() if isinstance(m, FusedCATBlock)] == ["fused"] * 4
    assert sparse_path(fast) == "fused C kernels"


def test_a_fused_cat_block_equals_its_layers_within_float_rounding() -> None:
    """On tokens of unit scale (and at the stored masks' size, 64x64, on two threads): within 1e-6 of the
    output's magnitude."""
    needs_c()
    torch.manual_seed(0)
    model = masked(archs.build("cat-r", 2, **CAT), 0.9)
    fast = sparsify(model, exact=True, min_speedup=0.0)
    names = [name for name, m in fast.named_modules() if isinstance(m, FusedCATBlock)]
    with threads.torch_threads(2), torch.inference_mode():
        for size in ((16, 32), (64, 64)):
            tokens = torch.randn(1, math.prod(size), 96) * 3
            for name in names:
                expected = model.get_submodule(name)(tokens, size)
                got = fast.get_submodule(name)(tokens, size)
                torch.testing.assert_close(got, expected, atol=1e-6 * expected.abs().max().item(), rtol=0)


def test_a_fused_swin_block_equals_its_layers_within_float_rounding() -> None:
    """On tokens of unit scale, one block's output (exp, GELU, LayerNorm, attention in C) within 1e-6 of its
    magnitude: the model-level tests' 1e-4 would hide a sloppy approximation."""
    needs_c()
    torch.manual_seed(0)
    model = masked(archs.build("swinir-light", 2, **SWIN), 0.9)
    fast = sparsify(model, exact=True, min_speedup=0.0)
    names = [name for name, m in fast.named_modules() if isinstance(m, FusedSwinBlock)]
    tokens = torch.randn(1, 16 * 24, 12) * 3
    with torch.inference_mode():
        for name in names:
            expected = model.get_submodule(name)(tokens, (16, 24))
            got = fast.get_submodule(name)(tokens, (16, 24))
            torch.testing.assert_close(got, expected, atol=1e-6 * expected.abs().max().item(), rtol=0)


@pytest.mark.parametrize("window", [4, 12])
def test_fused_swin_blocks_of_other_windows_equal_dense(window: int) -> None:
    """16 and 144 tokens per window: blocks of 4 vectors and single vectors in the kernel's Linears."""
    needs_c()
    torch.manual_seed(0)
    model = masked(archs.build("swinir-light", 2, **SWIN, window_size=window, img_size=4 * window), 0.9)
    fast = sparsify(model, exact=True, min_speedup=0.0)
    x = torch.rand(1, 3, 2 * window, 3 * window - 1)
    with torch.inference_mode():
        torch.testing.assert_close(fast(x), model(x), atol=1e-4, rtol=0)
    assert {m.mode for m in fast.modules() if isinstance(m, FusedSwinBlock)} == {"fused"}


def test_fused_swin_block_at_the_training_size_and_on_two_threads(monkeypatch: pytest.MonkeyPatch) -> None:
    """64x64 (the stored masks' size) and the pool path, several windows per job."""
    needs_c()
    monkeypatch.setattr(threads, "PARALLEL_MIN_WORK", 0)
    torch.manual_seed(1)
    model = masked(archs.build("swinir-light", 2, **SWIN), 0.9)
    fast = sparsify(model, exact=True, min_speedup=0.0)
    x = torch.rand(1, 3, 64, 64)
    with threads.torch_threads(2), torch.inference_mode():
        torch.testing.assert_close(fast(x), model(x), atol=1e-4, rtol=0)


@pytest.mark.parametrize("scale", [3, 4])
def test_fused_residual_blocks_and_upsamplers_equal_dense(kernel_path: str, scale: int) -> None:
    torch.manual_seed(0)
    model = masked(archs.build("edsr-l", scale, num_feat=8, num_block=3), 0.9)
    fast = sparsify(model, exact=True, min_speedup=0.0)
    x = torch.rand(1, 3, 11, 14)
    with torch.inference_mode():
        torch.testing.assert_close(fast(x), model(x), atol=1e-4, rtol=0)
    fused_blocks = [m for m in fast.modules() if isinstance(m, SparseResidualBlock)]
    assert len(fused_blocks) == (3 if kernel_path == "c" else 0)  # the fallback keeps the plain blocks
    shuffles = [m.factor for m in fast.modules() if isinstance(m, SparseConvShuffle)]
    assert shuffles == ({3: [3], 4: [2, 2]}[scale] if kernel_path == "c" else [])
    expected = "fused C kernels" if kernel_path == "c" else "PyTorch kernels (no C compiler)"
    assert sparse_path(fast) == expected


@pytest.mark.parametrize("arch", ["edsr-l", "cat-r"])
@pytest.mark.parametrize("last_mode", ["sparse", "dense"])
def test_the_upsampler_computes_only_the_channels_the_last_conv_reads(arch: str, last_mode: str) -> None:
    """At 99% zeros ``conv_last`` reads a few of the upsampler's channels: its last conv computes only
    those (4 outputs each at x2), the model's output is unchanged, also where ``conv_last`` runs dense."""
    needs_c()
    torch.manual_seed(0)
    model = masked(
        archs.build(arch, 2, **TINY_ARCHS[arch] | ({"num_feat": 32} if arch == "edsr-l" else {})), 0.99
    )
    read = int((model.conv_last.weight.abs().sum((0, 2, 3)) > 0).sum())
    assert 0 < read < model.conv_last.in_channels
    fast = sparsify(model, exact=True, min_speedup=0.0)
    if last_mode == "dense":
        fast.conv_last._plan = layers._Plan(min_speedup=math.inf)
    x = torch.rand(1, 3, 11, 14)
    with torch.inference_mode():
        torch.testing.assert_close(fast(x), model(x), atol=1e-5, rtol=0)
    assert fast.upsample[-2].conv.out_channels == 4 * read and fast.conv_last.in_channels == read
    assert fast.conv_last.mode == last_mode


@pytest.mark.parametrize("mode", ["sparse", "dense"])
@pytest.mark.parametrize("contiguous", [True, False])
@pytest.mark.parametrize("shuffle", [1, 2])
def test_conv_epilogue_relu_scale_residual_shuffle(
    kernel_path: str, mode: str, contiguous: bool, shuffle: int
) -> None:
    """``conv(x, relu=, scale=, residual=, shuffle=)`` is ``pixel_shuffle(relu(conv(x))) * scale +
    residual`` on every path (a non-contiguous residual is added by torch after the kernel)."""
    conv = masked(nn.Conv2d(5, 8, 3, padding=1), 0.8)
    layer = SparseConv2d(conv, layers._Plan(min_speedup=0.0 if mode == "sparse" else math.inf))
    x = torch.randn(2, 5, 6, 9)
    shape = (2, 8 // shuffle**2, 6 * shuffle, 9 * shuffle)
    residual = torch.randn(shape[::-1]).permute(3, 2, 1, 0) if not contiguous else torch.randn(shape)
    with torch.inference_mode():
        expected = residual + 0.1 * torch.pixel_shuffle(conv(x).relu(), shuffle)
        got = layer(x, relu=True, scale=0.1, residual=residual, shuffle=shuffle)
        torch.testing.assert_close(got, expected, atol=1e-5, rtol=0)
        expected = -2.0 * torch.pixel_shuffle(conv(x), shuffle)
        torch.testing.assert_close(layer(x, scale=-2.0, shuffle=shuffle), expected, atol=1e-5, rtol=0)
    assert layer.mode == mode


def test_slower_fused_block_runs_the_sparse_layers(monkeypatch: pytest.MonkeyPatch) -> None:
    """The fused block times itself against the per-layer path and drops whichever loses."""
    needs_c()
    slow = FusedSwinBlock._fused

    def slowed(self: FusedSwinBlock, x: torch.Tensor, size: tuple[int, int]) -> torch.Tensor:
        time.sleep(0.5)  # far beyond any load-induced noise in the per-layer path's time
        return slow(self, x, size)

    monkeypatch.setattr(FusedSwinBlock, "_fused", slowed)
    torch.manual_seed(0)
    model = masked(archs.build("swinir-light", 2, **SWIN), 0.95)
    fast = sparsify(model, exact=True, threads=1)  # timed on one thread: no OpenMP stalls on a busy CPU
    x = torch.rand(1, 3, 16, 16)
    with torch.inference_mode():
        torch.testing.assert_close(fast(x), model(x), atol=1e-4, rtol=0)
    blocks = [m for m in fast.modules() if isinstance(m, FusedSwinBlock)]
    assert blocks and all(b.mode == "layers" and b._weights is None for b in blocks)
    assert "fused" not in layer_modes(fast).values()


def test_slower_fused_cat_block_runs_its_layers(monkeypatch: pytest.MonkeyPatch) -> None:
    needs_c()
    slow = FusedCATBlock._fused

    def slowed(self: FusedCATBlock, x: torch.Tensor, size: tuple[int, int]) -> torch.Tensor:
        time.sleep(0.5)
        return slow(self, x, size)

    monkeypatch.setattr(FusedCATBlock, "_fused", slowed)
    torch.manual_seed(0)
    model = masked(archs.build("cat-r", 2, **CAT), 0.95)
    fast = sparsify(model, exact=True, threads=1)
    x = torch.rand(1, 3, 16, 16)
    with torch.inference_mode():
        torch.testing.assert_close(fast(x), model(x), atol=1e-4, rtol=0)
    assert {m.mode for m in fast.modules() if isinstance(m, FusedCATBlock)} == {"layers"}


def test_no_fusion_without_the_compiler_or_when_asked(kernel_path: str) -> None:
    torch.manual_seed(0)
    model = masked(archs.build("swinir-light", 2, **SWIN), 0.95)
    x = torch.rand(1, 3, 9, 9)
    unfused = sparsify(model, exact=True, fuse=False)
    for fast in (unfused, *([sparsify(model, exact=True)] if kernel_path == "mkl" else [])):
        assert not any(isinstance(m, FusedSwinBlock | SparseResidualBlock) for m in fast.modules())
        with torch.inference_mode():
            torch.testing.assert_close(fast(x), model(x), atol=1e-4, rtol=0)


def test_dense_path_is_reported() -> None:
    model = masked(archs.build("edsr-l", 2, num_feat=8, num_block=1), 0.95)
    fast = sparsify(model, exact=True, min_speedup=math.inf)  # every layer keeps its dense kernel
    with torch.inference_mode():
        fast(torch.rand(1, 3, 8, 8))
    assert sparse_path(fast) == "dense kernels"


def test_swin_windows_refuses_bad_calls() -> None:
    needs_c()
    torch.manual_seed(0)
    model = masked(archs.build("swinir-light", 2, **SWIN), 0.9)
    fast = sparsify(model, exact=True)
    block = next(m for m in fast.modules() if isinstance(m, FusedSwinBlock) and m._weights.shift)
    weights = block._weights
    tokens, out = torch.rand(16 * 24, 12), torch.empty(16 * 24, 12)
    buffer = torch.empty(weights.buffer_size())
    good = dict(size=(16, 24), windows=range(6), buffer=buffer)
    kernels.swin_windows(out, tokens, weights, **good)
    with pytest.raises(ValueError, match="must differ"):
        kernels.swin_windows(tokens, tokens, weights, **good)
    with pytest.raises(ValueError, match="outside"):
        kernels.swin_windows(out, tokens, weights, **{**good, "windows": range(7)})
    with pytest.raises(ValueError, match="do not fit"):
        kernels.swin_windows(out[:-24], tokens[:-24], weights, **good)
    with pytest.raises(ValueError, match="buffer"):
        kernels.swin_windows(out, tokens, weights, **{**good, "buffer": buffer[:-1]})


def test_window_attention_refuses_bad_calls() -> None:
    needs_c()
    torch.manual_seed(0)
    fast = sparsify(masked(archs.build("cat-r", 2, **CAT), 0.9), exact=True, min_speedup=0.0)
    attn = next(m for m in fast.modules() if isinstance(m, FusedCATBlock) and m.block.shifts)._attentions[1]
    qkv, out = torch.rand(16 * 32, 288), torch.empty(16 * 32, 96)
    buffer = torch.empty(attn.buffer_size())
    good = dict(size=(16, 32), windows=range(8), buffer=buffer)
    kernels.window_attention(out, qkv, attn, **good)
    with pytest.raises(ValueError, match="outside"):
        kernels.window_attention(out, qkv, attn, **{**good, "windows": range(9)})
    with pytest.raises(ValueError, match="misfit"):
        kernels.window_attention(out[:-32], qkv[:-32], attn, **good)
    with pytest.raises(ValueError, match="buffer"):
        kernels.window_attention(out, qkv, attn, **{**good, "buffer": buffer[:-1]})
    with pytest.raises(ValueError, match="contiguous"):
        kernels.window_attention(out, qkv.double(), attn, **good)


def test_mlp_tokens_equals_the_blocks_mlp_on_any_span_and_in_place() -> None:
    """Spans that start and end inside a chunk of ``ld`` tokens (the last one padded), in place or not: rows
    outside the span are left alone; within 1e-6 of the output's magnitude."""
    needs_c()
    torch.manual_seed(0)
    fast = sparsify(masked(archs.build("cat-r", 2, **CAT), 0.9), exact=True, min_speedup=0.0)
    block = next(m for m in fast.modules() if isinstance(m, FusedCATBlock))
    mlp, dense = block._mlp, block.block
    assert mlp is not None and mlp.ld % kernels.lanes() == 0
    tokens = torch.randn(3 * mlp.ld + 5, 96) * 3
    with torch.inference_mode():
        expected = tokens + dense.mlp(dense.norm2(tokens))
    buffer = torch.empty(mlp.buffer_size())
    for span in (range(len(tokens)), range(7, mlp.ld + 9), range(2 * mlp.ld, len(tokens)), range(3, 3)):
        out = torch.full_like(tokens, math.nan)
        kernels.mlp_tokens(out, tokens, mlp, span=span, buffer=buffer)
        rows = slice(span.start, span.stop)
        torch.testing.assert_close(out[rows], expected[rows], atol=1e-6 * expected.abs().max().item(), rtol=0)
        assert out[: span.start].isnan().all() and out[span.stop :].isnan().all()
    in_place = tokens.clone()
    kernels.mlp_tokens(in_place, in_place, mlp, span=range(len(tokens)), buffer=buffer)
    torch.testing.assert_close(in_place, expected, atol=1e-6 * expected.abs().max().item(), rtol=0)


def test_mlp_tokens_refuses_bad_calls() -> None:
    needs_c()
    torch.manual_seed(0)
    fast = sparsify(masked(archs.build("cat-r", 2, **CAT), 0.9), exact=True, min_speedup=0.0)
    mlp = next(m for m in fast.modules() if isinstance(m, FusedCATBlock))._mlp
    tokens, out, buffer = torch.rand(40, 96), torch.empty(40, 96), torch.empty(mlp.buffer_size())
    kernels.mlp_tokens(out, tokens, mlp, span=range(40), buffer=buffer)
    with pytest.raises(ValueError, match="outside"):
        kernels.mlp_tokens(out, tokens, mlp, span=range(41), buffer=buffer)
    with pytest.raises(ValueError, match="must both be"):
        kernels.mlp_tokens(torch.empty(40, 48), torch.rand(40, 48), mlp, span=range(40), buffer=buffer)
    with pytest.raises(ValueError, match="buffer"):
        kernels.mlp_tokens(out, tokens, mlp, span=range(40), buffer=buffer[:-1])
    with pytest.raises(ValueError, match="contiguous"):
        kernels.mlp_tokens(out, tokens.double(), mlp, span=range(40), buffer=buffer)
    with pytest.raises(ValueError, match="multiple"):
        dataclasses.replace(mlp, ld=mlp.ld + 1).check()


def test_threads_claiming_windows_run_each_once() -> None:
    """Two threads sharing one claim counter compute exactly what one call does; a counter already at 4
    leaves windows 0-3 untouched."""
    needs_c()
    torch.manual_seed(0)
    fast = sparsify(masked(archs.build("swinir-light", 2, **SWIN), 0.9), exact=True)
    weights = next(m for m in fast.modules() if isinstance(m, FusedSwinBlock) and m._weights.shift)._weights
    tokens, size = torch.rand(16 * 24, 12), (16, 24)
    buffers = [torch.empty(weights.buffer_size()) for _ in range(2)]
    expected = torch.empty_like(tokens)
    kernels.swin_windows(expected, tokens, weights, size=size, windows=range(6), buffer=buffers[0])
    out, claim = torch.full_like(tokens, math.nan), torch.zeros(1, dtype=torch.int64)
    threads = [
        threading.Thread(target=kernels.swin_windows, args=(out, tokens, weights),
                         kwargs=dict(size=size, windows=range(6), buffer=buffer, claim=claim))
        for buffer in buffers
    ]  # fmt: skip
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert torch.equal(out, expected)
    out, claim = torch.full_like(tokens, math.nan), torch.tensor([4])
    kernels.swin_windows(out, tokens, weights, size=size, windows=range(6), buffer=buffers[0], claim=claim)
    assert out.isfinite().all(1).sum() == 2 * 64  # two 8x8 windows
    with pytest.raises(ValueError, match="claim"):
        kernels.swin_windows(out, tokens, weights, size=size, windows=range(6), buffer=buffers[0],
                             claim=claim.int())  # fmt: skip


@pytest.mark.parametrize(("n", "c"), [(37, 20), (64, 60)])
def test_add_tokens_adds_the_transposed_image(n: int, c: int) -> None:
    """Blocks of vectors and the scalar tails of both tokens and channels, in place and not, and spans."""
    needs_c()
    tokens, image = torch.randn(n, c), torch.randn(c, n)
    out = torch.full_like(tokens, math.nan)
    kernels.add_tokens(out, tokens, image, span=range(n))
    torch.testing.assert_close(out, tokens + image.T, atol=0, rtol=0)
    part = tokens.clone()
    kernels.add_tokens(part, part, image, span=range(5, n - 3))  # in place, some rows
    expected = tokens.clone()
    expected[5 : n - 3] += image.T[5 : n - 3]
    torch.testing.assert_close(part, expected, atol=0, rtol=0)
    with pytest.raises(ValueError, match="do not fit"):
        kernels.add_tokens(out, tokens, image.T.contiguous() if n != c else image[:-1], span=range(n))
    with pytest.raises(ValueError, match="outside"):
        kernels.add_tokens(out, tokens, image, span=range(n + 1))


@pytest.mark.parametrize(("n", "c"), [(37, 20), (64, 60)])
def test_norm_tokens_is_the_layer_norm_of_the_transposed_image(n: int, c: int) -> None:
    """Blocks of vectors and the scalar tails of both tokens and channels, spans, and bad calls; a
    sparsified SwinIR embeds its patches this way."""
    needs_c()
    image, weight, bias = torch.randn(c, n) * 3 + 1, torch.randn(c), torch.randn(c)
    out = torch.full((n, c), math.nan)
    kernels.norm_tokens(out, image, weight, bias, 1e-5, span=range(3, n - 2))
    expected = nn.functional.layer_norm(image.T, (c,), weight, bias, 1e-5)
    torch.testing.assert_close(out[3 : n - 2], expected[3 : n - 2], atol=1e-5, rtol=0)
    assert out[:3].isnan().all() and out[n - 2 :].isnan().all()
    with pytest.raises(ValueError, match="do not fit"):
        kernels.norm_tokens(out, image, weight[:-1], bias, 1e-5, span=range(n))
    with pytest.raises(ValueError, match="outside"):
        kernels.norm_tokens(out, image, weight, bias, 1e-5, span=range(n + 1))
    fast = sparsify(masked(archs.build("swinir-light", 2, **SWIN), 0.9), exact=True)
    assert isinstance(fast.patch_embed, FusedPatchEmbed)


def test_portable_build_gives_the_same_results(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    """Built without ``-march=native`` (4-float SSE vectors instead of AVX2/AVX-512) the kernels still
    equal dense: the fallback flags a compiler or CPU without -march=native gets."""
    needs_c()
    monkeypatch.setenv("ISS_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(kernels, "FLAGS", (["-O3"],))
    kernels.load.cache_clear()
    try:
        assert kernels.lanes() == 4
        torch.manual_seed(0)
        for model in (
            archs.build("swinir-light", 2, **SWIN),
            archs.build("edsr-l", 2, num_feat=8, num_block=2),
            archs.build("cat-r", 2, **CAT),
        ):
            model = masked(model, 0.9)
            x = torch.rand(1, 3, 12, 20)
            with torch.inference_mode():
                fast = sparsify(model, exact=True, min_speedup=0.0)
                torch.testing.assert_close(fast(x), model(x), atol=1e-4, rtol=0)
    finally:
        kernels.load.cache_clear()


@pytest.mark.parametrize("window", [(8, 8), (4, 16), (16, 4)])
@pytest.mark.parametrize("size", [(16, 16), (16, 48), (32, 32), (48, 16)])
def test_four_window_masks_cover_every_image_size(window: tuple[int, int], size: tuple[int, int]) -> None:
    """The kernels keep the masks of a 2x2-window image only: with the cyclic shift, a window's mask depends
    only on whether it is in the last row and/or column of windows (elsewhere it is zero)."""
    from iss.archs.common import shifted_window_mask

    (wh, ww), shift = window, (window[0] // 2, window[1] // 2)
    full = shifted_window_mask(size, window, shift, torch.device("cpu"))
    kinds = shifted_window_mask((2 * wh, 2 * ww), window, shift, torch.device("cpu"))
    rows, cols = size[0] // wh, size[1] // ww
    for wi, mask in enumerate(full):
        kind = 2 * (wi // cols == rows - 1) + (wi % cols == cols - 1)
        torch.testing.assert_close(mask, kinds[kind] if kind else torch.zeros_like(mask), atol=0, rtol=0)


def test_fused_blocks_refuse_training_use() -> None:
    needs_c()
    model = masked(archs.build("swinir-light", 2, **SWIN), 0.95)
    fast = sparsify(model, exact=True, min_speedup=0.0)
    block = next(m for m in fast.modules() if isinstance(m, FusedSwinBlock))
    with pytest.raises(ValueError, match="inference-only"):
        block(torch.rand(1, 64, 12, requires_grad=True), (8, 8))
