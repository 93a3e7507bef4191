"""Whole blocks of a :func:`iss.sparsify`-ed model in one pass: what is left once the pruned layers are fast.

With the convs and Linears sparse, most of the remaining time is the ops between them, run by PyTorch one
at a time, each reading and writing a full activation tensor:

* EDSR's residual block, ``x + conv2(relu(conv1(x))) * res_scale``: the ReLU, the scaling and the residual
  add are done by the sparse conv kernel as it stores its outputs (:class:`SparseResidualBlock`).
* A conv followed by a pixel shuffle (the upsamplers of EDSR and SwinIR): the kernel stores its outputs
  where the shuffle puts them (:class:`SparseConvShuffle`); at x4 that saves copying the largest tensors.
* The last conv of EDSR and CAT-R reads a few of the upsampler's channels when it is sparse (3 outputs: a
  random 99% mask keeps weights for about a quarter of them): the upsampler's last conv then computes only
  those, and the last conv reads them as its whole input (:func:`_drop_unread_channels`). That conv writes
  the model's largest tensor.
* SwinIR's residual group adds its input, token-major, to its conv's channel-major output: in C, transposing
  a block at a time in registers (:class:`FusedRSTB`). Its patch embedding, a LayerNorm of the first conv's
  output as tokens, is one such pass too (:class:`FusedPatchEmbed`).
* SwinIR's transformer block (LayerNorm, cyclic shift, window partition, attention with its position bias and
  mask, softmax, GELU, residuals): ``csrc/swin.c`` runs the whole block per 8x8 window on a channel-major copy
  that stays in cache (:class:`FusedSwinBlock`), with the sparse Linears inside.
* CAT's block attends in 4x16 windows with half its channels and in 16x4 windows with the other half, so no
  one window holds a token's whole block: its attention runs per window in C (the same code, gathering q, k
  and v from the qkv rows), its MLP half per chunk of tokens, with the hidden layer in cache
  (:class:`FusedCATBlock`).

Like the layers, a fused Swin or CAT block decides on its first call: fused when its Linears are all clear
calls (:mod:`.decisions`), else by a timing against the per-layer path (this machine's from an earlier
process, or measured then), keeping the faster (EDSR's fusion cannot lose: it is the same kernel, minus
passes). Both need the compiled kernels; without them the per-layer path runs unchanged.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import Tensor, nn

from iss.archs.cat import CATBlock, RectWindowAttention
from iss.archs.common import shifted_window_mask, to_image, to_tokens
from iss.archs.edsr import ResidualBlock
from iss.archs.swinir import RSTB, PatchEmbed, SwinTransformerBlock

from . import decisions, kernels
from .layers import LANES, LINEAR_BUFFER_BYTES, SparseConv2d, SparseLinear, _Plan, read_channels
from .threads import pool_threads, run_chunks

__all__ = [
    "FusedCATBlock",
    "FusedPatchEmbed",
    "FusedRSTB",
    "FusedSwinBlock",
    "SparseConvShuffle",
    "SparseResidualBlock",
    "fuse",
]


class SparseResidualBlock(nn.Module):
    """EDSR's residual block with the ReLU, scaling and residual add done inside the sparse convs."""

    def __init__(self, block: ResidualBlock) -> None:
        super().__init__()
        self.conv1, self.conv2, self.res_scale = block.conv1, block.conv2, block.res_scale

    def forward(self, x: Tensor) -> Tensor:
        return self.conv2(self.conv1(x, relu=True), scale=self.res_scale, residual=x)


class SparseConvShuffle(nn.Module):
    """``pixel_shuffle(conv(x), factor)`` with the shuffle done by the sparse conv kernel's stores."""

    def __init__(self, conv: SparseConv2d, factor: int) -> None:
        super().__init__()
        self.conv, self.factor = conv, factor

    def forward(self, x: Tensor) -> Tensor:
        return self.conv(x, shuffle=self.factor)


class FusedRSTB(nn.Module):
    """SwinIR's residual group, ``x + to_tokens(conv(to_image(blocks(x))))``, the residual added to the conv's
    output in C (``iss_add_tokens``) rather than by torch's strided add of a transposed view."""

    def __init__(self, group: RSTB) -> None:
        super().__init__()
        self.residual_group, self.conv = group.residual_group, group.conv

    def forward(self, x: Tensor, size: tuple[int, int]) -> Tensor:
        y = self.conv(to_image(self.residual_group(x, size), size))
        if not (x.dtype == y.dtype == torch.float32 and x.is_contiguous() and y.is_contiguous()):
            return x + to_tokens(y)  # float64, or a dense conv's channels-last output
        out = torch.empty_like(x)
        n = x.shape[1]
        for i in range(x.shape[0]):
            kernels.add_tokens(out[i], x[i], y[i].view(-1, n), span=range(n))
        return out


class FusedPatchEmbed(nn.Module):
    """SwinIR's patch embedding, ``LayerNorm(to_tokens(x))``, in one pass in C (``iss_norm_tokens``): torch
    made a transposed copy of the image, then normalised it."""

    def __init__(self, embed: PatchEmbed) -> None:
        super().__init__()
        self.norm = embed.norm

    def forward(self, x: Tensor) -> Tensor:
        norm = self.norm
        if not (x.dtype == torch.float32 and x.is_contiguous() and norm.weight.dtype == torch.float32):
            return norm(to_tokens(x))
        n, c = x.shape[0], x.shape[1]
        out = x.new_empty(n, x[0, 0].numel(), c)
        for i in range(n):
            kernels.norm_tokens(
                out[i], x[i].view(c, -1), norm.weight, norm.bias, norm.eps, span=range(out.shape[1])
            )
        return out


class FusedSwinBlock(nn.Module):
    """A Swin transformer block run by ``iss_swin_windows`` (one pass per window), or by the wrapped block
    (its Linears sparse layer by layer) when that measured faster on the first call."""

    def __init__(self, block: SwinTransformerBlock, plan: _Plan) -> None:
        super().__init__()
        self.block: SwinTransformerBlock | None = block
        self.mode = "undecided"  # -> "fused" or "layers"
        self._plan = plan
        self._weights: kernels.SwinBlock | None = _swin_weights(block)

    def forward(self, x: Tensor, size: tuple[int, int]) -> Tensor:
        if torch.is_grad_enabled() and x.requires_grad:
            raise ValueError("fused blocks are inference-only: call them under torch.inference_mode()")
        if x.dtype != torch.float32 and self.block is not None:  # the kernel is float32-only
            return self.block(x, size)
        if self.mode == "undecided":
            self._decide(x, size)
        if self.mode == "layers":
            return self.block(x, size)
        return self._fused(x, size)

    def _decide(self, x: Tensor, size: tuple[int, int]) -> None:
        """Time fused against per-layer on ``x`` (or reuse a twin block's result); drop the loser."""
        c = x.shape[-1]
        zeros = tuple(round(layer.zeros, 3) for layer in _linears(self.block))
        key = ("swin", c, self._weights.heads, self._weights.window_size, self._weights.shift > 0, *size,
               x.shape[0], zeros, pool_threads())  # fmt: skip
        clear = _clear(_linears(self.block), x, self._plan)
        use_fused = self._plan.use_sparse(
            key, lambda: self.block(x, size), lambda: self._fused(x, size), clear
        )
        self.mode = "fused" if use_fused else "layers"
        if use_fused:
            self.block = None
        else:
            self._weights = None

    def _fused(self, x: Tensor, size: tuple[int, int]) -> Tensor:
        """Every window of every image through ``iss_swin_windows``: one call per pool thread and image, the
        threads claiming windows in C (a job per few windows spent more time in Python than in the kernel)."""
        weights, (h, w) = self._weights, size
        if x.device.type != "cpu" or x.dtype != torch.float32:
            raise ValueError(f"the fused Swin block runs float32 on CPU, got {x.dtype} on {x.device.type}")
        tokens = x.contiguous()
        out = torch.empty_like(tokens)
        count = (h // weights.window_size) * (w // weights.window_size)
        claims = torch.zeros(x.shape[0], dtype=torch.int64)  # each image's next unclaimed window

        def job(_: int, buffers: list[Tensor]) -> None:
            for i in range(x.shape[0]):
                kernels.swin_windows(out[i], tokens[i], weights, size=size, windows=range(count),
                                     buffer=buffers[0], claim=claims[i : i + 1])  # fmt: skip

        n = weights.window_size**2
        nnz = sum(csr.values.numel() for csr, _ in weights.linears)
        work = x.shape[0] * h * w * (nnz + 2 * n * weights.channels)  # multiply-adds: Linears, attention
        run_chunks(job, range(pool_threads()), work, lambda: [x.new_empty(weights.buffer_size())])
        return out

    def extra_repr(self) -> str:
        return f"mode={self.mode}"


class FusedCATBlock(nn.Module):
    """A CAT block whose two window attentions run in C (``iss_window_attention``: no rolled copies, window
    partitions or stored scores) and whose MLP half (LayerNorm, fc1, GELU, fc2, residual) runs on chunks of
    tokens in C (``iss_mlp_tokens``: the 4C-wide hidden layer never leaves cache), or the wrapped block when
    that measured faster on the first call."""

    def __init__(self, block: CATBlock, plan: _Plan) -> None:
        super().__init__()
        self.block = block
        self.mode = "undecided"  # -> "fused" or "layers"
        self._plan = plan
        shifts = block.shifts or ((0, 0), (0, 0))
        half = block.norm1.normalized_shape[0] // 2
        self._attentions = [
            _window_attention(attn, shift, half, first=i * half)
            for i, (attn, shift) in enumerate(zip(block.attns, shifts, strict=True))
        ]
        self._mlp = _mlp_block(block)

    def forward(self, x: Tensor, size: tuple[int, int]) -> Tensor:
        if torch.is_grad_enabled() and x.requires_grad:
            raise ValueError("fused blocks are inference-only: call them under torch.inference_mode()")
        if x.dtype != torch.float32 or x.device.type != "cpu":  # the kernel is float32, CPU
            return self.block(x, size)
        if self.mode == "undecided":
            windows = [(a.window, a.shift, a.heads) for a in self._attentions]
            key = ("cat", x.shape[-1], *windows, *size, x.shape[0], pool_threads())
            linears = [m for m in self.block.modules() if isinstance(m, SparseLinear)]
            clear = bool(linears) and _clear(linears, x, self._plan)
            fused = self._plan.use_sparse(
                key, lambda: self.block(x, size), lambda: self._fused(x, size), clear
            )
            self.mode = "fused" if fused else "layers"
        return self._fused(x, size) if self.mode == "fused" else self.block(x, size)

    @property
    def fused_layers(self) -> tuple[str, ...]:
        """The block's sparse Linears that the fused path runs in its own kernel (the MLP's), by name."""
        return () if self._mlp is None else ("block.mlp.fc1", "block.mlp.fc2")

    def _fused(self, x: Tensor, size: tuple[int, int]) -> Tensor:
        """``CATBlock.forward`` with the attention of both halves in C, the threads claiming windows, and
        the MLP half in C where both its Linears are sparse."""
        block, (h, w) = self.block, size
        b, n, c = x.shape
        qkv = block.qkv(block.norm1(x)).contiguous()
        attended = torch.empty_like(x)
        claims = torch.zeros(b, 2, dtype=torch.int64)  # each image's and half's next unclaimed window

        def job(_: int, buffers: list[Tensor]) -> None:
            for i in range(b):
                for k, attn in enumerate(self._attentions):
                    count = (h // attn.window[0]) * (w // attn.window[1])
                    kernels.window_attention(attended[i], qkv[i], attn, size=size, windows=range(count),
                                             buffer=buffers[0], claim=claims[i, k : k + 1])  # fmt: skip

        buffer = max(attn.buffer_size() for attn in self._attentions)
        work = b * n * c * 2 * self._attentions[0].window[0] * self._attentions[0].window[1]
        run_chunks(job, range(pool_threads()), work, lambda: [x.new_empty(buffer)])
        lcm = block.get_v(qkv.view(b, h, w, 3, c)[..., 2, :].permute(0, 3, 1, 2))
        x = x + block.proj(attended.add_(to_tokens(lcm)))
        return x + block.mlp(block.norm2(x)) if self._mlp is None else self._add_mlp(x)

    def _add_mlp(self, x: Tensor) -> Tensor:
        """``x + mlp(norm2(x))`` in place (``x`` is the block's own intermediate), by ``iss_mlp_tokens`` on
        chunks of tokens that the threads take in turn."""
        tokens = x.view(-1, x.shape[-1])
        total, threads = tokens.shape[0], pool_threads()
        span = total if threads == 1 else LANES * math.ceil(total / (4 * threads * LANES))

        def job(start: int, buffers: list[Tensor]) -> None:
            chunk = range(start, min(total, start + span))
            kernels.mlp_tokens(tokens, tokens, self._mlp, span=chunk, buffer=buffers[0])

        nnz = sum(weight.values.numel() for weight, _ in (self._mlp.fc1, self._mlp.fc2))
        run_chunks(job, range(0, total, span), total * nnz, lambda: [x.new_empty(self._mlp.buffer_size())])
        return x

    def extra_repr(self) -> str:
        return f"mode={self.mode}"


def _mlp_block(block: CATBlock) -> kernels.MLPBlock | None:
    """``block``'s MLP half for ``iss_mlp_tokens`` (chunks of tokens as wide as ``LINEAR_BUFFER_BYTES``
    allows), or None unless both its Linears are sparse and its GELU exact."""
    mlp, norm = block.mlp, block.norm2
    if not (isinstance(mlp.fc1, SparseLinear) and isinstance(mlp.fc2, SparseLinear)):
        return None
    if mlp.act.approximate != "none" or mlp.fc1.csr is None or mlp.fc2.csr is None:
        return None
    c, hidden = mlp.fc1.in_features, mlp.fc1.out_features
    ld = max(LANES, LINEAR_BUFFER_BYTES // (4 * (2 * c + hidden)) // LANES * LANES)

    def linear(layer: SparseLinear) -> tuple[kernels.OffsetCSR, Tensor | None]:
        bias = None if layer.bias is None else layer.bias.float().contiguous()
        return layer._offset_csr(ld), bias

    weights = norm.weight.detach().float().contiguous(), norm.bias.detach().float().contiguous()
    result = kernels.MLPBlock(ld, (*weights, norm.eps), linear(mlp.fc1), linear(mlp.fc2))
    result.check()
    return result


def _window_attention(
    attn: RectWindowAttention, shift: tuple[int, int], channels: int, *, first: int
) -> kernels.WindowAttention:
    """One half of a CAT block, ``channels`` from ``first``, in the kernel's layout (position bias and masks
    transposed, as for Swin)."""
    with torch.no_grad():
        position_bias = attn.position_bias().transpose(1, 2).contiguous().float()
    (wh, ww), mask = attn.window, None
    if shift != (0, 0):  # a 2x2-window image has one window of each kind (see kernels.SwinBlock)
        mask = shifted_window_mask((2 * wh, 2 * ww), (wh, ww), shift, torch.device("cpu"))
        mask = mask.transpose(1, 2).contiguous().float()
    result = kernels.WindowAttention(attn.window, shift, attn.num_heads, channels, first, position_bias, mask)
    result.check()
    return result


def _clear(linears: Sequence[nn.Module], x: Tensor, plan: _Plan) -> bool:
    """Whether a block of these sparse Linears on tokens ``x`` runs fused without timing: all of them are
    clear calls (:func:`.decisions.clear`), their work counted together."""
    zeros = min(layer.zeros for layer in linears)
    work = sum(x.numel() * layer.out_features for layer in linears)
    return decisions.clear(zeros, work, x, plan.min_speedup)


def _linears(block: SwinTransformerBlock) -> tuple[nn.Module, ...]:
    return block.attn.qkv, block.attn.proj, block.mlp.fc1, block.mlp.fc2


def _offset_csr(layer: SparseLinear, n: int, row_scale: Tensor | None = None) -> kernels.OffsetCSR:
    """``layer``'s CSR as the kernel reads it from channel-major windows of ``n`` tokens."""
    csr = layer.csr
    values = csr.values()
    if row_scale is not None:
        rows = torch.repeat_interleave(torch.arange(layer.out_features), csr.crow_indices().diff().long())
        values = values * row_scale[rows]
    return kernels.OffsetCSR.build(csr.crow_indices(), csr.col_indices().long() * n, values)


def _swin_weights(block: SwinTransformerBlock) -> kernels.SwinBlock:
    """``block``'s parameters in the fused kernel's layout (queries pre-scaled, position bias transposed)."""
    attn, n = block.attn, block.window_size**2
    c = block.norm1.normalized_shape[0]
    scale = torch.ones(3 * c)
    scale[:c] = (c // attn.num_heads) ** -0.5

    def f32(t: Tensor | None) -> Tensor | None:
        return None if t is None else t.detach().float().contiguous()

    qkv, proj, fc1, fc2 = _linears(block)
    linears = (
        (_offset_csr(qkv, n, scale), f32(None if qkv.bias is None else qkv.bias * scale)),
        *((_offset_csr(layer, n), f32(layer.bias)) for layer in (proj, fc1, fc2)),
    )
    with torch.no_grad():
        position_bias = attn.position_bias().transpose(1, 2).contiguous().float()
    ws, shift, mask = block.window_size, block.shift_size, None
    if shift:  # a 2x2-window image has one window of each kind (see kernels.SwinBlock)
        mask = shifted_window_mask((2 * ws, 2 * ws), (ws, ws), (shift, shift), torch.device("cpu"))
        mask = mask.transpose(1, 2).contiguous().float()
    weights = kernels.SwinBlock(
        window_size=ws,
        shift=shift,
        heads=attn.num_heads,
        norm1=(f32(block.norm1.weight), f32(block.norm1.bias), block.norm1.eps),
        norm2=(f32(block.norm2.weight), f32(block.norm2.bias), block.norm2.eps),
        linears=linears,
        position_bias=position_bias,
        mask=mask,
    )
    weights.check()
    return weights


def _fusable_swin(block: nn.Module) -> bool:
    """A Swin block whose Linears are all sparse layers, with the standard norms and exact GELU."""
    return (
        isinstance(block, SwinTransformerBlock)
        and all(isinstance(layer, SparseLinear) for layer in _linears(block))
        and isinstance(block.mlp.act, nn.GELU)
        and block.mlp.act.approximate == "none"
        and all(norm.elementwise_affine for norm in (block.norm1, block.norm2))
        and (block.window_size**2) % kernels.lanes() == 0
    )


def fuse(model: nn.Module, plan: _Plan) -> None:
    """Replace, in place, the blocks of ``model`` whose layers are already sparse by their fused versions
    (needs the compiled kernels)."""
    if kernels.load() is None:
        return
    _drop_unread_channels(model, plan)
    for parent in list(model.modules()):
        if isinstance(parent, nn.Sequential):
            _fuse_shuffles(parent)
        for name, child in parent.named_children():
            if (
                isinstance(child, ResidualBlock)
                and isinstance(child.conv1, SparseConv2d)
                and isinstance(child.conv2, SparseConv2d)
            ):
                setattr(parent, name, SparseResidualBlock(child))
            elif _fusable_swin(child):
                setattr(parent, name, FusedSwinBlock(child, plan))
            elif isinstance(child, CATBlock) and math.prod(child.windows[0]) % kernels.lanes() == 0:
                setattr(parent, name, FusedCATBlock(child, plan))
            elif isinstance(child, RSTB) and isinstance(child.conv, SparseConv2d):
                setattr(parent, name, FusedRSTB(child))
            elif isinstance(child, PatchEmbed) and child.norm.elementwise_affine:
                setattr(parent, name, FusedPatchEmbed(child))


def _drop_unread_channels(model: nn.Module, plan: _Plan) -> None:
    """In place: where ``model.conv_last`` (sparse) reads only some channels of ``model.upsample``'s output,
    the upsampler's last conv (before its pixel shuffle) keeps only the outputs of those channels, and
    ``conv_last`` takes them as its input. The same products are computed for what is read."""
    upsample, last = getattr(model, "upsample", None), getattr(model, "conv_last", None)
    if not (isinstance(upsample, nn.Sequential) and isinstance(last, SparseConv2d) and len(upsample) >= 2):
        return
    conv, shuffle = upsample[-2], upsample[-1]
    if not (isinstance(conv, SparseConv2d) and isinstance(shuffle, nn.PixelShuffle)):
        return
    weight = last.dense_weight()
    read = read_channels(weight)
    if len(read) == last.in_channels:
        return
    per_channel = shuffle.upscale_factor**2  # outputs c * f^2 ... c * f^2 + f^2 - 1 become channel c
    rows = (read[:, None] * per_channel + torch.arange(per_channel)).flatten()
    upsample[-2] = SparseConv2d(_dense_conv(conv.dense_weight()[rows], conv.bias, rows), plan)
    model.conv_last = SparseConv2d(_dense_conv(weight[:, read], last.bias), plan)


def _dense_conv(weight: Tensor, bias: Tensor | None, rows: Tensor | None = None) -> nn.Conv2d:
    """A 'same' ``nn.Conv2d`` holding ``weight`` and ``bias`` (its ``rows``, if given)."""
    out, cin, k, _ = weight.shape
    conv = nn.Conv2d(cin, out, k, padding=k // 2, bias=bias is not None, dtype=weight.dtype)
    conv.weight.data.copy_(weight)
    if bias is not None:
        conv.bias.data.copy_(bias if rows is None else bias[rows])
    return conv


def _fuse_shuffles(sequence: nn.Sequential) -> None:
    """In place: every sparse conv directly followed by a pixel shuffle becomes one
    :class:`SparseConvShuffle` (the shuffle's slot an ``nn.Identity``, so indices stay)."""
    for i in range(len(sequence) - 1):
        conv, shuffle = sequence[i], sequence[i + 1]
        if isinstance(conv, SparseConv2d) and isinstance(shuffle, nn.PixelShuffle):
            sequence[i] = SparseConvShuffle(conv, shuffle.upscale_factor)
            sequence[i + 1] = nn.Identity()
