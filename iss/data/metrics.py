"""PSNR/SSIM exactly as the SR literature reports them, so our numbers sit in the same tables as the paper's.

SwinIR, CAT and BasicSR (the codebases behind the ISS-P tables) measure on the BT.601 luma (studio range,
16-235) computed in floating point and not rounded, crop ``scale`` pixels on every side, and compute SSIM
with an 11x11 Gaussian window (sigma 1.5), population variances, over the valid region only. Any other choice
moves the numbers: rounding Y costs 0.01-0.04 dB, and skimage's default SSIM settings (7x7 uniform window,
sample covariance) read 0.006-0.012 higher. EDSR's BasicSR configs report RGB PSNR instead (``psnr_rgb``).
All functions take uint8 HxWx3 RGB images, the SR output already quantised to uint8 as those codebases do.
"""

from __future__ import annotations

import numbers

import numpy as np
from skimage.metrics import structural_similarity

__all__ = ["psnr_rgb", "psnr_y", "rgb_to_y", "ssim_y"]

_Y_WEIGHTS = np.array([65.481, 128.553, 24.966]) / 255.0  # BT.601 R, G, B -> Y for 8-bit values
_SSIM_WINDOW = 11  # skimage's Gaussian window: 2 * round(3.5 * sigma) + 1 with sigma = 1.5


def _check_rgb(img: np.ndarray, name: str) -> None:
    """Raise ValueError unless ``img`` is a uint8 HxWx3 array."""
    if not isinstance(img, np.ndarray):
        raise ValueError(f"{name} must be a uint8 HxWx3 RGB numpy array, got {type(img).__name__}")
    if img.dtype != np.uint8 or img.ndim != 3 or img.shape[2] != 3:
        raise ValueError(f"{name} must be a uint8 HxWx3 RGB array, got {img.dtype} of shape {img.shape}")


def _cropped_pair(sr: np.ndarray, hr: np.ndarray, crop_border: int) -> tuple[np.ndarray, np.ndarray]:
    """Validate an (sr, hr) pair and return both with ``crop_border`` pixels removed from every side."""
    _check_rgb(sr, "sr")
    _check_rgb(hr, "hr")
    if sr.shape != hr.shape:
        raise ValueError(f"sr and hr must have the same shape, got sr {sr.shape} and hr {hr.shape}")
    if isinstance(crop_border, bool) or not isinstance(crop_border, numbers.Integral) or crop_border < 0:
        raise ValueError(f"crop_border must be a non-negative integer, got {crop_border!r}")
    if 2 * crop_border >= min(sr.shape[:2]):
        raise ValueError(f"crop_border={crop_border} leaves nothing of an image of shape {sr.shape}")
    if crop_border:
        window = (slice(crop_border, -crop_border), slice(crop_border, -crop_border))
        return sr[window], hr[window]
    return sr, hr


def _psnr(a: np.ndarray, b: np.ndarray) -> float:
    """PSNR in dB for 0-255 data: ``10 log10(255^2 / MSE)``, inf when the images are identical."""
    mse = np.mean((a.astype(np.float64) - b.astype(np.float64)) ** 2)
    return float("inf") if mse == 0 else float(10 * np.log10(255.0**2 / mse))


def rgb_to_y(img: np.ndarray) -> np.ndarray:
    """BT.601 studio-range luma ``16 + (65.481 R + 128.553 G + 24.966 B) / 255`` as float64, not rounded."""
    _check_rgb(img, "img")
    return 16.0 + img.astype(np.float64) @ _Y_WEIGHTS


def psnr_y(sr: np.ndarray, hr: np.ndarray, crop_border: int) -> float:
    """PSNR (dB) on Y after cropping ``crop_border`` pixels per side (SwinIR/CAT/BasicSR tables)."""
    sr, hr = _cropped_pair(sr, hr, crop_border)
    return _psnr(rgb_to_y(sr), rgb_to_y(hr))


def ssim_y(sr: np.ndarray, hr: np.ndarray, crop_border: int) -> float:
    """SSIM on Y after cropping ``crop_border`` pixels per side (SwinIR/CAT/BasicSR tables)."""
    sr, hr = _cropped_pair(sr, hr, crop_border)
    if min(sr.shape[:2]) < _SSIM_WINDOW:
        raise ValueError(
            f"SSIM needs at least {_SSIM_WINDOW}x{_SSIM_WINDOW} pixels after cropping, got {sr.shape}"
        )
    # These settings equal BasicSR's _ssim (cv2 11x11 Gaussian, valid region, biased variances) to ~1e-14 on
    # float64 input; skimage keeps float32 input in float32, so Y stays float64 here.
    return float(
        structural_similarity(
            rgb_to_y(sr),
            rgb_to_y(hr),
            gaussian_weights=True,
            sigma=1.5,
            use_sample_covariance=False,
            data_range=255,
        )
    )


def psnr_rgb(sr: np.ndarray, hr: np.ndarray, crop_border: int) -> float:
    """PSNR (dB) over all RGB channels after cropping (BasicSR EDSR configs: ``test_y_channel: false``)."""
    sr, hr = _cropped_pair(sr, hr, crop_border)
    return _psnr(sr, hr)
