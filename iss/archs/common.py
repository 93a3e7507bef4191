"""Building blocks shared by the backbones: padding, (shifted) window partition, masks, upsamplers.

Only plain ``nn.Conv2d`` / ``nn.Linear`` modules carry weights here, so the pruners see every prunable
layer through ``named_modules()``.
"""

from __future__ import annotations

import functools
import itertools
import math
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

RGB_MEAN = (0.4488, 0.4371, 0.4040)  # DIV2K mean used by EDSR, SwinIR and CAT
SCALES = (2, 3, 4)  # the upscaling factors every backbone, benchmark and the app support


@dataclass(frozen=True)
class Option:
    """A constructor argument that a checkpoint's ``arch_kwargs`` may set: its type and sane range.

    ``max_len`` > 0 makes it a sequence of 1 to ``max_len`` such values. The ranges of a family are chosen so
    that no combination builds a model of more than a few hundred MB (tested on the meta device).
    """

    kind: type  # int, float or bool
    low: float = 0.0
    high: float = 0.0
    max_len: int = 0

    def check(self, name: str, value: Any) -> None:
        """Raise ``ValueError`` naming ``name`` unless ``value`` has this option's type and range."""
        if self.max_len and not (isinstance(value, list | tuple) and 1 <= len(value) <= self.max_len):
            raise ValueError(f"{name} must be a list of 1 to {self.max_len} values, got {value!r:.60}")
        for item in value if self.max_len else [value]:
            if isinstance(item, bool) != (self.kind is bool) or not isinstance(item, self.kind | int):
                raise ValueError(f"{name} must be {self.kind.__name__}, got {item!r:.60}")
            if self.kind is not bool and not self.low <= item <= self.high:
                raise ValueError(f"{name} = {item!r} is outside its sane range [{self.low:g}, {self.high:g}]")


def check_scale(scale: int) -> int:
    """Return ``scale`` if it is one of the supported SR factors, else raise a ValueError."""
    if isinstance(scale, bool) or scale not in SCALES:
        raise ValueError(f"scale must be one of {', '.join(map(str, SCALES))} (got {scale!r})")
    return int(scale)


def to_tokens(x: Tensor) -> Tensor:
    """(B, C, H, W) feature map -> (B, H*W, C) token sequence."""
    return x.flatten(2).transpose(1, 2)


def to_image(x: Tensor, size: tuple[int, int]) -> Tensor:
    """(B, H*W, C) token sequence -> (B, C, H, W) feature map (a view, channels-last in memory)."""
    return x.transpose(1, 2).unflatten(2, size)


def pad_to_multiple(x: Tensor, multiple: int, mode: str = "reflect") -> Tensor:
    """Pad the bottom/right of an NCHW tensor so H and W are multiples of ``multiple``.

    ``mode="reflect"`` mirrors without repeating the edge (SwinIR's ``check_image_size``);
    ``mode="symmetric"`` mirrors with the edge repeated (the flip-concatenation of CAT's and SwinIR's test
    scripts). Reflect falls back to symmetric when the image is too small to reflect.
    """
    h, w = x.shape[-2:]
    pad_h, pad_w = -h % multiple, -w % multiple
    if pad_h == 0 and pad_w == 0:
        return x
    if mode == "reflect" and pad_h < h and pad_w < w:
        return F.pad(x, (0, pad_w, 0, pad_h), mode="reflect")
    return _mirror_to(_mirror_to(x, -2, h + pad_h), -1, w + pad_w)


def _mirror_to(x: Tensor, dim: int, length: int) -> Tensor:
    """Extend ``x`` along ``dim`` to ``length`` by appending flipped copies (edge pixel repeated)."""
    while x.shape[dim] < length:
        x = torch.cat([x, x.flip(dim)], dim)
    return x.narrow(dim, 0, length)


def window_partition(x: Tensor, window: tuple[int, int]) -> Tensor:
    """(B, H, W, C) -> (B * nW, wh * ww, C) windows in row-major window order (one copy)."""
    b, h, w, c = x.shape
    wh, ww = window
    x = x.view(b, h // wh, wh, w // ww, ww, c).permute(0, 1, 3, 2, 4, 5)
    return x.reshape(-1, wh * ww, c)


def window_reverse(windows: Tensor, window: tuple[int, int], size: tuple[int, int]) -> Tensor:
    """Inverse of :func:`window_partition`: (B * nW, wh * ww, C) -> (B, H, W, C)."""
    (wh, ww), (h, w) = window, size
    c = windows.shape[-1]
    x = windows.view(-1, h // wh, w // ww, wh, ww, c).permute(0, 1, 3, 2, 4, 5)
    return x.reshape(-1, h, w, c)


def relative_position_index(window: tuple[int, int]) -> Tensor:
    """(N, N) int64 index into a ((2wh-1) * (2ww-1))-row table of relative offsets, N = wh * ww."""
    wh, ww = window
    coords = torch.stack(
        torch.meshgrid(torch.arange(wh, device="cpu"), torch.arange(ww, device="cpu"), indexing="ij")
    ).flatten(1)
    rel = (coords[:, :, None] - coords[:, None, :]).permute(1, 2, 0)
    return (rel[..., 0] + wh - 1) * (2 * ww - 1) + (rel[..., 1] + ww - 1)


def relative_offsets(window: tuple[int, int]) -> Tensor:
    """((2wh-1) * (2ww-1), 2) float table of all (dy, dx) offsets, rows ordered as the index above."""
    wh, ww = window
    dy = torch.arange(1 - wh, wh, device="cpu")
    dx = torch.arange(1 - ww, ww, device="cpu")
    return torch.stack(torch.meshgrid(dy, dx, indexing="ij")).flatten(1).t().float()


@functools.lru_cache(maxsize=16)
def shifted_window_mask(
    size: tuple[int, int], window: tuple[int, int], shift: tuple[int, int], device: torch.device
) -> Tensor:
    """(nW, N, N) additive mask (0 or -100) keeping cyclically shifted windows from mixing regions.

    This is the Swin Transformer mask for rectangular windows. Cached per size (callers must not modify the
    result): it is the same for every shifted block, and recomputing it per block and forward is wasteful.
    """
    (h, w), (wh, ww), (sh, sw) = size, window, shift
    regions = torch.zeros(1, h, w, 1, device="cpu")
    for i, rows in enumerate((slice(0, -wh), slice(-wh, -sh), slice(-sh, None))):
        for j, cols in enumerate((slice(0, -ww), slice(-ww, -sw), slice(-sw, None))):
            regions[:, rows, cols, :] = 3 * i + j
    labels = window_partition(regions, window).squeeze(-1)
    differs = labels.unsqueeze(1) != labels.unsqueeze(2)
    return torch.zeros(differs.shape, device="cpu").masked_fill_(differs, -100.0).to(device)


def window_attention(q: Tensor, k: Tensor, v: Tensor, bias: Tensor) -> Tensor:
    """softmax(q k^T / sqrt(d) + bias) v; ``bias`` (position bias + mask) broadcasts over leading dims.

    Plain matmuls: for 64-token windows and head dims of 10-30, ``F.scaled_dot_product_attention`` (same
    result) took its slower math path on CPU in our measurements, forward and backward.
    """
    attn = (q * q.shape[-1] ** -0.5) @ k.transpose(-2, -1)
    attn += bias  # in place: the matmul backward does not need its output
    return attn.softmax(-1) @ v


class DropPath(nn.Module):
    """Stochastic depth: drop the whole residual branch per sample with probability ``p`` (train only)."""

    def __init__(self, p: float = 0.0) -> None:
        super().__init__()
        self.p = p

    def forward(self, x: Tensor) -> Tensor:
        if self.p == 0.0 or not self.training:
            return x
        keep = 1.0 - self.p
        mask = x.new_empty((x.shape[0],) + (1,) * (x.ndim - 1)).bernoulli_(keep)
        return x * mask.div_(keep) if keep > 0 else x * mask

    def extra_repr(self) -> str:
        return f"p={self.p}"


class Mlp(nn.Module):
    """Transformer feed-forward: Linear -> GELU -> Linear (keys ``fc1``, ``fc2``)."""

    def __init__(self, dim: int, hidden: int) -> None:
        super().__init__()
        self.fc1 = nn.Linear(dim, hidden)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(hidden, dim)

    def forward(self, x: Tensor) -> Tensor:
        return self.fc2(self.act(self.fc1(x)))


class Upsample(nn.Sequential):
    """BasicSR pixel-shuffle upsampler: log2(s) x [conv 4C + shuffle 2] for s = 2^n, conv 9C + shuffle 3."""

    def __init__(self, scale: int, num_feat: int) -> None:
        layers: list[nn.Module] = []
        if scale & (scale - 1) == 0:
            for _ in range(int(math.log2(scale))):
                layers += [nn.Conv2d(num_feat, 4 * num_feat, 3, 1, 1), nn.PixelShuffle(2)]
        elif scale == 3:
            layers += [nn.Conv2d(num_feat, 9 * num_feat, 3, 1, 1), nn.PixelShuffle(3)]
        else:
            raise ValueError(f"Upsample supports scales 2^n and 3, not {scale}")
        super().__init__(*layers)


def init_transformer_weights(module: nn.Module) -> None:
    """Swin/CAT init: truncated-normal(0.02) Linear weights, zero biases; other layers keep torch defaults."""
    if isinstance(module, nn.Linear):
        nn.init.trunc_normal_(module.weight, std=0.02)
        if module.bias is not None:
            nn.init.zeros_(module.bias)


def drop_path_rates(rate: float, depths: tuple[int, ...] | list[int]) -> list[list[float]]:
    """Stochastic-depth rates rising linearly from 0 to ``rate`` over all blocks, split per stage."""
    rates = torch.linspace(0, rate, sum(depths), device="cpu").tolist()
    bounds = [sum(depths[:i]) for i in range(len(depths) + 1)]
    return [rates[a:b] for a, b in itertools.pairwise(bounds)]
