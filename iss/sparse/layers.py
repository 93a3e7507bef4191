"""Sparse layers: mostly-zero Conv2d/Linear run with kernels that skip the zeros, timed against dense.

A dense kernel multiplies zeros as fast as anything else, so a pruned model is no faster until its layers
are swapped for kernels that only touch the non-zero weights. :func:`iss.sparsify` does that swap:

* ``nn.Conv2d`` (k x k, stride 1, "same" zero padding, groups 1) becomes :class:`SparseConv2d`.
* ``nn.Linear`` becomes :class:`SparseLinear`.

Both run the C kernel of :mod:`.kernels` (built on first use with the system compiler): per tile of the
input that fits a core's L2 cache, zero-padded (convs) or transposed to channel-major (Linears), it streams
each output channel's non-zeros while a row of outputs stays in vector registers. Cost ~ non-zeros
instead of weights, and the tensors keep their usual layout between layers. Without a C compiler (or for
float64) the same layers use a pure-PyTorch path: one MKL CSR product per kernel tap on shifted flat views
of the padded input (no im2col), and channel-major MKL products for Linears; about half as fast.

Whether sparse wins depends on the density, the layer shape, the input size and the thread count. So each
converted layer decides on its first call: a clear call (very sparse, enough work, the C kernel) runs sparse;
otherwise it reuses this machine's timing of the same layer and input from an earlier process, or times its
dense and sparse kernels, alternately, on that call's input and keeps the faster one (layers with the same
shape, density, input size and thread count share one measurement; :mod:`.decisions`). The representation
not chosen is dropped. Inference only, CPU only. With several threads the
tiles are spread over a small pool of Python threads (the kernels release the GIL): this avoids an OpenMP
barrier per call, which stalls badly on a shared CPU (:mod:`.threads`).
"""

from __future__ import annotations

import functools
import math
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from . import decisions, kernels
from .threads import pool_threads, run_chunks, torch_threads

__all__ = ["Epilogue", "SparseConv2d", "SparseLinear", "zero_fraction"]

ACC_BYTES = 2 << 20  # MKL path: conv output chunk, kept in cache across the taps (best of 1-8 MiB on Zen 4)
IN_BYTES = 4 << 20  # MKL path: padded input rows of one conv chunk
NATIVE_IN_BYTES = 1 << 20  # C kernel: input of one tile, read once per output channel (~ a core's L2)
MIN_ROWS = 4  # C kernel: rows per tile at least, so the 2p halo rows copied stay a small overhead
TILE_COLS = 128  # C kernel: tile width (a multiple of its 8 x 16-float register block)
LINEAR_BUFFER_BYTES = 512 << 10  # C kernel: one chunk of tokens, in and out, transposed (in L2)
LANES = 16  # the C kernel's vector width, in floats
# C kernel: non-zeros per output row in one group of input channels (see _offset_csr), by its vector width
GROUP_NONZEROS = {16: 48, 8: 24, 4: 24}
COMPACT_BELOW = 0.75  # gather the used input channels first when fewer than this fraction have a non-zero


def read_channels(weight: Tensor) -> Tensor:
    """The input channels that some weight of a conv's [out, in, k, k] ``weight`` reads."""
    return torch.nonzero(weight.abs().sum((0, 2, 3))).flatten()


def zero_fraction(weight: Tensor) -> float:
    """Fraction of exactly-zero entries of ``weight`` (the layer's pruning ratio)."""
    if weight.numel() == 0:
        return 0.0
    return 1.0 - torch.count_nonzero(weight).item() / weight.numel()


def _to_csr(matrix: Tensor) -> Tensor:
    """2-D dense matrix -> CSR with int32 indices (MKL's native index type, 1/3 less memory than int64)."""
    with warnings.catch_warnings():  # "CSR support is in beta" / "invariant checks disabled": noise for users
        warnings.filterwarnings("ignore", message="Sparse", category=UserWarning)
        csr = matrix.detach().contiguous().to_sparse_csr()
        rows, cols = csr.crow_indices().to(torch.int32), csr.col_indices().to(torch.int32)
        return torch.sparse_csr_tensor(rows, cols, csr.values(), csr.shape)


def _time_pair(
    dense: Callable[[], object], sparse: Callable[[], object], budget_s: float
) -> tuple[float, float]:
    """Best-of wall times of ``dense`` and ``sparse``, run alternately so machine load hits both alike."""
    best_d = best_s = math.inf
    spent, rounds = 0.0, 0
    while rounds < 2 or (rounds < 5 and spent < budget_s):  # round 0 is a warm-up (allocations, oneDNN setup)
        t0 = time.perf_counter()
        dense()
        t1 = time.perf_counter()
        sparse()
        t2 = time.perf_counter()
        if rounds > 0:
            best_d, best_s = min(best_d, t1 - t0), min(best_s, t2 - t1)
        spent += t2 - t0
        rounds += 1
    return best_d, best_s


def _fill_bias(acc: Tensor, bias: Tensor | None) -> Tensor:
    """Initialise the accumulator ``acc`` [out, cols] with the bias column (or zeros)."""
    return acc.zero_() if bias is None else acc.copy_(bias.expand_as(acc))


@dataclass(frozen=True)
class Epilogue:
    """What a layer does to its output in the same pass: ``shuffle(relu(y) if relu else y) * scale +
    residual`` for a conv (EDSR's ReLU after conv1, ``x + conv2(...) * res_scale``, the upsamplers' pixel
    shuffle), saving passes over the activations."""

    relu: bool = False
    scale: float = 1.0
    residual: Tensor | None = None
    shuffle: int = 1  # pixel-shuffle factor

    def apply(self, y: Tensor) -> Tensor:
        """The same with torch ops on a finished output ``y`` (modified in place)."""
        if self.relu:
            y = F.relu_(y)
        if self.shuffle > 1:
            y = F.pixel_shuffle(y, self.shuffle)
        if self.residual is not None:
            return torch.add(self.residual, y, alpha=self.scale)
        return y if self.scale == 1 else y.mul_(self.scale)


PLAIN = Epilogue()


@dataclass
class _Plan:
    """Crossover settings and decisions shared by the layers of one :func:`sparsify` call."""

    min_speedup: float = 1.0
    threads: int | None = None
    exact: bool = True  # False: the C kernel may keep conv inputs as IEEE halves (kernels.half_tiles())
    budget_s: float = 0.2
    decisions: dict[tuple, bool] = field(default_factory=dict)  # layer signature -> use sparse

    def use_sparse(
        self, key: tuple, dense: Callable[[], object], sparse: Callable[[], object], clear: bool = False
    ) -> bool:
        """Decision for layers with signature ``key``, made once: sparse for a ``clear`` call
        (:func:`.decisions.clear`), else from the dense over sparse time of ``key`` (``_speedup``)."""
        if key not in self.decisions:
            if self.min_speedup <= 0 or clear:
                self.decisions[key] = True
            elif math.isinf(self.min_speedup):
                self.decisions[key] = False
            else:
                self.decisions[key] = self._speedup(key, dense, sparse) >= self.min_speedup
        return self.decisions[key]

    def _speedup(self, key: tuple, dense: Callable[[], object], sparse: Callable[[], object]) -> float:
        """Dense over sparse time for ``key``: as first measured on this machine, so that every process
        makes the same choice and gives the same bytes (:mod:`.decisions`), else timed now."""
        key = (*key, self.threads, self.exact)
        stored = decisions.recall(key)
        if stored is not None:
            return stored
        with torch_threads(self.threads), torch.no_grad():
            t_dense, t_sparse = _time_pair(dense, sparse, self.budget_s)
        return decisions.remember(key, t_dense / max(t_sparse, 1e-12))


class _SparseBase(nn.Module):
    """Shared state of the sparse layers: the bias, the optional dense fallback weight, the decision."""

    def __init__(self, bias: Tensor | None, zeros: float, plan: _Plan) -> None:
        super().__init__()
        self.bias = None if bias is None else bias.detach().clone()
        self.zeros = zeros
        self.mode = "undecided"  # -> "sparse" or "dense" on the first forward
        self._plan = plan
        self._weight: Tensor | None = None  # dense weight, only kept when dense was faster

    def forward(self, x: Tensor) -> Tensor:
        """Run the faster kernel (deciding which on the first call)."""
        return self._forward(x, PLAIN)

    def _forward(self, x: Tensor, epilogue: Epilogue) -> Tensor:
        if x.device.type != "cpu":
            raise ValueError(
                f"sparse kernels run on CPU only, got a {x.device.type} input: use the dense model"
            )
        if torch.is_grad_enabled() and x.requires_grad:
            raise ValueError("sparse layers are inference-only: call them under torch.inference_mode()")
        if self.mode == "undecided":
            self._decide((*self._signature(x), round(self.zeros, 3), x.dtype, pool_threads()), x)
        if self.mode == "dense":
            return epilogue.apply(self._dense_forward(x, self._weight))
        return self._sparse_forward(x, epilogue)

    def _decide(self, key: tuple, x: Tensor) -> None:
        """Time dense vs sparse on ``x`` (or reuse a twin layer's result); drop the losing representation."""

        @functools.cache
        def weight() -> Tensor:  # rebuilt only if timed or kept: it is big, and garbage after a sparse choice
            return self.dense_weight().to(x.dtype)

        clear = decisions.clear(self.zeros, self._work(x), x, self._plan.min_speedup)
        use_sparse = self._plan.use_sparse(
            key, lambda: self._dense_forward(x, weight()), lambda: self._sparse_forward(x, PLAIN), clear
        )
        self.mode = "sparse" if use_sparse else "dense"
        if self.mode == "dense":
            self._weight = weight()
            self._drop_sparse()

    def extra_repr(self) -> str:
        return f"zeros={self.zeros:.3f}, mode={self.mode}"

    # Implemented by the layers:
    def dense_weight(self) -> Tensor:
        raise NotImplementedError

    def _signature(self, x: Tensor) -> tuple:
        raise NotImplementedError

    def _work(self, x: Tensor) -> float:
        """Dense multiply-adds of one call on ``x``."""
        raise NotImplementedError

    def _dense_forward(self, x: Tensor, weight: Tensor) -> Tensor:
        raise NotImplementedError

    def _sparse_forward(self, x: Tensor, epilogue: Epilogue) -> Tensor:
        raise NotImplementedError

    def _drop_sparse(self) -> None:
        raise NotImplementedError


class SparseConv2d(_SparseBase):
    """k x k stride-1 'same' convolution that only multiplies the non-zero weights (see the module doc)."""

    def __init__(self, conv: nn.Conv2d, plan: _Plan | None = None) -> None:
        if not is_convertible(conv):
            raise ValueError(
                f"cannot convert {conv}: need stride 1, dilation 1, groups 1, 'same' zero padding"
            )
        super().__init__(conv.bias, zero_fraction(conv.weight), plan or _Plan())
        self.in_channels, self.out_channels = conv.in_channels, conv.out_channels
        self.kernel_size = conv.kernel_size[0]
        weight = conv.weight.detach()
        # Input channels some weight reads; when few are, only those are gathered and padded (e.g. conv_last).
        used = read_channels(weight)
        self.channels = used if len(used) < COMPACT_BELOW * self.in_channels else None
        if self.channels is not None:
            weight = weight[:, self.channels]
        self.csr: Tensor | None = _to_csr(weight.reshape(self.out_channels, -1))  # column = channel*k*k + tap
        self._offsets: tuple[tuple[int, int], tuple[kernels.OffsetCSR, int]] | None = None  # C: (plane,ld) ->
        self._taps: list[tuple[int, Tensor]] | None = None  # MKL path: (tap, CSR [out, in]) per non-empty tap

    def forward(
        self,
        x: Tensor,
        *,
        relu: bool = False,
        scale: float = 1.0,
        residual: Tensor | None = None,
        shuffle: int = 1,
    ) -> Tensor:
        """``pixel_shuffle(relu(conv(x)) if relu else conv(x), shuffle) * scale + residual``, all in the
        C kernel's single pass over the output (see :class:`Epilogue`)."""
        return self._forward(x, Epilogue(relu, scale, residual, shuffle))

    def dense_weight(self) -> Tensor:
        """The dense [out, in, k, k] weight (rebuilt from the CSR)."""
        k = self.kernel_size
        weight = torch.zeros(self.out_channels, self.in_channels, k, k, dtype=self.csr.dtype)
        used = self.csr.to_dense().view(self.out_channels, -1, k, k)
        weight[:, self.channels if self.channels is not None else slice(None)] = used
        return weight

    def _signature(self, x: Tensor) -> tuple:
        return ("conv", self.in_channels, self.out_channels, self.kernel_size, *x.shape)

    def _work(self, x: Tensor) -> float:
        return x[:, :1].numel() * self.out_channels * self.in_channels * self.kernel_size**2

    def _drop_sparse(self) -> None:
        self.csr, self._offsets, self._taps = None, None, None

    def _dense_forward(self, x: Tensor, weight: Tensor) -> Tensor:
        return F.conv2d(x, weight, self.bias, padding=self.kernel_size // 2)

    def _offset_csr(self, plane: int, ld: int) -> tuple[kernels.OffsetCSR, int]:
        """The weights for the C kernel reading a padded [channels, plane] buffer with rows ``ld`` apart,
        and in how many groups of input channels (kept for the last layout only: it changes only with the
        input width, below ``TILE_COLS``).

        Group g holds the CSR rows of all outputs over its channels (group-major, ``groups * out + 1`` row
        pointers): the kernel runs the groups one after the other, so the part of the buffer it reads stays
        in a nearer cache. Groups are sized for ``GROUP_NONZEROS`` non-zeros per output row; denser groups
        would not fit, sparser ones spend more on re-reading the outputs than they save (measured on Zen 3,
        AVX2, 24: 1.4x at 90% zeros, 1.25x at 95%, none at 99% for 256 channels; on Zen 5, AVX-512, 48
        beat 24 by 1.05-1.1x on EDSR-L at 95%: benchmarks/results/kernel_ab_groups.txt).
        """
        if self._offsets is None or self._offsets[0] != (plane, ld):
            k = self.kernel_size
            cols, values = self.csr.col_indices().long(), self.csr.values()
            channel, tap = cols // (k * k), cols % (k * k)
            offsets = channel * plane + (tap // k) * ld + tap % k
            cin = self.in_channels if self.channels is None else len(self.channels)
            density = values.numel() / max(1, self.out_channels * cin * k * k)
            groups = max(1, round(cin * density * k * k / GROUP_NONZEROS[kernels.lanes()]))
            size = math.ceil(cin / groups)
            rows = torch.repeat_interleave(
                torch.arange(self.out_channels), self.csr.crow_indices().diff().long()
            )
            key = (channel // size) * self.out_channels + rows
            order = torch.sort(key, stable=True).indices  # a row's non-zeros keep their channel/tap order
            counts = torch.bincount(key, minlength=groups * self.out_channels)
            rowptr = torch.cat([counts.new_zeros(1), counts.cumsum(0)])
            weights = kernels.OffsetCSR.build(rowptr, offsets[order], values[order])
            self._offsets = (plane, ld), (weights, groups)
        return self._offsets[1]

    def _tap_csrs(self) -> list[tuple[int, Tensor]]:
        """MKL path: one [out, in] CSR per kernel tap that has a non-zero, built on first use."""
        if self._taps is None:
            kk = self.kernel_size**2
            dense = self.csr.to_dense().view(self.out_channels, -1, kk)
            self._taps = [(t, _to_csr(dense[:, :, t])) for t in range(kk) if dense[:, :, t].any()]
        return self._taps

    def _sparse_forward(self, x: Tensor, epilogue: Epilogue) -> Tensor:
        """Sparse conv over chunks of output rows, each reading its input rows from a small padded buffer.

        Per tile of output rows (and columns), the input it reads is copied zero-padded into a reused buffer
        that stays in cache. The C kernel does that copy and the product, writing the output directly.
        Without it (no compiler, or not float32) the k*k MKL CSR products run on shifted flat slices of the
        buffer (one more zero row keeps them in bounds) into an accumulator that is copied out.
        """
        n, _, h, w = x.shape
        bias = None if self.bias is None else self.bias.to(x.dtype)
        s, residual, empty = epilogue.shuffle, epilogue.residual, self.csr.values().numel() == 0
        shape = (n, self.out_channels // s**2, h * s, w * s)
        if (
            _native(x)
            and not empty
            and (residual is None or (residual.is_contiguous() and residual.shape == shape))
        ):
            out = x.new_empty(shape)
            self._native_forward(x, out, bias, epilogue)
            return out
        out = x.new_empty(n, self.out_channels, h, w)
        if empty:  # all weights are zero
            _fill_bias(out.view(n, self.out_channels, -1), _column(bias))
        elif _native(x):
            self._native_forward(x, out, bias, PLAIN)
        else:
            self._mkl_forward(x, out, bias)
        return epilogue.apply(out)

    def _native_forward(self, x: Tensor, out: Tensor, bias: Tensor | None, epilogue: Epilogue) -> None:
        """C kernel over tiles of at most ``TILE_COLS`` columns and enough rows to fill its input buffer."""
        n, _, h, w = x.shape
        k, p = self.kernel_size, self.kernel_size // 2
        cin = self.in_channels if self.channels is None else len(self.channels)
        cols = min(w, TILE_COLS)
        ld = cols + 2 * p
        tiles_across = math.ceil(w / cols)
        threads = pool_threads()
        # rows per pool job: all of them on one thread, else at least 4 jobs per thread, for balance
        job_rows = h if threads == 1 else min(h, math.ceil(n * h * tiles_across / (4 * threads)))
        cache_rows = max(MIN_ROWS, NATIVE_IN_BYTES // (cin * ld * x.element_size()) - 2 * p)
        half = not self._plan.exact and kernels.half_tiles()
        rows = min(job_rows, cache_rows)
        plane = (cache_rows + 2 * p) * ld  # not from rows: the weights' offsets then depend on the width only
        weights, groups = self._offset_csr(plane, ld)

        residuals = [None] * n if epilogue.residual is None else epilogue.residual

        def job(start: tuple[int, int, int], buffers: list[Tensor]) -> None:
            i, r0, c0 = start
            rows_ = range(r0, min(h, r0 + job_rows))
            kernels.conv_tiles(out[i], x[i], weights, bias, kernel_size=k, rows=rows_,
                               cols=range(c0, min(w, c0 + cols)), tile_rows=rows, buffer=buffers[0],
                               plane=plane, ld=ld, channels=self.channels, groups=groups, relu=epilogue.relu,
                               scale=epilogue.scale, residual=residuals[i], shuffle=epilogue.shuffle,
                               half=half)  # fmt: skip

        starts = [(i, r0, c0) for i in range(n) for r0 in range(0, h, job_rows) for c0 in range(0, w, cols)]
        work = n * h * w * (self.csr.values().numel() + cin + self.out_channels)  # FMAs, copying, writing
        size = cin * plane + (epilogue.shuffle * rows * cols if epilogue.shuffle > 1 else 0)  # floats
        run_chunks(job, starts, work, lambda: [x.new_empty(size)])

    def _mkl_forward(self, x: Tensor, out: Tensor, bias: Tensor | None) -> None:
        """k*k MKL CSR products per chunk of rows, on shifted flat slices of a padded copy of its input."""
        n, _, h, w = x.shape
        k, p = self.kernel_size, self.kernel_size // 2
        wp, cin = w + 2 * p, self.in_channels if self.channels is None else len(self.channels)
        itemsize = x.element_size()
        rows = max(
            1,
            min(
                ACC_BYTES // (self.out_channels * wp * itemsize),
                IN_BYTES // (cin * wp * itemsize) - 2 * p - 1,
            ),
        )
        threads = pool_threads()
        if threads > 1:  # at least 4 chunks per thread, for balance
            rows = min(rows, max(1, math.ceil(n * h / (4 * threads))))
        taps = [((t // k) * wp + t % k, tap) for t, tap in self._tap_csrs()]

        def scratch() -> list[Tensor]:
            gathered = cin * (rows + 2 * p) * w * (self.channels is not None)
            sizes = (cin * (rows + 2 * p + 1) * wp, self.out_channels * rows * wp, gathered)
            return [x.new_empty(size) for size in sizes]

        def chunk(job: tuple[int, int], buffers: list[Tensor]) -> None:
            i, r0 = job
            r1 = min(h, r0 + rows)
            padded = self._pad_rows(x[i], r0, r1, buffers[0].view(cin, -1, wp), buffers[2])
            flat = padded.view(cin, -1)
            acc = buffers[1][: self.out_channels * (r1 - r0) * wp].view(self.out_channels, -1)
            _fill_bias(acc, _column(bias))
            for offset, tap in taps:
                acc.addmm_(tap, flat[:, offset : offset + acc.shape[1]])
            out[i, :, r0:r1] = acc.view(self.out_channels, r1 - r0, wp)[..., :w]

        fmas = n * h * w * self.csr.values().numel()
        run_chunks(chunk, [(i, r0) for i in range(n) for r0 in range(0, h, rows)], fmas, scratch)

    def _pad_rows(self, image: Tensor, r0: int, r1: int, padded: Tensor, gathered: Tensor) -> Tensor:
        """Copy the input rows that output rows [r0, r1) read into ``padded`` [in, rows + 2p + 1, w + 2p],
        zero-padded; returns ``padded``. Rows beyond ``r1 - r0 + 2p + 1`` are left as they are (unread)."""
        h, w = image.shape[-2:]
        p = self.kernel_size // 2
        lo, hi = max(0, r0 - p), min(h, r1 + p)  # input rows read; buffer row 0 is input row r0 - p
        top, end = lo - (r0 - p), r1 - r0 + 2 * p + 1
        padded[:, :top].zero_()
        padded[:, top + hi - lo : end].zero_()
        padded[:, top : top + hi - lo, :p].zero_()
        padded[:, top : top + hi - lo, p + w :].zero_()
        src = image[:, lo:hi]
        if self.channels is not None:
            target = gathered[: len(self.channels) * (hi - lo) * w].view(len(self.channels), hi - lo, w)
            src = torch.index_select(src, 0, self.channels, out=target)
        padded[:, top : top + hi - lo, p : p + w] = src
        return padded


class SparseLinear(_SparseBase):
    """Linear layer computed as ``W_csr @ x^T`` on channel-major copies of chunks of the tokens."""

    def __init__(self, linear: nn.Linear, plan: _Plan | None = None) -> None:
        super().__init__(linear.bias, zero_fraction(linear.weight), plan or _Plan())
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self.csr: Tensor | None = _to_csr(linear.weight)
        self._offsets: tuple[int, kernels.OffsetCSR] | None = None  # C: last buffer row length, weights

    def dense_weight(self) -> Tensor:
        """The dense [out, in] weight (rebuilt from CSR)."""
        return self.csr.to_dense()

    def _signature(self, x: Tensor) -> tuple:
        return ("linear", self.in_features, self.out_features, x.numel() // self.in_features)

    def _work(self, x: Tensor) -> float:
        return x.numel() * self.out_features

    def _drop_sparse(self) -> None:
        self.csr, self._offsets = None, None

    def _dense_forward(self, x: Tensor, weight: Tensor) -> Tensor:
        return F.linear(x, weight, self.bias)

    def _offset_csr(self, ld: int) -> kernels.OffsetCSR:
        """The weights for the C kernel reading channel-major tokens with rows ``ld`` apart (last ld only)."""
        if self._offsets is None or self._offsets[0] != ld:
            offsets = self.csr.col_indices().long() * ld
            self._offsets = ld, kernels.OffsetCSR.build(self.csr.crow_indices(), offsets, self.csr.values())
        return self._offsets[1]

    def _sparse_forward(self, x: Tensor, epilogue: Epilogue) -> Tensor:
        bias = None if self.bias is None else self.bias.to(x.dtype)
        out = self._native_forward(x, bias) if _native(x) else self._mkl_forward(x, bias)
        return epilogue.apply(out)

    def _native_forward(self, x: Tensor, bias: Tensor | None) -> Tensor:
        """C kernel over chunks of tokens, transposed to channel-major and back inside it (in cache)."""
        tokens = x.reshape(-1, self.in_features).contiguous()
        total = tokens.shape[0]
        out = x.new_empty(total, self.out_features)
        width = self.in_features + self.out_features
        ld = min(total, max(LANES, LINEAR_BUFFER_BYTES // (width * x.element_size()) // LANES * LANES))
        threads = pool_threads()
        # tokens per pool job: all of them on one thread, else at least 4 jobs per thread, for balance
        span = total if threads == 1 else LANES * math.ceil(total / (4 * threads * LANES))
        weights = self._offset_csr(ld)

        def job(start: int, buffers: list[Tensor]) -> None:
            tokens_range = range(start, min(total, start + span))
            kernels.linear_tokens(out, tokens, weights, bias, span=tokens_range, buffer=buffers[0], ld=ld)

        work = total * (self.csr.values().numel() + width)  # multiply-adds, plus the transposes
        run_chunks(job, range(0, total, span), work, lambda: [x.new_empty(width * ld)])
        return out.view(*x.shape[:-1], self.out_features)

    def _mkl_forward(self, x: Tensor, bias: Tensor | None) -> Tensor:
        """``(W @ x^T)^T``, returned as a transposed view of the channel-major [out, tokens] result.

        The tokens of each chunk are copied channel-major into a reused buffer (MKL wants a row-major right
        operand; torch would otherwise make that copy itself, inside the pool threads) and the product goes
        through a reused accumulator; the result stays channel-major, so dense consumers see an ordinary
        (transposed) [..., out] tensor.
        """
        tokens = x.reshape(-1, self.in_features)
        total = tokens.shape[0]
        out = x.new_empty(self.out_features, total)
        threads = pool_threads()
        step = total if threads == 1 else max(1, math.ceil(total / (4 * threads)))

        def scratch() -> list[Tensor]:
            return [
                x.new_empty(self.in_features * step),
                x.new_empty(self.out_features * step * (step < total)),
            ]

        def chunk(start: int, buffers: list[Tensor]) -> None:
            part = tokens[start : start + step]
            channel_major = buffers[0][: part.numel()].view(self.in_features, -1).copy_(part.t())
            if part.shape[0] == total:  # one chunk: accumulate in place
                _fill_bias(out, _column(bias)).addmm_(self.csr, channel_major)
                return
            acc = buffers[1][: self.out_features * part.shape[0]].view(self.out_features, -1)
            out[:, start : start + part.shape[0]] = _fill_bias(acc, _column(bias)).addmm_(
                self.csr, channel_major
            )

        run_chunks(chunk, range(0, total, step), total * self.csr.values().numel(), scratch)
        return out.t().view(*x.shape[:-1], self.out_features)


def _native(x: Tensor) -> bool:
    """Whether the compiled kernel runs on ``x`` (float32 and the kernel could be built)."""
    return x.dtype == torch.float32 and kernels.load() is not None


def _column(bias: Tensor | None) -> Tensor | None:
    return None if bias is None else bias.view(-1, 1)


def is_convertible(module: nn.Module) -> bool:
    """Whether ``module`` is a layer type/config that a sparse kernel here replaces exactly."""
    if isinstance(module, nn.Linear):
        return True
    if type(module) is not nn.Conv2d:
        return False
    k = module.kernel_size
    return (
        k[0] == k[1]
        and k[0] % 2 == 1
        and module.stride == (1, 1)
        and module.dilation == (1, 1)
        and module.groups == 1
        and module.padding_mode == "zeros"
        and module.padding in ((k[0] // 2, k[0] // 2), "same")
    )
