"""Y-channel PSNR/SSIM: hand-computable values, argument checks, an independent SSIM, the bicubic Set5 row."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from iss import imresize
from iss.data.metrics import psnr_rgb, psnr_y, rgb_to_y, ssim_y

SET5 = ("baby", "bird", "butterfly", "head", "woman")
# Published bicubic row (Y, crop = scale) for Set5: scale -> (PSNR, SSIM).
BICUBIC_SET5 = {2: (33.66, 0.9299), 3: (30.39, 0.8682), 4: (28.42, 0.8104)}


def _png(path: Path) -> np.ndarray:
    return np.asarray(Image.open(path).convert("RGB"))


def _set5_pair(benchmarks: Path, name: str, scale: int) -> tuple[np.ndarray, np.ndarray]:
    """(bicubic upscale of the official LR, mod-cropped HR) for one Set5 image."""
    hr = _png(benchmarks / "Set5" / "HR" / f"{name}.png")
    hr = hr[: hr.shape[0] - hr.shape[0] % scale, : hr.shape[1] - hr.shape[1] % scale]
    lr = _png(benchmarks / "Set5" / "LR_bicubic" / f"X{scale}" / f"{name}x{scale}.png")
    return imresize(lr, scale), hr


def _reference_ssim(a: np.ndarray, b: np.ndarray) -> float:
    """Direct SSIM as in BasicSR: 11x11 Gaussian (sigma 1.5), valid region, biased variances."""
    g = np.exp(-(np.arange(-5, 6) ** 2) / (2 * 1.5**2))
    g /= g.sum()

    def blur(x: np.ndarray) -> np.ndarray:  # separable 'valid' correlation
        x = np.lib.stride_tricks.sliding_window_view(x, 11, axis=0) @ g
        return np.lib.stride_tricks.sliding_window_view(x, 11, axis=1) @ g

    c1, c2 = (0.01 * 255) ** 2, (0.03 * 255) ** 2
    mu_a, mu_b = blur(a), blur(b)
    var_a, var_b = blur(a * a) - mu_a**2, blur(b * b) - mu_b**2
    cov = blur(a * b) - mu_a * mu_b
    ssim_map = ((2 * mu_a * mu_b + c1) * (2 * cov + c2)) / ((mu_a**2 + mu_b**2 + c1) * (var_a + var_b + c2))
    return float(ssim_map.mean())


def _random(shape: tuple[int, ...], seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, shape, dtype=np.uint8)


def test_rgb_to_y_known_values() -> None:
    img = np.array([[[0, 0, 0], [255, 255, 255], [255, 0, 0], [0, 1, 0]]], dtype=np.uint8)
    y = rgb_to_y(img)
    assert y.dtype == np.float64 and y.shape == (1, 4)
    np.testing.assert_allclose(y[0], [16.0, 235.0, 16 + 65.481, 16 + 128.553 / 255], rtol=0, atol=1e-12)


def test_psnr_hand_computed() -> None:
    hr = np.full((16, 16, 3), 100, dtype=np.uint8)
    sr = hr.copy()
    sr[..., 1] += 1  # green +1 everywhere: Y moves by 128.553/255, one RGB value in three by 1
    assert psnr_y(sr, hr, 0) == pytest.approx(20 * np.log10(255 / (128.553 / 255)), abs=1e-10)
    assert psnr_rgb(sr, hr, 0) == pytest.approx(10 * np.log10(255**2 * 3), abs=1e-10)


def test_identical_images() -> None:
    img = _random((32, 32, 3))
    assert psnr_y(img, img, 2) == float("inf")
    assert psnr_rgb(img, img, 2) == float("inf")
    assert ssim_y(img, img, 2) == pytest.approx(1.0, abs=1e-12)


def test_crop_border_removes_the_border_only() -> None:
    hr = _random((24, 24, 3))
    sr = hr.copy()
    sr[:3] = 255 - sr[:3]  # damage only the top 3 rows
    assert psnr_y(sr, hr, 3) == float("inf")
    assert psnr_rgb(sr, hr, 3) == float("inf")
    assert ssim_y(sr, hr, 3) == pytest.approx(1.0, abs=1e-12)
    assert psnr_y(sr, hr, 2) < 30 and ssim_y(sr, hr, 2) < 1


def test_shape_mismatch_names_both_shapes() -> None:
    with pytest.raises(ValueError, match=r"\(16, 16, 3\).*\(16, 18, 3\)"):
        psnr_y(_random((16, 16, 3)), _random((16, 18, 3)), 2)
    with pytest.raises(ValueError, match=r"\(16, 16, 3\).*\(17, 16, 3\)"):
        ssim_y(_random((16, 16, 3)), _random((17, 16, 3)), 2)


@pytest.mark.parametrize(
    ("sr", "crop_border", "match"),
    [
        (np.zeros((16, 16, 3), dtype=np.float32), 2, "uint8"),
        (np.zeros((16, 16), dtype=np.uint8), 2, "HxWx3"),
        (np.zeros((16, 16, 4), dtype=np.uint8), 2, "HxWx3"),
        ([[0]], 2, "numpy"),
        (np.zeros((16, 16, 3), dtype=np.uint8), -1, "non-negative"),
        (np.zeros((16, 16, 3), dtype=np.uint8), 2.5, "non-negative"),
        (np.zeros((16, 16, 3), dtype=np.uint8), 8, "leaves nothing"),
    ],
)
def test_rejects_bad_arguments(sr: object, crop_border: object, match: str) -> None:
    hr = np.zeros((16, 16, 3), dtype=np.uint8)
    for metric in (psnr_y, ssim_y, psnr_rgb):
        with pytest.raises(ValueError, match=match):
            metric(sr, hr, crop_border)  # type: ignore[arg-type]


def test_ssim_needs_a_full_window() -> None:
    with pytest.raises(ValueError, match="11x11"):
        ssim_y(_random((20, 20, 3)), _random((20, 20, 3), 1), 5)


def test_ssim_matches_direct_implementation(benchmarks: Path) -> None:
    sr, hr = _set5_pair(benchmarks, "butterfly", 4)
    crop = (slice(4, -4), slice(4, -4))
    expected = _reference_ssim(rgb_to_y(sr)[crop], rgb_to_y(hr)[crop])
    assert ssim_y(sr, hr, 4) == pytest.approx(expected, abs=1e-10)
    assert 0.5 < expected < 0.99  # a real, imperfect pair: the check is not trivially 1 == 1


@pytest.mark.parametrize("scale", [2, 3, 4])
def test_bicubic_set5_matches_published_row(benchmarks: Path, scale: int) -> None:
    pairs = [_set5_pair(benchmarks, name, scale) for name in SET5]
    psnr = np.mean([psnr_y(sr, hr, scale) for sr, hr in pairs])
    ssim = np.mean([ssim_y(sr, hr, scale) for sr, hr in pairs])
    print(f"bicubic Set5 x{scale}: {psnr:.4f} dB / {ssim:.4f}")
    assert psnr == pytest.approx(BICUBIC_SET5[scale][0], abs=0.03)
    assert ssim == pytest.approx(BICUBIC_SET5[scale][1], abs=0.001)
