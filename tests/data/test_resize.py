"""MATLAB-exact bicubic: bit-identical to the official Set5 LR files, plus shape/dtype/edge behaviour."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from iss import imresize

SET5 = ("baby", "bird", "butterfly", "head", "woman")


def _png(path: Path) -> np.ndarray:
    """Read a PNG as uint8 RGB (PIL directly: the data module is tested on its own)."""
    return np.asarray(Image.open(path).convert("RGB"))


@pytest.mark.parametrize("scale", [2, 3, 4])
@pytest.mark.parametrize("name", SET5)
def test_reproduces_official_set5_lr(benchmarks: Path, name: str, scale: int) -> None:
    hr = _png(benchmarks / "Set5" / "HR" / f"{name}.png")
    hr = hr[: hr.shape[0] - hr.shape[0] % scale, : hr.shape[1] - hr.shape[1] % scale]
    lr = _png(benchmarks / "Set5" / "LR_bicubic" / f"X{scale}" / f"{name}x{scale}.png")
    out = imresize(hr, 1 / scale)
    assert out.dtype == np.uint8
    assert out.shape == lr.shape
    assert np.array_equal(out, lr), f"{int((out != lr).sum())} values differ"


@pytest.mark.parametrize("scale", [2, 3, 4, 1.5])
def test_upscale_shape_and_dtype(scale: float) -> None:
    img = np.random.default_rng(0).integers(0, 256, (13, 17, 3), dtype=np.uint8)
    out = imresize(img, scale)
    assert out.dtype == np.uint8
    assert out.shape == (int(np.ceil(13 * scale)), int(np.ceil(17 * scale)), 3)


@pytest.mark.parametrize("scale", [4, 1 / 3, 0.7])
def test_constant_image_stays_constant(scale: float) -> None:
    img = np.full((20, 31, 3), 173, dtype=np.uint8)
    assert np.all(imresize(img, scale) == 173)


def test_scale_one_is_identity() -> None:
    img = np.random.default_rng(1).integers(0, 256, (9, 11, 3), dtype=np.uint8)
    assert np.array_equal(imresize(img, 1), img)


def test_grayscale_matches_each_rgb_channel() -> None:
    img = np.random.default_rng(2).integers(0, 256, (24, 18, 3), dtype=np.uint8)
    for scale in (3, 1 / 3):
        rgb = imresize(img, scale)
        gray = np.stack([imresize(np.ascontiguousarray(img[..., c]), scale) for c in range(3)], axis=-1)
        assert np.array_equal(rgb, gray)


def test_saturates_overshoot_instead_of_wrapping() -> None:
    img = np.zeros((8, 8), dtype=np.uint8)
    img[:, 4:] = 255  # a hard edge: the cubic kernel overshoots below 0 and above 255
    out = imresize(img, 4)
    assert out[:, :10].max() == 0 and out[:, -10:].min() == 255
    assert np.all(np.diff(out[0].astype(int)) >= 0)  # monotone across the edge: no wrap-around


@pytest.mark.parametrize(
    ("img", "scale", "match"),
    [
        (np.zeros((4, 4, 3), dtype=np.float32), 2, "uint8"),
        ([[0, 1], [2, 3]], 2, "uint8"),
        (np.zeros((4,), dtype=np.uint8), 2, "HxW"),
        (np.zeros((1, 4, 4, 3), dtype=np.uint8), 2, "HxW"),
        (np.zeros((0, 4, 3), dtype=np.uint8), 2, "empty"),
        (np.zeros((4, 4, 3), dtype=np.uint8), 0, "positive"),
        (np.zeros((4, 4, 3), dtype=np.uint8), -2, "positive"),
        (np.zeros((4, 4, 3), dtype=np.uint8), float("nan"), "positive"),
        (np.zeros((4, 4, 3), dtype=np.uint8), "2", "positive"),
    ],
)
def test_rejects_bad_input(img: object, scale: object, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        imresize(img, scale)  # type: ignore[arg-type]
