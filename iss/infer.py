"""Run an SR model on one uint8 image, whole or in overlapping tiles, and the ``Upscaler`` callable type.

Models take float NCHW RGB in [0, 1] of any size and pad internally, so tiles need no size rules.
Tiling (SwinIR ``main_test_swinir.py --tile``: stride ``tile - overlap``, the last tile aligned to the border,
a count map) keeps memory bounded on large images. Unlike SwinIR, each tile drops ``overlap // 2`` output
pixels on the sides it shares with a neighbour before averaging, so a pixel is only taken from tiles where it
has enough context: for a model whose receptive field fits in ``overlap``, tiled and whole-image output agree.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable

import numpy as np
import torch
from torch import nn

from iss.data import to_rgb_uint8, to_tensor, to_uint8

__all__ = [
    "AUTO_TILE",
    "AUTO_TILE_PIXELS",
    "OVERLAP",
    "Upscaler",
    "bicubic_upscaler",
    "model_upscaler",
    "upscale_array",
]

Upscaler = Callable[[np.ndarray], np.ndarray]
"""uint8 HxWx3 LR in, uint8 (sH)x(sW)x3 SR out: what :func:`iss.evaluate.evaluate` and the app call."""

AUTO_TILE_PIXELS = 640 * 640  # LR images above this many pixels are tiled even when ``tile`` is None
AUTO_TILE = 256  # tile size used then (a multiple of the SwinIR window 8 and the CAT split 16)
OVERLAP = 32  # LR pixels neighbouring tiles share by default (a tile must be larger)


def upscale_array(
    model: nn.Module,
    img: np.ndarray,
    *,
    tile: int | None = None,
    overlap: int = OVERLAP,
    device: str | torch.device | None = None,
    on_tile: Callable[[int, int], None] | None = None,
) -> np.ndarray:
    """Super-resolve one image array: uint8 HxWx3 in, uint8 HxWx3 out (clamped and rounded); ``iss.upscale``
    takes any image (a file, PIL, an array in any mode) and returns a PIL image.

    ``tile`` splits the LR into ``tile x tile`` pieces overlapping by ``overlap``; images with more than
    ``AUTO_TILE_PIXELS`` pixels are tiled with ``AUTO_TILE`` when ``tile`` is None. ``device`` defaults to the
    model's; the model is moved there if needed. Runs in eval mode and restores the model's mode afterwards.
    ``on_tile(done, total)`` is called after each tile (a progress bar; it may raise to stop the run).
    """
    img = img if img.dtype == np.uint8 and img.ndim == 3 and img.shape[2] == 3 else to_rgb_uint8(img)
    h, w = img.shape[:2]
    if tile is None and h * w > AUTO_TILE_PIXELS:
        tile = AUTO_TILE
    device = torch.device(device) if device is not None else _model_device(model)
    model.to(device)
    was_training = model.training
    model.eval()
    try:
        with torch.inference_mode():
            x = to_tensor(img).to(device)
            if tile is None:
                out = model(x)
                if on_tile is not None:
                    on_tile(1, 1)
            else:
                out = forward_tiled(model, x, tile=tile, overlap=overlap, on_tile=on_tile)
    finally:
        model.train(was_training)
    return to_uint8(out)


def forward_tiled(
    model: nn.Module,
    x: torch.Tensor,
    *,
    tile: int,
    overlap: int = OVERLAP,
    on_tile: Callable[[int, int], None] | None = None,
) -> torch.Tensor:
    """``model(x)`` for a 1xCxHxW tensor computed tile by tile; the float result is assembled on the CPU.
    ``on_tile(done, total)`` is called after each tile."""
    if tile < 1 or overlap < 0 or overlap >= tile:
        raise ValueError(f"need tile > overlap >= 0, got tile={tile}, overlap={overlap}")
    h, w = x.shape[-2:]
    th, tw = min(tile, h), min(tile, w)
    out = weight = None
    scale = 0
    margin = overlap // 2
    origins = [(y0, x0) for y0 in _starts(h, th, overlap) for x0 in _starts(w, tw, overlap)]
    for done, (y0, x0) in enumerate(origins, 1):
        piece = model(x[..., y0 : y0 + th, x0 : x0 + tw]).float().cpu()
        if out is None:
            scale = piece.shape[-1] // tw
            if piece.shape[-2:] != (th * scale, tw * scale):
                raise ValueError(
                    f"model output {tuple(piece.shape)} is not an integer upscale of {th}x{tw} input"
                )
            out = torch.zeros(1, piece.shape[1], h * scale, w * scale)
            weight = torch.zeros(1, 1, h * scale, w * scale)
        # Keep only the part of the tile that is at least `margin` LR pixels from a neighbouring tile.
        top = 0 if y0 == 0 else margin
        left = 0 if x0 == 0 else margin
        bottom = th if y0 + th == h else th - margin
        right = tw if x0 + tw == w else tw - margin
        rows = slice((y0 + top) * scale, (y0 + bottom) * scale)
        cols = slice((x0 + left) * scale, (x0 + right) * scale)
        out[..., rows, cols] += piece[..., top * scale : bottom * scale, left * scale : right * scale]
        weight[..., rows, cols] += 1
        if on_tile is not None:
            on_tile(done, len(origins))
    return out / weight


def _starts(length: int, size: int, overlap: int) -> list[int]:
    """Tile origins along one axis: every ``size - overlap`` pixels, the last one flush with the border."""
    if size >= length:  # one tile spans the axis (the image is smaller than the tile there)
        return [0]
    return [*range(0, length - size, size - overlap), length - size]


def _model_device(model: nn.Module) -> torch.device:
    """The device of the model's first parameter or buffer (CPU for a model without any)."""
    tensor = next(itertools.chain(model.parameters(), model.buffers()), None)
    return tensor.device if tensor is not None else torch.device("cpu")


def model_upscaler(
    model: nn.Module,
    *,
    tile: int | None = None,
    overlap: int = OVERLAP,
    device: str | torch.device | None = None,
) -> Upscaler:
    """An :data:`Upscaler` running ``model`` through :func:`upscale` with fixed tiling and device."""

    def run(lr: np.ndarray) -> np.ndarray:
        return upscale_array(model, lr, tile=tile, overlap=overlap, device=device)

    return run


def bicubic_upscaler(scale: int) -> Upscaler:
    """The bicubic baseline: MATLAB ``imresize(lr, scale)`` (the "Bicubic" row of every SR table)."""
    from iss.data.resize import imresize

    def run(lr: np.ndarray) -> np.ndarray:
        return imresize(lr, scale)

    return run
