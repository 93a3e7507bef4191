"""SwinIR (Liang et al., ICCVW 2021), lightweight variant SwinIR-S.

Module names, parameters and persistent buffers follow ``models/network_swinir.py`` of JingyunLiang/SwinIR, so
the release files ``002_lightweightSR_DIV2K_s64w8_SwinIR-S_x{2,3,4}.pth`` load strictly: every block keeps its
``relative_position_index`` and every shifted block its ``attn_mask`` for ``img_size`` 64. Masks for other
input sizes are computed once per size and cached. Only the lightweight reconstruction (one conv + pixel
shuffle, "pixelshuffledirect") and the "1conv" residual connection are implemented; dropout rates are all 0 in
the official configs and are left out, stochastic depth is kept.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

import torch
from torch import Tensor, nn

from iss.registry import ARCHS

from .common import (
    RGB_MEAN,
    DropPath,
    Mlp,
    Option,
    check_scale,
    drop_path_rates,
    init_transformer_weights,
    pad_to_multiple,
    relative_position_index,
    shifted_window_mask,
    to_image,
    to_tokens,
    window_attention,
    window_partition,
    window_reverse,
)

__all__ = ["SwinIR", "swinir_light"]


class WindowAttention(nn.Module):
    """Multi-head self-attention inside square windows with a learned relative-position bias table."""

    def __init__(self, dim: int, window_size: int, num_heads: int, qkv_bias: bool = True) -> None:
        super().__init__()
        self.num_heads = num_heads
        self.window_size = window_size
        self.relative_position_bias_table = nn.Parameter(torch.zeros((2 * window_size - 1) ** 2, num_heads))
        self.register_buffer("relative_position_index", relative_position_index((window_size, window_size)))
        self.qkv = nn.Linear(dim, 3 * dim, bias=qkv_bias)
        self.proj = nn.Linear(dim, dim)
        nn.init.trunc_normal_(self.relative_position_bias_table, std=0.02)

    def position_bias(self) -> Tensor:
        """(heads, N, N) bias gathered from the table for every pair of positions in a window."""
        n = self.window_size**2
        bias = self.relative_position_bias_table[self.relative_position_index.view(-1)]
        return bias.view(n, n, self.num_heads).permute(2, 0, 1)

    def forward(self, x: Tensor, mask: Tensor | None = None) -> Tensor:
        """Attend within each window: x (B * nW, N, C), mask (nW, N, N) additive or None."""
        b_, n, c = x.shape
        q, k, v = self.qkv(x).view(b_, n, 3, self.num_heads, c // self.num_heads).permute(2, 0, 3, 1, 4)
        bias = self.position_bias()
        if mask is not None:  # group windows per image so the (nW, heads, N, N) mask broadcasts over B
            nw = mask.shape[0]
            q, k, v = (t.unflatten(0, (b_ // nw, nw)) for t in (q, k, v))
            bias = bias + mask.unsqueeze(1)
        out = window_attention(q, k, v, bias)
        return self.proj(out.reshape(b_, self.num_heads, n, -1).transpose(1, 2).reshape(b_, n, c))


class SwinTransformerBlock(nn.Module):
    """Pre-norm (shifted-)window attention + MLP, each in a residual branch with stochastic depth."""

    def __init__(
        self,
        dim: int,
        num_heads: int,
        window_size: int,
        shift_size: int,
        mlp_ratio: float,
        qkv_bias: bool,
        drop_path: float,
        img_size: int,
    ) -> None:
        super().__init__()
        self.window_size = window_size
        self.shift_size = shift_size
        self.img_size = img_size
        self.norm1 = nn.LayerNorm(dim)
        self.attn = WindowAttention(dim, window_size, num_heads, qkv_bias)
        self.drop_path = DropPath(drop_path)
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = Mlp(dim, int(dim * mlp_ratio))
        mask = self._make_mask((img_size, img_size), torch.device("cpu")).clone() if shift_size else None
        self.register_buffer("attn_mask", mask)  # persistent, as in the official files

    def _make_mask(self, size: tuple[int, int], device: torch.device) -> Tensor:
        """Cached shifted-window mask for a padded feature size."""
        ws, s = self.window_size, self.shift_size
        return shifted_window_mask(size, (ws, ws), (s, s), device)

    def attention_mask(self, size: tuple[int, int], device: torch.device) -> Tensor | None:
        """The stored mask for ``img_size`` inputs, a cached one for other sizes, None when not shifted."""
        if not self.shift_size:
            return None
        if size == (self.img_size, self.img_size):
            return self.attn_mask
        return self._make_mask(size, device)

    def forward(self, x: Tensor, size: tuple[int, int]) -> Tensor:
        """x (B, H*W, C) tokens of a feature map of ``size`` (H, W), both multiples of the window."""
        b, _, c = x.shape
        h, w = size
        shortcut = x
        x = self.norm1(x).view(b, h, w, c)
        if self.shift_size:
            x = torch.roll(x, (-self.shift_size, -self.shift_size), (1, 2))
        window = (self.window_size, self.window_size)
        x = self.attn(window_partition(x, window), self.attention_mask(size, x.device))
        x = window_reverse(x, window, size)
        if self.shift_size:
            x = torch.roll(x, (self.shift_size, self.shift_size), (1, 2))
        x = shortcut + self.drop_path(x.reshape(b, h * w, c))
        return x + self.drop_path(self.mlp(self.norm2(x)))


class BasicLayer(nn.Module):
    """A stage of Swin blocks alternating regular and shifted windows (key ``blocks``)."""

    def __init__(self, blocks: Sequence[nn.Module]) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(blocks)

    def forward(self, x: Tensor, size: tuple[int, int]) -> Tensor:
        for block in self.blocks:
            x = block(x, size)
        return x


class RSTB(nn.Module):
    """Residual Swin Transformer Block: a stage of Swin blocks, a 3x3 conv, and a skip connection."""

    def __init__(self, dim: int, depth: int, num_heads: int, drop_paths: list[float], **block_args) -> None:
        super().__init__()
        window_size = block_args["window_size"]
        self.residual_group = BasicLayer(
            SwinTransformerBlock(
                dim, num_heads, shift_size=0 if i % 2 == 0 else window_size // 2, drop_path=drop_paths[i],
                **block_args,
            )
            for i in range(depth)
        )  # fmt: skip
        self.conv = nn.Conv2d(dim, dim, 3, 1, 1)

    def forward(self, x: Tensor, size: tuple[int, int]) -> Tensor:
        return x + to_tokens(self.conv(to_image(self.residual_group(x, size), size)))


class PatchEmbed(nn.Module):
    """Feature map -> normalised tokens (patch size 1, so only the LayerNorm has weights: ``norm``)."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(dim)

    def forward(self, x: Tensor) -> Tensor:
        return self.norm(to_tokens(x))


class SwinIR(nn.Module):
    """SwinIR with the lightweight pixel-shuffle-direct reconstruction.

    Args:
        scale: upscaling factor.
        img_size: training patch size; sizes the stored attention masks (64 in the official files).
        window_size: side of the square attention windows; inputs are reflect-padded to a multiple of it.
        img_range: multiplier applied after subtracting the RGB mean (1 for SwinIR-S).
        depths: Swin blocks per residual group.
        embed_dim: feature channels.
        num_heads: attention heads per residual group.
        mlp_ratio: MLP hidden width / ``embed_dim``.
        qkv_bias: bias in the qkv projection.
        drop_path_rate: stochastic depth of the last block (linear from 0), active only in ``train()``.

    Takes float NCHW RGB in [0, 1] of any size, returns (B, 3, scale*H, scale*W), not clamped.
    """

    OPTIONS: ClassVar[dict[str, Option]] = {  # what a checkpoint may override (iss.archs.check_overrides)
        "img_size": Option(int, 8, 64), "window_size": Option(int, 2, 16),
        "img_range": Option(float, 1e-3, 255), "depths": Option(int, 1, 6, max_len=8),
        "embed_dim": Option(int, 1, 240), "num_heads": Option(int, 1, 16, max_len=8),
        "mlp_ratio": Option(float, 0.25, 4), "qkv_bias": Option(bool), "drop_path_rate": Option(float, 0, 1),
    }  # fmt: skip

    def __init__(
        self,
        scale: int,
        *,
        img_size: int = 64,
        window_size: int = 8,
        img_range: float = 1.0,
        depths: Sequence[int] = (6, 6, 6, 6),
        embed_dim: int = 60,
        num_heads: Sequence[int] = (6, 6, 6, 6),
        mlp_ratio: float = 2.0,
        qkv_bias: bool = True,
        drop_path_rate: float = 0.1,
    ) -> None:
        super().__init__()
        if len(depths) != len(num_heads):
            raise ValueError(f"depths {tuple(depths)} and num_heads {tuple(num_heads)} differ in length")
        if img_size % window_size:
            raise ValueError(f"img_size {img_size} must be a multiple of window_size {window_size}")
        self.scale = scale
        self.window_size = window_size
        self.img_range = img_range
        self.register_buffer("mean", torch.tensor(RGB_MEAN).view(1, 3, 1, 1), persistent=False)
        self.conv_first = nn.Conv2d(3, embed_dim, 3, 1, 1)
        self.patch_embed = PatchEmbed(embed_dim)
        block_args = dict(window_size=window_size, mlp_ratio=mlp_ratio, qkv_bias=qkv_bias, img_size=img_size)
        self.layers = nn.ModuleList(
            RSTB(embed_dim, depth, heads, rates, **block_args)
            for depth, heads, rates in zip(
                depths, num_heads, drop_path_rates(drop_path_rate, depths), strict=True
            )
        )
        self.norm = nn.LayerNorm(embed_dim)
        self.conv_after_body = nn.Conv2d(embed_dim, embed_dim, 3, 1, 1)
        self.upsample = nn.Sequential(nn.Conv2d(embed_dim, 3 * scale**2, 3, 1, 1), nn.PixelShuffle(scale))
        self.apply(init_transformer_weights)

    def forward_features(self, x: Tensor) -> Tensor:
        """Deep features: residual groups on tokens, final LayerNorm, back to a feature map."""
        size = (x.shape[-2], x.shape[-1])
        x = self.patch_embed(x)
        for layer in self.layers:
            x = layer(x, size)
        return to_image(self.norm(x), size)

    def forward(self, x: Tensor) -> Tensor:
        h, w = x.shape[-2:]
        mean = self.mean.to(x.dtype)
        x = (pad_to_multiple(x, self.window_size, "reflect") - mean) * self.img_range
        x = self.conv_first(x)
        x = self.conv_after_body(self.forward_features(x)) + x
        x = self.upsample(x) / self.img_range + mean
        return x[..., : h * self.scale, : w * self.scale]


def _create_swinir(scale: int, **kwargs) -> SwinIR:
    return SwinIR(check_scale(scale), **kwargs)


@ARCHS.register("swinir-light")
def swinir_light(*, scale: int, **overrides) -> SwinIR:
    """SwinIR-S, the lightweight SwinIR (``main_test_swinir.py``, task ``lightweight_sr``)."""
    args = dict(
        img_size=64, window_size=8, img_range=1.0, depths=(6, 6, 6, 6), embed_dim=60,
        num_heads=(6, 6, 6, 6), mlp_ratio=2.0,
    )  # fmt: skip
    return _create_swinir(scale, **{**args, **overrides})
