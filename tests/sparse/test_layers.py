"""iss.sparse: sparse kernels equal the dense layers, the measured per-layer fallback, no side effects."""

from __future__ import annotations

import math
import threading
import time

import pytest
import torch
from common import TINY_ARCHS, masked
from torch import nn

from iss import archs, sparse
from iss.sparse import SparseConv2d, SparseLinear, kernels, layer_modes, layers, sparsify, threads

RATIOS = (0.9, 0.95, 0.99)


@pytest.mark.parametrize("ratio", RATIOS)
@pytest.mark.parametrize("name", sorted(TINY_ARCHS))
def test_backbone_sparse_equals_dense(name: str, ratio: float, kernel_path: str) -> None:
    torch.manual_seed(0)
    model = masked(archs.build(name, 2, **TINY_ARCHS[name]), ratio)
    fast = sparsify(model, exact=True, min_speedup=0.0)  # force the sparse kernels on every convertible layer
    x = torch.rand(1, 3, 13, 19)  # odd sizes: exercises the models' padding and the kernels' borders
    with torch.inference_mode():
        expected, got = model(x), fast(x)
    modes = set(layer_modes(fast).values())
    assert "sparse" in modes and modes <= {"sparse", "fused"}  # Swin blocks are fused with the C kernels
    assert got.shape == expected.shape
    torch.testing.assert_close(got, expected, atol=1e-4, rtol=0)


@pytest.mark.parametrize("kernel", [1, 3, 5])
@pytest.mark.parametrize("bias", [True, False])
def test_conv_matches_dense(kernel: int, bias: bool, kernel_path: str) -> None:
    conv = masked(nn.Conv2d(6, 10, kernel, padding=kernel // 2, bias=bias), 0.9)
    layer = SparseConv2d(conv, layers._Plan(min_speedup=0.0))
    x = torch.randn(2, 6, 9, 7)
    with torch.no_grad():
        torch.testing.assert_close(layer(x), conv(x), atol=1e-5, rtol=0)
    assert layer.mode == "sparse"


def test_linear_matches_dense_on_any_leading_shape(kernel_path: str) -> None:
    mlp = masked(nn.Sequential(nn.Linear(12, 20), nn.GELU(), nn.Linear(20, 12, bias=False)), 0.9)
    fast = sparsify(mlp, exact=True, min_speedup=0.0)
    x = torch.randn(2, 5, 3, 12)
    with torch.no_grad():
        torch.testing.assert_close(fast(x), mlp(x), atol=1e-5, rtol=0)
        torch.testing.assert_close(fast[0](x[0, 0]), mlp[0](x[0, 0]), atol=1e-5, rtol=0)


def test_conv_reading_few_input_channels_gathers_them(kernel_path: str) -> None:
    conv = masked(nn.Conv2d(16, 3, 3, padding=1), 0.5)
    with torch.no_grad():
        conv.weight[:, 4:] = 0  # only input channels 0-3 are read
    layer = SparseConv2d(conv, layers._Plan(min_speedup=0.0))
    assert layer.channels is not None and len(layer.channels) <= 4
    x = torch.randn(1, 16, 7, 9)
    with torch.no_grad():
        torch.testing.assert_close(layer(x), conv(x), atol=1e-5, rtol=0)
        torch.testing.assert_close(layer.dense_weight(), conv.weight, atol=0, rtol=0)


def test_all_zero_layers_give_the_bias(kernel_path: str) -> None:
    net = nn.Sequential(nn.Conv2d(4, 5, 3, padding=1), nn.Flatten(2), nn.Linear(12, 6))
    with torch.no_grad():
        for m in net:
            if hasattr(m, "weight"):
                m.weight.zero_()
    fast = sparsify(net, exact=True, min_speedup=0.0)
    x = torch.randn(2, 4, 3, 4)
    with torch.inference_mode():
        torch.testing.assert_close(fast(x), net(x), atol=1e-6, rtol=0)


def test_parallel_chunks_match_dense(monkeypatch: pytest.MonkeyPatch, kernel_path: str) -> None:
    """Tiny chunks on 2 threads: the pool path (several chunks per thread) gives the same result."""
    monkeypatch.setattr(layers, "ACC_BYTES", 64)  # one row per chunk
    monkeypatch.setattr(layers, "MIN_ROWS", 1)
    monkeypatch.setattr(layers, "NATIVE_IN_BYTES", 64)
    monkeypatch.setattr(threads, "PARALLEL_MIN_WORK", 0)  # use the pool even for tiny work
    ran_on = set()
    chunk_runner = threads.run_chunks

    def spy(fn, jobs, work, scratch):  # record the threads the chunks ran on
        chunk_runner(lambda job, buf: ran_on.add(threading.get_ident()) or fn(job, buf), jobs, work, scratch)

    monkeypatch.setattr(layers, "run_chunks", spy)
    net = masked(nn.Sequential(nn.Conv2d(4, 8, 3, padding=1), nn.Flatten(2), nn.Linear(30, 16)), 0.9)
    fast = sparsify(net, exact=True, min_speedup=0.0)
    x = torch.randn(3, 4, 5, 6)
    with threads.torch_threads(2), torch.inference_mode():
        torch.testing.assert_close(fast(x), net(x), atol=1e-5, rtol=0)
    assert ran_on


@pytest.mark.parametrize("kernel", [3, 5])
def test_c_kernel_tiles_rows_and_columns(monkeypatch: pytest.MonkeyPatch, kernel: int) -> None:
    """Narrow tiles of a few rows: every border case of the C kernel's padding copy, a narrower last tile,
    vector and scalar tails (widths 16, 7)."""
    if kernels.load() is None:
        pytest.skip("no C compiler")
    monkeypatch.setattr(layers, "TILE_COLS", 16)
    monkeypatch.setattr(layers, "MIN_ROWS", 2)
    monkeypatch.setattr(layers, "NATIVE_IN_BYTES", 64)
    conv = masked(nn.Conv2d(6, 9, kernel, padding=kernel // 2), 0.8)
    layer = SparseConv2d(conv, layers._Plan(min_speedup=0.0))
    x = torch.randn(2, 6, 7, 39)
    strided = torch.randn(2, 39, 7, 6).permute(0, 3, 2, 1)  # read in place, whatever the strides
    with torch.no_grad():
        torch.testing.assert_close(layer(x), conv(x), atol=1e-5, rtol=0)
        torch.testing.assert_close(layer(strided), conv(strided), atol=1e-5, rtol=0)
        channels_last = x.to(memory_format=torch.channels_last)
        torch.testing.assert_close(layer(channels_last), conv(x), atol=1e-5, rtol=0)
        wide = torch.randn(1, 6, 3, 300)  # 8 x 16 register blocks plus tails in one tile
        monkeypatch.setattr(layers, "TILE_COLS", 300)
        torch.testing.assert_close(layer(wide), conv(wide), atol=1e-5, rtol=0)


def test_chained_linears_match_dense(monkeypatch: pytest.MonkeyPatch, kernel_path: str) -> None:
    """The C kernel returns token-major tokens; the MKL path a channel-major (transposed) view. Either way
    the next layer, sparse or dense, reads it correctly."""
    monkeypatch.setattr(layers, "LINEAR_BUFFER_BYTES", 64)  # the C kernel: 16 tokens at a time
    mlp = masked(nn.Sequential(nn.Linear(12, 20), nn.Linear(20, 8), nn.GELU(), nn.Linear(8, 5)), 0.9)
    fast = sparsify(mlp, exact=True, min_speedup=0.0)
    x = torch.randn(3, 70, 12)  # 210 tokens: several chunks of 16 plus a tail
    with torch.inference_mode():
        hidden = fast[0](x)
        assert hidden.is_contiguous() == (kernel_path == "c")
        torch.testing.assert_close(fast(x), mlp(x), atol=1e-5, rtol=0)


def test_float64_runs_the_pytorch_kernels() -> None:
    net = masked(nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.Flatten(2), nn.Linear(20, 6)), 0.9).double()
    fast = sparsify(net, exact=True, min_speedup=0.0)
    x = torch.randn(2, 3, 4, 5, dtype=torch.float64)
    with torch.inference_mode():
        torch.testing.assert_close(fast(x), net(x), atol=1e-10, rtol=0)


def test_c_kernel_wrappers_refuse_out_of_bounds_access() -> None:
    if kernels.load() is None:
        pytest.skip("no C compiler")
    weights = kernels.OffsetCSR.build(torch.tensor([0, 1, 2]), torch.tensor([0, 8]), torch.tensor([1.0, 2.0]))
    with pytest.raises(ValueError, match="row pointers"):  # would read past the last value
        kernels.OffsetCSR.build(torch.tensor([0, 1, 3]), torch.tensor([0, 8]), torch.tensor([1.0, 2.0]))
    tokens, out, buffer = torch.arange(10.0).view(5, 2), torch.zeros(5, 2), torch.empty(32)
    kernels.linear_tokens(out, tokens, weights, torch.tensor([0.5, 0.0]), span=range(5), buffer=buffer, ld=8)
    assert out.tolist() == [[t * 2 + 0.5, 2 * (t * 2 + 1)] for t in range(5)]  # y0 = x0 + .5, y1 = 2 x1
    with pytest.raises(ValueError, match="buffer too small"):
        kernels.linear_tokens(out, tokens, weights, None, span=range(5), buffer=torch.empty(31), ld=8)
    with pytest.raises(ValueError, match="read outside"):
        kernels.linear_tokens(out, tokens, weights, None, span=range(5), buffer=torch.empty(28), ld=7)
    with pytest.raises(ValueError, match="do not fit"):
        kernels.linear_tokens(out, tokens, weights, None, span=range(6), buffer=buffer, ld=8)
    with pytest.raises(ValueError, match="float32"):
        kernels.linear_tokens(
            out.double(), tokens.double(), weights, None, span=range(5), buffer=buffer, ld=8
        )
    conv = SparseConv2d(nn.Conv2d(2, 3, 3, padding=1), layers._Plan(min_speedup=0.0))
    image, target = torch.randn(2, 5, 6), torch.empty(3, 5, 6)
    good = dict(kernel_size=3, rows=range(0, 5), cols=range(0, 6), tile_rows=5, plane=7 * 8, ld=8)
    kernels.conv_tiles(target, image, conv._offset_csr(56, 8)[0], None, buffer=torch.empty(2 * 56), **good)
    with pytest.raises(ValueError, match="buffer too small"):
        kernels.conv_tiles(target, image, conv._offset_csr(56, 8)[0], None, buffer=torch.empty(56), **good)
    with pytest.raises(ValueError, match="outside the 5x6 image"):
        bad = {**good, "rows": range(0, 6)}
        kernels.conv_tiles(target, image, conv._offset_csr(56, 8)[0], None, buffer=torch.empty(2 * 56), **bad)
    with pytest.raises(ValueError, match="channel list"):
        kernels.conv_tiles(target, image, conv._offset_csr(56, 8)[0], None, buffer=torch.empty(2 * 56),
                       channels=torch.tensor([0, 2]), **good)  # fmt: skip
    with pytest.raises(ValueError, match="2 group"):
        kernels.conv_tiles(target, image, conv._offset_csr(56, 8)[0], None, buffer=torch.empty(2 * 56),
                       groups=2, **good)  # fmt: skip


@pytest.mark.parametrize("ratio", [0.3, 0.9])
def test_c_kernel_groups_of_input_channels(ratio: float) -> None:
    """Dense enough layers run in groups of input channels (outputs accumulated group by group, bias in the
    first, epilogue after the last; also into pixel-shuffled outputs): the same result."""
    if kernels.load() is None:
        pytest.skip("no C compiler")
    conv = masked(nn.Conv2d(96, 12, 3, padding=1), ratio)
    layer = SparseConv2d(conv, layers._Plan(min_speedup=0.0))
    x, residual = torch.randn(2, 96, 7, 9), torch.randn(2, 12, 7, 9)
    with torch.inference_mode():
        got = layer(x, relu=True, scale=0.5, residual=residual)
        torch.testing.assert_close(got, residual + 0.5 * conv(x).relu(), atol=1e-5, rtol=0)
        expected = torch.pixel_shuffle(conv(x), 2)
        torch.testing.assert_close(layer(x, shuffle=2), expected, atol=1e-5, rtol=0)
    _, groups = layer._offsets[1]
    assert groups == round(96 * (1 - ratio) * 9 / layers.GROUP_NONZEROS[kernels.lanes()]) > 1


def test_kernel_builds_into_the_cache_or_falls_back(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    monkeypatch.setenv("ISS_CACHE_DIR", str(tmp_path))
    build = kernels.load.__wrapped__  # uncached
    if kernels._compiler() is not None:
        assert build() is not None
        assert len(list((tmp_path / "kernels").glob("spmm-*.so"))) == 1
    monkeypatch.setenv("ISS_NATIVE", "0")
    assert build() is None
    monkeypatch.setenv("ISS_NATIVE", "1")
    monkeypatch.setenv("CC", str(tmp_path / "no-such-compiler"))
    with pytest.warns(UserWarning, match="no C compiler"):
        assert build() is None
    failing = tmp_path / "failing-cc"
    failing.write_text("#!/bin/sh\necho 'cc: error: broken' >&2\nexit 1\n")
    failing.chmod(0o755)
    monkeypatch.setenv("CC", str(failing))
    with pytest.warns(UserWarning, match="could not build"):
        assert build() is None


def test_dense_and_unsupported_layers_stay_dense() -> None:
    net = nn.Sequential(
        masked(nn.Conv2d(4, 4, 3, padding=1), 0.95),
        nn.Conv2d(4, 4, 3, padding=1),  # no zeros
        masked(nn.Conv2d(4, 4, 3, stride=2, padding=1), 0.95),  # strided: no exact sparse kernel here
        masked(nn.Conv2d(4, 4, 3, padding=1, groups=2), 0.95),
        masked(nn.Conv2d(4, 4, 3, padding=0), 0.95),  # not "same"
    )
    fast = sparsify(net, exact=True, min_speedup=0.0)
    assert isinstance(fast[0], SparseConv2d)
    assert all(type(fast[i]) is nn.Conv2d for i in range(1, 5))


def test_layer_where_sparse_is_slower_falls_back(monkeypatch: pytest.MonkeyPatch) -> None:
    conv = masked(nn.Conv2d(8, 8, 3, padding=1), 0.99)
    slow_kernel = SparseConv2d._sparse_forward

    def slowed(self: SparseConv2d, x: torch.Tensor, epilogue: sparse.Epilogue) -> torch.Tensor:
        time.sleep(0.1)
        return slow_kernel(self, x, epilogue)

    monkeypatch.setattr(SparseConv2d, "_sparse_forward", slowed)
    fast = sparsify(nn.Sequential(conv), exact=True, min_speedup=1.0)
    x = torch.randn(1, 8, 6, 6)
    with torch.inference_mode():
        y = fast(x)
    assert layer_modes(fast) == {"0": "dense"}
    assert fast[0].csr is None  # the losing CSR copy is dropped
    torch.testing.assert_close(y, conv(x), atol=1e-5, rtol=0)


def test_measured_decision_prefers_sparse_when_it_is_much_faster(monkeypatch: pytest.MonkeyPatch) -> None:
    """The crossover is a measurement: slow the dense kernel down and sparse wins."""
    conv = masked(nn.Conv2d(8, 8, 3, padding=1), 0.99)
    dense_kernel = SparseConv2d._dense_forward

    def slowed(self: SparseConv2d, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        time.sleep(0.1)
        return dense_kernel(self, x, weight)

    monkeypatch.setattr(SparseConv2d, "_dense_forward", slowed)
    fast = sparsify(nn.Sequential(conv), exact=True)
    with torch.inference_mode():
        fast(torch.randn(1, 8, 6, 6))
    assert layer_modes(fast) == {"0": "sparse"}


def test_twin_layers_share_one_measurement(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = []
    timer = layers._time_pair
    monkeypatch.setattr(layers, "_time_pair", lambda *a: calls.append(1) or timer(*a))
    net = nn.Sequential(*(masked(nn.Conv2d(8, 8, 3, padding=1), 0.95, seed=i) for i in range(3)))
    fast = sparsify(net, exact=True)
    with torch.inference_mode():
        fast(torch.randn(1, 8, 10, 10))
    assert len(calls) == 1
    assert len(set(layer_modes(fast).values())) == 1


def test_forced_dense_keeps_outputs_and_drops_csr() -> None:
    net = masked(nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.Conv2d(8, 3, 3, padding=1)), 0.9)
    fast = sparsify(net, exact=True, min_speedup=math.inf)
    x = torch.rand(1, 3, 7, 5)
    with torch.inference_mode():
        torch.testing.assert_close(fast(x), net(x), atol=1e-5, rtol=0)
    assert set(layer_modes(fast).values()) == {"dense"}


def test_original_model_is_untouched() -> None:
    torch.manual_seed(0)
    model = masked(archs.build("edsr-l", 2, **TINY_ARCHS["edsr-l"]), 0.95)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    fast = sparsify(model, exact=True, min_speedup=0.0)
    with torch.inference_mode():
        fast(torch.rand(1, 3, 8, 8))
    assert fast is not model
    assert not any(isinstance(m, (SparseConv2d, SparseLinear)) for m in model.modules())
    after = model.state_dict()
    assert before.keys() == after.keys()
    assert all(torch.equal(before[k], after[k]) for k in before)
    assert fast.scale == model.scale


def test_rejects_bad_arguments_and_training_use() -> None:
    net = nn.Sequential(masked(nn.Linear(8, 8), 0.95))
    with pytest.raises(ValueError, match="min_speedup"):
        sparsify(net, min_speedup=-1)
    with pytest.raises(ValueError, match="threads"):
        sparsify(net, threads=0)
    fast = sparsify(net, exact=True, min_speedup=0.0)
    with pytest.raises(ValueError, match="inference-only"):
        fast(torch.randn(2, 8, requires_grad=True))


def test_half_tiles_stay_close_to_dense_and_exact_is_one_flag_away() -> None:
    """The default on AVX-512 keeps conv inputs as IEEE halves (products and sums in float32): outputs of a
    95%-sparse EDSR-L-shaped stack stay within 1e-3 relative of dense; ``exact=True`` restores float rounding;
    a tile with an input beyond half's range (65504) falls back to floats instead of becoming inf."""
    if kernels.load() is None or not kernels.half_tiles():
        pytest.skip("no C compiler, or a CPU without the half path (AVX-512)")
    torch.manual_seed(0)
    net = nn.Sequential(*(masked(nn.Conv2d(64, 64, 3, padding=1), 0.95) for _ in range(3)))
    x = torch.randn(1, 64, 24, 40) * 4
    with torch.inference_mode():
        dense = net(x)
        half = sparsify(net, min_speedup=0.0)(x)
        exact = sparsify(net, exact=True, min_speedup=0.0)(x)
        scale = dense.abs().max()
        assert 1e-6 < (half - dense).abs().max() / scale < 1e-3  # halves really used, and close
        assert (exact - dense).abs().max() / scale < 1e-5
        huge = x.clone()
        huge[0, 5, 3, 7] = 1e6  # beyond half's range: that tile is done in floats
        out = sparsify(net, min_speedup=0.0)(huge)
        assert torch.isfinite(out).all()
        torch.testing.assert_close(out, net(huge), rtol=1e-3, atol=1e-3 * net(huge).abs().max().item())


def _count_timings(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """A list that grows by one per call of the timing path (``layers._time_pair``)."""
    calls: list[int] = []
    timer = layers._time_pair
    monkeypatch.setattr(layers, "_time_pair", lambda *a: calls.append(1) or timer(*a))
    return calls


def test_clear_calls_run_sparse_without_timing(monkeypatch: pytest.MonkeyPatch) -> None:
    """A zoo-like model (every layer 95% zero, a real input size) decides without one timing: its first call
    costs a forward, not a timing per distinct layer."""
    if kernels.load() is None:
        pytest.skip("clear calls need the compiled C kernels")
    calls = _count_timings(monkeypatch)
    torch.manual_seed(0)
    fast = sparsify(masked(archs.build("swinir-light", 4), 0.95))
    with torch.inference_mode():
        fast(torch.rand(1, 3, 96, 96))
    assert calls == []
    assert set(layer_modes(fast).values()) <= {"sparse", "fused"}


def test_close_calls_are_still_timed(monkeypatch: pytest.MonkeyPatch) -> None:
    """Below ``CLEAR_ZEROS`` (or with little work per call) the choice is measured."""
    calls = _count_timings(monkeypatch)
    fast = sparsify(nn.Sequential(masked(nn.Conv2d(32, 32, 3, padding=1), 0.8)))
    with torch.inference_mode():
        fast(torch.rand(1, 32, 64, 64))
    assert len(calls) == 1
