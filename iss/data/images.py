"""Images in, uint8 RGB out: the one image loader, and conversions to and from tensors.

Every image enters the project through :func:`read_image` / :func:`decode_image` (files, including the app's
uploads) or :func:`to_rgb_uint8` (PIL images and arrays), so all code sees the same thing: a uint8 HxWx3 RGB
array. Grayscale is copied to three channels, transparency is composited on white, 16-bit data is scaled to 8
bits. Only ``FORMATS`` are decoded; a pixel limit and a longest-side target keep hostile or huge files cheap.

"""

from __future__ import annotations

import os
from pathlib import Path
from typing import NamedTuple

import numpy as np
import torch
from PIL import ExifTags, Image, UnidentifiedImageError

__all__ = [
    "FORMATS",
    "MAX_PIXELS",
    "Decoded",
    "ImageError",
    "decode_image",
    "modcrop",
    "read_image",
    "to_rgb_uint8",
    "to_tensor",
    "to_uint8",
]


class ImageError(ValueError):
    """An image file (or array) that cannot become uint8 RGB; ``reason`` says why without naming the path."""

    def __init__(self, reason: str, path: str | os.PathLike | None = None) -> None:
        self.reason, self.path = reason, path
        super().__init__(reason if path is None else f"cannot read image {path}: {reason}")


class Decoded(NamedTuple):
    """An image file as the loader returns it, with what a caller may want to report about the original."""

    image: np.ndarray  # uint8 HxWx3 RGB, EXIF orientation applied, at most ``max_side`` px on its long side
    size: tuple[int, int]  # (width, height) of the stored image, as displayed (EXIF orientation applied)
    mode: str  # Pillow mode of the stored image ("RGB", "RGBA", "P", "I;16", ...)
    frames: int = 1  # frames or pages in the file (animated PNG/WebP, multi-page TIFF): the first is decoded


# --------------------------------------------------------------------------------------------------- loading

FORMATS = ("PNG", "JPEG", "WEBP", "BMP", "TIFF", "PPM")  # the decoders Pillow may use (PPM covers PGM/PBM)
MAX_PIXELS = 50_000_000  # user images above this are refused from their header (app, iss.upscale): ~300 MB
_SNIFF = {b"%pdf": "a PDF document", b"<svg": "an SVG drawing", b"<?xml": "an XML/SVG file",
          b"<!doctype html": "an HTML page", b"<html": "an HTML page", b"gif8": "a GIF"}  # fmt: skip
_TRANSPOSE = {  # EXIF orientation -> the array operation that displays the image upright
    2: lambda a: a[:, ::-1],
    3: lambda a: a[::-1, ::-1],
    4: lambda a: a[::-1],
    5: lambda a: a.transpose(1, 0, 2),
    6: lambda a: np.rot90(a, -1),
    7: lambda a: np.rot90(a, 1)[:, ::-1],
    8: lambda a: np.rot90(a, 1),
}
_REDUCE_GAP = 3  # box-reduce by an integer factor down to >= 3x the target, then bicubic (Pillow's advice)


def read_image(
    path: str | os.PathLike, *, max_pixels: int | None = None, max_side: int | None = None
) -> np.ndarray:
    """Load an image file as uint8 HxWx3 RGB (EXIF orientation applied); raise ``ImageError`` if unreadable.

    The array of :func:`decode_image`, which documents ``max_pixels`` and ``max_side``.
    """
    return decode_image(path, max_pixels=max_pixels, max_side=max_side).image


def decode_image(
    path: str | os.PathLike, *, max_pixels: int | None = None, max_side: int | None = None
) -> Decoded:
    """Decode an image file (one of ``FORMATS``) within a budget; raise ``ImageError`` saying why it cannot.

    ``max_pixels`` refuses a larger image from its header, before anything is decoded (without it, Pillow's
    decompression-bomb limit applies). ``max_side`` shrinks an image whose longer side exceeds it to exactly
    that side: JPEG is decoded at 1/2, 1/4 or 1/8 size where that is still large enough, then the 8-bit image
    is box-reduced by an integer factor and resampled (bicubic, antialiased), all before any float copy.
    """
    path = Path(path)
    if not path.is_file():
        raise ImageError("no such file", path)
    try:
        with _open(path) as im:
            mode, (w, h), frames = im.mode, im.size, getattr(im, "n_frames", 1)
            _check_pixels((w, h), max_pixels)
            if max_side is not None and max(w, h) > max_side and im.format == "JPEG":
                im.draft(None, _fit((w, h), max_side))  # decoded at 1/2-1/8 size: less time and memory
            im.load()
            rgb = to_rgb_uint8(im, max_side=max_side)
            orientation = _orientation(im)
    except ImageError as e:
        raise ImageError(e.reason, path) from None
    except Image.DecompressionBombError:  # Pillow's own limit, checked before ours can be
        bomb = 2 * Image.MAX_IMAGE_PIXELS
        reason = f"too large: over {bomb:,} pixels (the limit is {max_pixels or bomb:,})"
        raise ImageError(reason, path) from None
    except Exception as e:  # Pillow raises many types (OSError, SyntaxError, struct.error...) on hostile data
        raise ImageError(f"corrupt or truncated image data ({type(e).__name__}: {e})", path) from None
    if orientation in _TRANSPOSE:
        rgb = np.ascontiguousarray(_TRANSPOSE[orientation](rgb))
        w, h = (h, w) if orientation >= 5 else (w, h)
    return Decoded(rgb, (w, h), mode, frames)


def _open(path: Path) -> Image.Image:
    """``Image.open`` restricted to ``FORMATS``; a file of another kind gets a message naming what it is."""
    try:
        return Image.open(path, formats=FORMATS)
    except UnidentifiedImageError:
        with path.open("rb") as f:
            head = f.read(64).lstrip().lower()
        kinds = [f"looks like {kind}" for magic, kind in _SNIFF.items() if head.startswith(magic)]
        what = "empty file" if not head else (kinds or [f"readable formats: {', '.join(FORMATS)}"])[0]
        raise ImageError(f"not an image ({what})") from None


def _check_pixels(size: tuple[int, int], max_pixels: int | None) -> None:
    """Refuse an image larger than ``max_pixels`` with a message saying how large it is."""
    w, h = size
    if max_pixels is not None and w * h > max_pixels:
        raise ImageError(f"too large: {w}x{h} = {w * h:,} pixels (the limit is {max_pixels:,})")


def _fit(size: tuple[int, int], max_side: int) -> tuple[int, int]:
    """``size`` scaled so that its longer side is ``max_side`` (each side at least 1)."""
    w, h = size
    factor = max_side / max(w, h)
    return max(1, round(w * factor)), max(1, round(h * factor))


def _orientation(im: Image.Image) -> int:
    """The EXIF orientation tag (1 = as stored); a malformed EXIF block counts as 1."""
    try:
        return int(im.getexif().get(ExifTags.Base.Orientation, 1))
    except Exception:  # broken EXIF must not make a decodable image unreadable
        return 1


def to_rgb_uint8(
    x: Image.Image | np.ndarray, *, max_pixels: int | None = None, max_side: int | None = None
) -> np.ndarray:
    """Convert a PIL image or an HxW / HxWxC (C in 1-4) array to uint8 HxWx3 RGB.

    Conversions: gray and palette to RGB; alpha composited on white; 16-bit (``I;16``, uint16) scaled by
    255/65535; ``I`` / integer arrays read as 8-bit when all values are <= 255, else as 16-bit; float (``F``)
    read as [0, 1] when all values are <= 1, else as [0, 255]; everything rounded and clipped to [0, 255].
    ``max_pixels`` refuses larger inputs; ``max_side`` shrinks as :func:`decode_image` does.
    """
    if isinstance(x, Image.Image):
        _check_pixels(x.size, max_pixels)
        return _array_to_rgb(_pil_to_array(_shrink(x, max_side)))
    if isinstance(x, np.ndarray):
        if x.ndim >= 2:
            _check_pixels((x.shape[1], x.shape[0]), max_pixels)
        rgb = _array_to_rgb(x)
        return rgb if max_side is None else np.asarray(_shrink(Image.fromarray(rgb), max_side))
    raise ImageError(f"expected a PIL image or a numpy array, got {type(x).__name__}")


def _shrink(im: Image.Image, max_side: int | None) -> Image.Image:
    """``im`` with its longer side reduced to ``max_side`` (unchanged when it already fits)."""
    if max_side is None or max(im.size) <= max_side:
        return im
    if im.mode in ("1", "P", "PA"):  # Pillow resamples these with nearest neighbour only
        im = im.convert("L" if im.mode == "1" else _palette_mode(im))
    target = _fit(im.size, max_side)
    factor = min(im.width // target[0], im.height // target[1]) // _REDUCE_GAP
    if factor > 1 and not im.mode.startswith("I;16"):  # Pillow cannot box-reduce 16-bit images
        im = im.reduce(factor)
    return im.resize(target, Image.Resampling.BICUBIC)


def _palette_mode(im: Image.Image) -> str:
    """What a palette image converts to: RGBA when it has transparency, else RGB."""
    return "RGBA" if im.mode == "PA" or "transparency" in im.info else "RGB"


def _pil_to_array(im: Image.Image) -> np.ndarray:
    """Decode a PIL image into an array whose dtype tells its range (uint8, uint16, int32, float32)."""
    if im.mode.startswith("I;16"):
        return np.asarray(im).astype(np.uint16)
    if im.mode in ("1", "L", "RGB", "RGBA", "LA", "I", "F"):
        return np.asarray(im.convert("L") if im.mode == "1" else im)
    if im.mode in ("P", "PA"):
        return np.asarray(im.convert(_palette_mode(im)))
    if im.mode in ("La", "RGBa"):
        return np.asarray(im.convert("RGBA"))
    try:  # CMYK, YCbCr, HSV, ...
        return np.asarray(im.convert("RGB"))
    except (ValueError, OSError) as e:
        raise ImageError(f"unsupported image mode {im.mode!r} ({e})") from None


def _array_to_rgb(a: np.ndarray) -> np.ndarray:
    """Normalise range, channels and alpha of an HxW or HxWxC array into uint8 HxWx3."""
    if a.ndim == 3 and a.shape[2] == 1:
        a = a[:, :, 0]
    if a.ndim not in (2, 3) or (a.ndim == 3 and a.shape[2] not in (2, 3, 4)) or 0 in a.shape:
        raise ImageError(f"expected an HxW or HxWxC image with C in 1-4, got shape {a.shape}")
    if a.dtype == np.uint8 and a.ndim == 2:  # the common cases need no float copy
        return np.repeat(a[:, :, None], 3, axis=2)
    if a.dtype == np.uint8 and a.shape[2] == 3:
        return np.ascontiguousarray(a)
    values = _to_unit_range(a)
    if a.ndim == 2:
        values = values[:, :, None]
    if values.shape[2] in (2, 4):  # gray+alpha or RGBA: composite on white
        alpha = values[:, :, -1:]
        values = values[:, :, :-1] * alpha + (1.0 - alpha)
    if values.shape[2] == 1:
        values = np.repeat(values, 3, axis=2)
    return np.clip(np.round(values * 255.0), 0, 255).astype(np.uint8)


def _to_unit_range(a: np.ndarray) -> np.ndarray:
    """Map the array's values to float64 [0, 1] according to its dtype (and range, for ``I``/float data)."""
    if a.dtype == np.uint8:
        return a / 255.0
    if a.dtype == np.bool_:
        return a.astype(np.float64)
    if a.dtype == np.uint16:
        return a / 65535.0
    if np.issubdtype(a.dtype, np.integer):
        top = 255.0 if a.max() <= 255 else 65535.0
        return np.clip(a, 0, top) / top
    if np.issubdtype(a.dtype, np.floating):
        if not np.isfinite(a).all():
            raise ImageError("image contains NaN or infinite values")
        top = 1.0 if a.max() <= 1.0 else 255.0
        return np.clip(a.astype(np.float64), 0.0, top) / top
    raise ImageError(f"unsupported image dtype {a.dtype}")


# ------------------------------------------------------------------------------------------------- tensors


def to_tensor(img: np.ndarray) -> torch.Tensor:
    """uint8 HxWxC image -> float32 1xCxHxW tensor in [0, 1] (what the models take)."""
    if img.dtype != np.uint8 or img.ndim != 3:
        raise ValueError(f"to_tensor expects a uint8 HxWxC array, got {img.dtype} {img.shape}")
    # numpy, not torch ops: tiny torch kernels pay thread-pool overhead that dominates DataLoader workers.
    chw = np.ascontiguousarray(img.transpose(2, 0, 1), dtype=np.float32) / np.float32(255.0)
    return torch.from_numpy(chw).unsqueeze(0)


def to_uint8(tensor: torch.Tensor) -> np.ndarray:
    """float 1xCxHxW (or CxHxW) tensor in [0, 1] -> uint8 HxWxC: clamp, x255, round (as published tables)."""
    t = tensor.detach()
    if t.ndim == 4:
        if t.shape[0] != 1:
            raise ValueError(f"to_uint8 takes one image, got a batch of {t.shape[0]}")
        t = t[0]
    if t.ndim != 3:
        raise ValueError(f"to_uint8 expects a CxHxW or 1xCxHxW tensor, got shape {tuple(tensor.shape)}")
    t = t.float().clamp(0.0, 1.0).mul(255.0).round().to(torch.uint8)
    return t.permute(1, 2, 0).cpu().numpy()


def modcrop(img: np.ndarray, scale: int) -> np.ndarray:
    """Crop the bottom/right so height and width are multiples of ``scale`` (as the LR was made)."""
    if isinstance(scale, bool) or not isinstance(scale, int) or scale < 1:
        raise ValueError(f"scale must be a positive integer, got {scale!r}")
    h, w = img.shape[:2]
    return img[: h - h % scale, : w - w % scale]
