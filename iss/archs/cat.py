"""CAT (Chen et al., NeurIPS 2022, Cross Aggregation Transformer), variant CAT-R (regular rectangle windows).

Each block splits channels and heads in half: one half attends in horizontal 4x16 windows (H-Rwin), the other
in vertical 16x4 windows (V-Rwin); odd blocks shift both by half a window, with masks. A depthwise 3x3 conv on
V (the Locality Complementary Module) is added before the output projection, and the relative-position bias
comes from a small MLP over (dy, dx) offsets (DynamicPosBias). Module names and persistent buffers
(``rpe_biases``, ``relative_position_index``, ``attn_mask_0/1`` for ``img_size`` 64) follow
``basicsr/archs/cat_arch.py`` of zhengchen1999/CAT, so the released ``SR_CAT_R_x{2,3,4}.pth`` load strictly.
Inputs are padded to a multiple of the window sides by mirroring (as that repo's test code), output cropped.
Only the "pixelshuffle" reconstruction and "1conv" connection are implemented; dropout rates are 0 upstream.
"""

from __future__ import annotations

import math
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
    Upsample,
    check_scale,
    drop_path_rates,
    init_transformer_weights,
    pad_to_multiple,
    relative_offsets,
    relative_position_index,
    shifted_window_mask,
    to_image,
    to_tokens,
    window_attention,
)

__all__ = ["CAT", "cat_r"]


class DynamicPosBias(nn.Module):
    """MLP mapping relative offsets (dy, dx) to one bias per head (the non-residual variant used by CAT)."""

    def __init__(self, pos_dim: int, num_heads: int) -> None:
        super().__init__()
        self.pos_proj = nn.Linear(2, pos_dim)
        self.pos1 = nn.Sequential(nn.LayerNorm(pos_dim), nn.ReLU(inplace=True), nn.Linear(pos_dim, pos_dim))
        self.pos2 = nn.Sequential(nn.LayerNorm(pos_dim), nn.ReLU(inplace=True), nn.Linear(pos_dim, pos_dim))
        self.pos3 = nn.Sequential(nn.LayerNorm(pos_dim), nn.ReLU(inplace=True), nn.Linear(pos_dim, num_heads))

    def forward(self, offsets: Tensor) -> Tensor:
        return self.pos3(self.pos2(self.pos1(self.pos_proj(offsets))))


class RectWindowAttention(nn.Module):
    """Self-attention in (wh, ww) rectangle windows on given q, k, v (the block owns the projections)."""

    def __init__(self, dim: int, window: tuple[int, int], num_heads: int) -> None:
        super().__init__()
        self.window = window
        self.num_heads = num_heads
        self.pos = DynamicPosBias(dim // 16, num_heads)  # the official dim // 4 // 4
        self.register_buffer("rpe_biases", relative_offsets(window))
        self.register_buffer("relative_position_index", relative_position_index(window))

    def position_bias(self) -> Tensor:
        """(heads, N, N) bias for every pair of positions in a window."""
        n = self.window[0] * self.window[1]
        bias = self.pos(self.rpe_biases)[self.relative_position_index.view(-1)]
        return bias.view(n, n, self.num_heads).permute(2, 0, 1)

    def forward(self, qkv: Tensor, mask: Tensor | None) -> Tensor:
        """qkv (B, H, W, 3, C) -> attended (B, H, W, C); mask (nW, N, N) additive or None."""
        b, h, w, _, c = qkv.shape
        (wh, ww), heads = self.window, self.num_heads
        # one copy: split into windows and heads -> (3, B, nW, heads, N, d)
        qkv = qkv.view(b, h // wh, wh, w // ww, ww, 3, heads, c // heads).permute(5, 0, 1, 3, 6, 2, 4, 7)
        q, k, v = qkv.reshape(3, b, (h // wh) * (w // ww), heads, wh * ww, c // heads)
        bias = self.position_bias()
        if mask is not None:
            bias = bias + mask.unsqueeze(1)
        out = window_attention(q, k, v, bias)
        out = out.view(b, h // wh, w // ww, heads, wh, ww, c // heads).permute(0, 1, 4, 2, 5, 3, 6)
        return out.reshape(b, h, w, c)


class CATBlock(nn.Module):
    """Regular cross-aggregation block (``CATB_regular``): H-Rwin and V-Rwin halves, LCM, MLP."""

    def __init__(
        self,
        dim: int,
        num_heads: int,
        split_size: tuple[int, int],
        shift: bool,
        mlp_ratio: float,
        qkv_bias: bool,
        drop_path: float,
        img_size: int,
    ) -> None:
        super().__init__()
        s0, s1 = split_size
        self.windows = ((s0, s1), (s1, s0))  # H-Rwin, V-Rwin
        self.shifts = ((s0 // 2, s1 // 2), (s1 // 2, s0 // 2)) if shift else None
        self.img_size = img_size
        self.qkv = nn.Linear(dim, 3 * dim, bias=qkv_bias)
        self.norm1 = nn.LayerNorm(dim)
        self.proj = nn.Linear(dim, dim)
        self.attns = nn.ModuleList(RectWindowAttention(dim // 2, win, num_heads // 2) for win in self.windows)
        self.drop_path = DropPath(drop_path)
        self.mlp = Mlp(dim, int(dim * mlp_ratio))
        self.norm2 = nn.LayerNorm(dim)
        self.get_v = nn.Conv2d(dim, dim, 3, 1, 1, groups=dim)
        for i in range(2):  # persistent masks for img_size inputs, as in the official files
            mask = self._make_mask(i, (img_size, img_size), torch.device("cpu")).clone() if shift else None
            self.register_buffer(f"attn_mask_{i}", mask)

    def _make_mask(self, branch: int, size: tuple[int, int], device: torch.device) -> Tensor:
        """Cached shifted-window mask of one branch for a padded feature size."""
        assert self.shifts is not None
        return shifted_window_mask(size, self.windows[branch], self.shifts[branch], device)

    def attention_mask(self, branch: int, size: tuple[int, int], device: torch.device) -> Tensor | None:
        """The stored mask for ``img_size`` inputs, a cached one for other sizes, None when not shifted."""
        if self.shifts is None:
            return None
        if size == (self.img_size, self.img_size):
            return getattr(self, f"attn_mask_{branch}")
        return self._make_mask(branch, size, device)

    def forward(self, x: Tensor, size: tuple[int, int]) -> Tensor:
        """x (B, H*W, C) tokens of a feature map of ``size`` (H, W), multiples of both window sides."""
        b, n, c = x.shape
        h, w = size
        qkv = self.qkv(self.norm1(x)).view(b, h, w, 3, c)
        halves = []
        for i, (attn, part) in enumerate(
            zip(self.attns, (qkv[..., : c // 2], qkv[..., c // 2 :]), strict=True)
        ):
            if self.shifts is not None:
                part = torch.roll(part, (-self.shifts[i][0], -self.shifts[i][1]), (1, 2))
            out = attn(part, self.attention_mask(i, size, x.device))
            if self.shifts is not None:
                out = torch.roll(out, self.shifts[i], (1, 2))
            halves.append(out)
        # Locality Complementary Module: depthwise conv on V in image layout
        lcm = self.get_v(qkv[..., 2, :].permute(0, 3, 1, 2))
        attended = torch.cat(halves, dim=-1).view(b, n, c) + to_tokens(lcm)
        x = x + self.drop_path(self.proj(attended))
        return x + self.drop_path(self.mlp(self.norm2(x)))


class ResidualGroup(nn.Module):
    """CAT blocks (shifted every second one), a 3x3 conv, and a skip connection."""

    def __init__(self, dim: int, depth: int, num_heads: int, drop_paths: list[float], **block_args) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(
            CATBlock(dim, num_heads, shift=i % 2 == 1, drop_path=drop_paths[i], **block_args)
            for i in range(depth)
        )
        self.conv = nn.Conv2d(dim, dim, 3, 1, 1)

    def forward(self, x: Tensor, size: tuple[int, int]) -> Tensor:
        res = x
        for block in self.blocks:
            x = block(x, size)
        return res + to_tokens(self.conv(to_image(x, size)))


class ToTokens(nn.Module):
    """(B, C, H, W) -> (B, H*W, C), a module so that ``before_RG`` keeps the official key ``before_RG.1``."""

    def forward(self, x: Tensor) -> Tensor:
        return to_tokens(x)


class CAT(nn.Module):
    """Cross Aggregation Transformer with regular rectangle windows and pixel-shuffle reconstruction.

    Args:
        scale: upscaling factor.
        img_size: training patch size; sizes the stored attention masks (64 in the official files).
        embed_dim: feature channels.
        depth: blocks per residual group.
        num_heads: attention heads per group (half go to each window orientation).
        split_size_0: short window side per group (H-Rwin is split_size_0 x split_size_1).
        split_size_1: long window side per group.
        mlp_ratio: MLP hidden width / ``embed_dim``.
        qkv_bias: bias in the qkv projection.
        img_range: multiplier applied after subtracting the RGB mean.
        drop_path_rate: stochastic depth of the last block (linear from 0), active only in ``train()``.

    Takes float NCHW RGB in [0, 1] of any size, returns (B, 3, scale*H, scale*W), not clamped.
    """

    OPTIONS: ClassVar[dict[str, Option]] = {  # what a checkpoint may override (iss.archs.check_overrides)
        "img_size": Option(int, 16, 64), "embed_dim": Option(int, 1, 240),
        "depth": Option(int, 1, 6, max_len=6), "num_heads": Option(int, 1, 16, max_len=6),
        "split_size_0": Option(int, 1, 8, max_len=6), "split_size_1": Option(int, 1, 32, max_len=6),
        "mlp_ratio": Option(float, 0.25, 4), "qkv_bias": Option(bool), "img_range": Option(float, 1e-3, 255),
        "drop_path_rate": Option(float, 0, 1),
    }  # fmt: skip

    def __init__(
        self,
        scale: int,
        *,
        img_size: int = 64,
        embed_dim: int = 180,
        depth: Sequence[int] = (6, 6, 6, 6, 6, 6),
        num_heads: Sequence[int] = (6, 6, 6, 6, 6, 6),
        split_size_0: Sequence[int] = (4, 4, 4, 4, 4, 4),
        split_size_1: Sequence[int] = (16, 16, 16, 16, 16, 16),
        mlp_ratio: float = 4.0,
        qkv_bias: bool = True,
        img_range: float = 1.0,
        drop_path_rate: float = 0.1,
    ) -> None:
        super().__init__()
        if not len(depth) == len(num_heads) == len(split_size_0) == len(split_size_1):
            raise ValueError("depth, num_heads, split_size_0 and split_size_1 need one entry per group")
        self.scale = scale
        self.img_range = img_range
        self.pad_multiple = math.lcm(*split_size_0, *split_size_1)
        if img_size % self.pad_multiple:
            raise ValueError(
                f"img_size {img_size} must be a multiple of the window sides ({self.pad_multiple})"
            )
        self.register_buffer("mean", torch.tensor(RGB_MEAN).view(1, 3, 1, 1), persistent=False)
        num_feat = 64
        self.conv_first = nn.Conv2d(3, embed_dim, 3, 1, 1)
        self.before_RG = nn.Sequential(ToTokens(), nn.LayerNorm(embed_dim))
        rates = drop_path_rates(drop_path_rate, depth)
        groups = zip(depth, num_heads, split_size_0, split_size_1, rates, strict=True)
        self.layers = nn.ModuleList(
            ResidualGroup(
                embed_dim, d, heads, group_rates, split_size=(s0, s1), mlp_ratio=mlp_ratio, qkv_bias=qkv_bias,
                img_size=img_size,
            )
            for d, heads, s0, s1, group_rates in groups
        )  # fmt: skip
        self.norm = nn.LayerNorm(embed_dim)
        self.conv_after_body = nn.Conv2d(embed_dim, embed_dim, 3, 1, 1)
        self.conv_before_upsample = nn.Sequential(
            nn.Conv2d(embed_dim, num_feat, 3, 1, 1), nn.LeakyReLU(inplace=True)
        )
        self.upsample = Upsample(scale, num_feat)
        self.conv_last = nn.Conv2d(num_feat, 3, 3, 1, 1)
        self.apply(init_transformer_weights)

    def forward_features(self, x: Tensor) -> Tensor:
        """Deep features: residual groups on tokens, final LayerNorm, back to a feature map."""
        size = (x.shape[-2], x.shape[-1])
        x = self.before_RG(x)
        for layer in self.layers:
            x = layer(x, size)
        return to_image(self.norm(x), size)

    def forward(self, x: Tensor) -> Tensor:
        h, w = x.shape[-2:]
        mean = self.mean.to(x.dtype)
        x = (pad_to_multiple(x, self.pad_multiple, "symmetric") - mean) * self.img_range
        x = self.conv_first(x)
        x = self.conv_after_body(self.forward_features(x)) + x
        x = self.conv_last(self.upsample(self.conv_before_upsample(x)))
        x = x / self.img_range + mean
        return x[..., : h * self.scale, : w * self.scale]


def _create_cat(scale: int, **kwargs) -> CAT:
    return CAT(check_scale(scale), **kwargs)


@ARCHS.register("cat-r")
def cat_r(*, scale: int, **overrides) -> CAT:
    """CAT-R: regular 4x16 / 16x4 windows, 6 groups of 6 blocks, 180 channels (``test_CAT_R_sr_x{s}.yml``)."""
    args = dict(
        img_size=64, embed_dim=180, depth=(6,) * 6, num_heads=(6,) * 6, split_size_0=(4,) * 6,
        split_size_1=(16,) * 6, mlp_ratio=4.0, img_range=1.0,
    )  # fmt: skip
    return _create_cat(scale, **{**args, **overrides})
