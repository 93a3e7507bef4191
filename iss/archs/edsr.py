"""EDSR (Lim et al., CVPRW 2017) in the BasicSR layout (``basicsr/archs/edsr_arch.py``).

Input is RGB in [0, 1]; the mean is subtracted and the result multiplied by ``img_range`` = 255, which is
exactly EDSR-PyTorch's ``sub_mean`` on [0, 255] input, so both weight releases fit. Keys: ``conv_first``,
``body.{i}.conv1/conv2``, ``conv_after_body``, ``upsample.{0,2}``, ``conv_last``. The RGB mean is a
non-persistent buffer (not a frozen conv), so it is neither saved nor pruned.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import ClassVar

import torch
from torch import Tensor, nn

from iss.registry import ARCHS

from .common import RGB_MEAN, Option, Upsample, check_scale

__all__ = ["EDSR", "checkpoint_filter_fn", "edsr_baseline", "edsr_l"]


class ResidualBlock(nn.Module):
    """conv-ReLU-conv residual block without batch norm, branch scaled by ``res_scale``."""

    def __init__(self, num_feat: int, res_scale: float) -> None:
        super().__init__()
        self.res_scale = res_scale
        self.conv1 = nn.Conv2d(num_feat, num_feat, 3, 1, 1)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(num_feat, num_feat, 3, 1, 1)

    def forward(self, x: Tensor) -> Tensor:
        return x + self.conv2(self.relu(self.conv1(x))) * self.res_scale


class EDSR(nn.Module):
    """Enhanced deep residual network for single-image SR.

    Args:
        scale: upscaling factor.
        num_feat: feature channels.
        num_block: residual blocks in the body.
        res_scale: residual branch scaling (0.1 for the 256-channel model).
        img_range: multiplier after mean subtraction (255 reproduces the [0, 255] EDSR-PyTorch convention).
        rgb_mean: mean subtracted from the input and added back to the output.

    Takes float NCHW RGB in [0, 1] of any size, returns (B, 3, scale*H, scale*W), not clamped.
    """

    prefers_channels_last = True  # all convs: cuDNN's NHWC kernels are faster (``iss.train`` on CUDA)
    OPTIONS: ClassVar[dict[str, Option]] = {  # what a checkpoint may override (iss.archs.check_overrides)
        "num_feat": Option(int, 1, 256), "num_block": Option(int, 1, 64), "res_scale": Option(float, 0, 10),
        "img_range": Option(float, 1e-3, 255), "rgb_mean": Option(float, 0, 1, max_len=3),
    }  # fmt: skip

    def __init__(
        self,
        scale: int,
        *,
        num_feat: int = 64,
        num_block: int = 16,
        res_scale: float = 1.0,
        img_range: float = 255.0,
        rgb_mean: Sequence[float] = RGB_MEAN,
    ) -> None:
        super().__init__()
        self.scale = scale
        self.img_range = img_range
        self.register_buffer("mean", torch.tensor(rgb_mean).view(1, 3, 1, 1), persistent=False)
        self.conv_first = nn.Conv2d(3, num_feat, 3, 1, 1)
        self.body = nn.Sequential(*(ResidualBlock(num_feat, res_scale) for _ in range(num_block)))
        self.conv_after_body = nn.Conv2d(num_feat, num_feat, 3, 1, 1)
        self.upsample = Upsample(scale, num_feat)
        self.conv_last = nn.Conv2d(num_feat, 3, 3, 1, 1)

    def forward(self, x: Tensor) -> Tensor:
        mean = self.mean.to(x.dtype)
        x = self.conv_first((x - mean) * self.img_range)
        x = self.conv_after_body(self.body(x)) + x
        return self.conv_last(self.upsample(x)) / self.img_range + mean


# EDSR-PyTorch (sanghyun-son/EDSR-PyTorch src/model/edsr.py) names -> BasicSR names, as in BasicSR's
# scripts/model_conversion/convert_models.py::convert_edsr. body.{num_block} is the conv after the body.
_EDSR_PYTORCH_RULES = (
    (r"^head\.0\.", "conv_first."),
    (r"^body\.(\d+)\.body\.0\.", r"body.\1.conv1."),
    (r"^body\.(\d+)\.body\.2\.", r"body.\1.conv2."),
    (r"^tail\.0\.(\d+)\.", r"upsample.\1."),
    (r"^tail\.1\.", "conv_last."),
)


def checkpoint_filter_fn(state_dict: dict[str, Tensor], model: EDSR) -> dict[str, Tensor]:
    """Rename EDSR-PyTorch keys to ours and drop its constant MeanShift convs; BasicSR files pass through."""
    if not any(k.startswith("head.") for k in state_dict):
        return state_dict
    after_body = f"body.{len(model.body)}."
    out = {}
    for key, value in state_dict.items():
        if key.startswith(("sub_mean.", "add_mean.")):
            continue
        if key.startswith(after_body):
            key = "conv_after_body." + key.removeprefix(after_body)
        for pattern, repl in _EDSR_PYTORCH_RULES:
            key = re.sub(pattern, repl, key)
        out[key] = value
    return out


def _create_edsr(scale: int, **kwargs) -> EDSR:
    return EDSR(check_scale(scale), **kwargs)


@ARCHS.register("edsr-l")
def edsr_l(*, scale: int, **overrides) -> EDSR:
    """EDSR (large): 32 blocks of 256 channels, residual scaling 0.1 (BasicSR ``EDSR_Lx{s}``)."""
    args = dict(num_feat=256, num_block=32, res_scale=0.1, img_range=255.0)
    return _create_edsr(scale, **{**args, **overrides})


@ARCHS.register("edsr-baseline")
def edsr_baseline(*, scale: int, **overrides) -> EDSR:
    """EDSR-baseline: 16 blocks of 64 channels, no residual scaling (BasicSR ``EDSR_Mx{s}``)."""
    args = dict(num_feat=64, num_block=16, res_scale=1.0, img_range=255.0)
    return _create_edsr(scale, **{**args, **overrides})
