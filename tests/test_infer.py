"""iss.infer: whole-image and tiled inference agree; shapes for odd sizes; the bicubic upscaler."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

import iss.infer
from iss.data import to_tensor
from iss.data.resize import imresize
from iss.infer import bicubic_upscaler, forward_tiled, model_upscaler, upscale_array


@pytest.fixture(autouse=True)
def _one_thread() -> Iterator[None]:
    """Tiny models run faster on one thread than on a thread pool fighting other processes for the CPU."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


class TinyConvSR(nn.Module):
    """Three 3x3 convs (receptive field 7x7 LR pixels) and a pixel shuffle: a stand-in for an SR network."""

    def __init__(self, scale: int = 2, width: int = 8) -> None:
        super().__init__()
        self.scale = scale
        self.body = nn.Sequential(
            nn.Conv2d(3, width, 3, padding=1),
            nn.ReLU(),
            nn.Conv2d(width, width, 3, padding=1),
            nn.ReLU(),
            nn.Conv2d(width, 3 * scale * scale, 3, padding=1),
        )
        self.dropout = nn.Dropout(0.5)  # shows whether inference really runs in eval mode

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        base = F.interpolate(x, scale_factor=self.scale, mode="nearest")
        return base + F.pixel_shuffle(self.dropout(self.body(x)), self.scale) * 0.1


class GlobalContextSR(TinyConvSR):
    """Adds the image mean: every output pixel depends on the whole input (receptive field > any tile)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return super().forward(x) + 0.05 * x.mean(dim=(2, 3), keepdim=True)


@pytest.fixture
def model() -> TinyConvSR:
    torch.manual_seed(0)
    return TinyConvSR(scale=2)


def _image(h: int, w: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (h, w, 3), dtype=np.uint8)


@pytest.mark.parametrize(("h", "w"), [(37, 53), (40, 40), (17, 64)])
def test_tiled_equals_whole_when_receptive_field_fits_overlap(model: TinyConvSR, h: int, w: int) -> None:
    x = to_tensor(_image(h, w))
    with torch.inference_mode():
        whole = model.eval()(x)
        tiled = forward_tiled(model, x, tile=16, overlap=8)  # radius 3 <= overlap // 2
    assert tiled.shape == whole.shape == (1, 3, 2 * h, 2 * w)
    torch.testing.assert_close(tiled, whole, rtol=0, atol=1e-6)
    img = _image(h, w)
    assert np.array_equal(upscale_array(model, img, tile=16, overlap=8), upscale_array(model, img))


def test_tiled_is_close_for_a_global_receptive_field() -> None:
    torch.manual_seed(0)
    model = GlobalContextSR(scale=3).eval()
    x = to_tensor(_image(45, 30))
    with torch.inference_mode():
        diff = (forward_tiled(model, x, tile=20, overlap=8) - model(x)).abs().max().item()
    assert 0 < diff < 0.05  # tiles see different means: close, not equal


def test_margins_matter(model: TinyConvSR) -> None:
    """With no overlap the tile borders lack context, so the output differs: the overlap is what fixes it."""
    x = to_tensor(_image(40, 40))
    with torch.inference_mode():
        seams = (forward_tiled(model.eval(), x, tile=16, overlap=0) - model(x)).abs().max().item()
    assert seams > 1e-3


@pytest.mark.parametrize(("h", "w", "scale"), [(1, 1, 2), (7, 13, 3), (33, 8, 4), (4, 40, 2)])
def test_upscale_shapes_for_odd_sizes(h: int, w: int, scale: int) -> None:
    model = TinyConvSR(scale=scale)
    for tile, overlap in ((None, 32), (5, 2), (12, 8)):  # (12, 8): some sides are smaller than the overlap
        out = upscale_array(model, _image(h, w), tile=tile, overlap=overlap)
        assert out.shape == (h * scale, w * scale, 3) and out.dtype == np.uint8


def test_upscale_restores_training_mode_and_is_deterministic(model: TinyConvSR) -> None:
    model.train()
    img = _image(12, 12)
    first = upscale_array(model, img)
    assert model.training  # mode restored
    np.testing.assert_array_equal(first, upscale_array(model, img))  # dropout was off
    assert not any(p.grad is not None for p in model.parameters())


def test_upscale_accepts_gray_and_rgba(model: TinyConvSR) -> None:
    gray = _image(6, 5)[..., 0]
    rgba = np.dstack([_image(6, 5), np.full((6, 5), 255, np.uint8)])
    assert upscale_array(model, gray).shape == (12, 10, 3)
    np.testing.assert_array_equal(upscale_array(model, rgba), upscale_array(model, rgba[..., :3]))


def test_auto_tiling_above_the_pixel_budget(model: TinyConvSR, monkeypatch: pytest.MonkeyPatch) -> None:
    calls = []
    monkeypatch.setattr(iss.infer, "AUTO_TILE_PIXELS", 20 * 20)
    monkeypatch.setattr(iss.infer, "AUTO_TILE", 16)
    monkeypatch.setattr(
        model, "forward", lambda x: calls.append(tuple(x.shape[-2:])) or TinyConvSR.forward(model, x)
    )
    upscale_array(model, _image(30, 30), overlap=4)
    assert calls == [(16, 16)] * 9  # origins 0, 12, 14 on each axis
    calls.clear()
    upscale_array(model, _image(20, 20), overlap=4)
    assert calls == [(20, 20)]


def test_tiling_arguments_are_checked(model: TinyConvSR) -> None:
    with pytest.raises(ValueError, match="tile > overlap"):
        upscale_array(model, _image(20, 20), tile=8, overlap=8)


def test_model_upscaler(model: TinyConvSR) -> None:
    img = _image(10, 9)
    np.testing.assert_array_equal(
        model_upscaler(model, tile=6, overlap=2)(img), upscale_array(model, img, tile=6, overlap=2)
    )


def test_bicubic_upscaler_is_matlab_imresize() -> None:
    img = _image(9, 11)
    out = bicubic_upscaler(3)(img)
    assert out.shape == (27, 33, 3)
    np.testing.assert_array_equal(out, imresize(img, 3))
