"""iss.data: the one image loader, benchmark sets (shipped and generated LR) and training patches."""

from __future__ import annotations

import io
import itertools
import shutil
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from common import bad_uploads, png_bytes
from PIL import Image, ImageOps
from PIL.JpegImagePlugin import JpegImageFile
from torch.utils.data import DataLoader

import iss.data.resize
from iss.data import (
    BENCHMARKS,
    FORMATS,
    BenchmarkSet,
    DevicePatches,
    ImageError,
    TrainPatches,
    benchmark_name,
    decode_image,
    modcrop,
    read_image,
    to_rgb_uint8,
    to_tensor,
    to_uint8,
)


@pytest.fixture(autouse=True)
def _private_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Every test gets its own LR cache, so nothing leaks into ~/.cache or between tests."""
    cache = tmp_path / "cache"
    monkeypatch.setenv("ISS_CACHE_DIR", str(cache))
    return cache


def _png16(a: np.ndarray) -> bytes:
    """A 16-bit PNG of an HxWxC uint16 array (Pillow cannot write 16-bit colour PNGs)."""
    h, w, c = a.shape
    raw = b"".join(b"\x00" + a[y].astype(">u2").tobytes() for y in range(h))
    return png_bytes(w, h, 16, {1: 0, 3: 2, 4: 6}[c], raw)


def _random_image(h: int, w: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (h, w, 3), dtype=np.uint8)


# ----------------------------------------------------------------------------------------------- read_image


def test_read_rgb_roundtrip(tmp_path: Path) -> None:
    img = _random_image(7, 5)
    Image.fromarray(img).save(tmp_path / "a.png")
    out = read_image(tmp_path / "a.png")
    assert out.dtype == np.uint8 and out.shape == (7, 5, 3)
    np.testing.assert_array_equal(out, img)


def test_read_grayscale_is_copied_to_three_channels(tmp_path: Path) -> None:
    gray = np.arange(12, dtype=np.uint8).reshape(3, 4) * 20
    Image.fromarray(gray, "L").save(tmp_path / "g.png")
    Image.fromarray(gray > 100).save(tmp_path / "bw.png")  # mode "1"
    out = read_image(tmp_path / "g.png")
    assert out.shape == (3, 4, 3)
    for c in range(3):
        np.testing.assert_array_equal(out[..., c], gray)
    np.testing.assert_array_equal(read_image(tmp_path / "bw.png")[..., 0], np.where(gray > 100, 255, 0))


def test_read_rgba_and_la_are_composited_on_white(tmp_path: Path) -> None:
    rgba = np.zeros((2, 2, 4), np.uint8)
    rgba[..., 0] = 200
    rgba[..., 3] = [[0, 255], [128, 255]]
    Image.fromarray(rgba, "RGBA").save(tmp_path / "t.png")
    out = read_image(tmp_path / "t.png").astype(int)
    assert out[0, 0].tolist() == [255, 255, 255]  # fully transparent -> white
    assert out[0, 1].tolist() == [200, 0, 0]  # opaque -> unchanged
    a = 128 / 255  # half transparent -> blended with white
    assert out[1, 0].tolist() == [round(200 * a + 255 * (1 - a)), round(255 * (1 - a)), round(255 * (1 - a))]
    la = np.stack([np.full((2, 2), 0, np.uint8), np.array([[0, 255], [255, 255]], np.uint8)], -1)
    Image.fromarray(la, "LA").save(tmp_path / "la.png")
    assert read_image(tmp_path / "la.png")[:, :, 0].tolist() == [[255, 0], [0, 0]]


def test_read_palette_with_transparency(tmp_path: Path) -> None:
    im = Image.new("P", (2, 1))
    im.putpalette([255, 0, 0, 0, 0, 255] + [0] * 762)
    im.putpixel((0, 0), 0)
    im.putpixel((1, 0), 1)
    im.info["transparency"] = 0
    im.save(tmp_path / "p.png", transparency=0)
    assert read_image(tmp_path / "p.png").tolist() == [[[255, 255, 255], [0, 0, 255]]]


def test_read_16bit_gray_and_rgb(tmp_path: Path) -> None:
    gray = np.arange(16, dtype=np.uint16).reshape(4, 4) * 4369  # 0 .. 65535
    Image.fromarray(gray).save(tmp_path / "g16.png")  # mode I;16
    out = read_image(tmp_path / "g16.png")
    np.testing.assert_array_equal(out[..., 1], np.round(gray / 257).astype(np.uint8))
    rgb = np.zeros((2, 3, 3), np.uint16)
    rgb[..., 0], rgb[..., 1], rgb[..., 2] = 65535, 257 * 100, 0
    (tmp_path / "c16.png").write_bytes(_png16(rgb))
    assert read_image(tmp_path / "c16.png")[0, 0].tolist() == [255, 100, 0]


def test_read_applies_exif_orientation(tmp_path: Path) -> None:
    img = _random_image(2, 3)
    exif = Image.Exif()
    exif[0x0112] = 6  # rotate 90 degrees clockwise for display
    Image.fromarray(img).save(tmp_path / "r.png", exif=exif)
    out = read_image(tmp_path / "r.png")
    np.testing.assert_array_equal(out, np.rot90(img, k=-1))


@pytest.mark.parametrize(
    ("name", "content", "reason"),
    [
        ("notes.png", b"hello, I am text", "not an image"),
        ("empty.jpg", b"", "not an image"),
    ],
)
def test_read_not_an_image_raises(tmp_path: Path, name: str, content: bytes, reason: str) -> None:
    (tmp_path / name).write_bytes(content)
    with pytest.raises(ImageError, match=reason) as err:
        read_image(tmp_path / name)
    assert str(tmp_path / name) in str(err.value)


def test_read_truncated_png_raises(tmp_path: Path) -> None:
    buf = io.BytesIO()
    Image.fromarray(_random_image(64, 64)).save(buf, format="PNG")
    (tmp_path / "cut.png").write_bytes(buf.getvalue()[: len(buf.getvalue()) // 2])
    with pytest.raises(ImageError, match=r"cut\.png"):
        read_image(tmp_path / "cut.png")


def test_read_missing_file_and_pixel_cap(tmp_path: Path) -> None:
    with pytest.raises(ImageError, match="no such file"):
        read_image(tmp_path / "missing.png")
    Image.fromarray(_random_image(30, 40)).save(tmp_path / "big.png")
    with pytest.raises(ImageError, match=r"too large: 40x30 = 1,200 pixels \(the limit is 1,000\)"):
        read_image(tmp_path / "big.png", max_pixels=1000)
    assert read_image(tmp_path / "big.png", max_pixels=1200).shape == (30, 40, 3)
    assert issubclass(ImageError, ValueError)


@pytest.mark.parametrize("name", list(bad_uploads()))
def test_hostile_files_are_refused_in_one_line_before_decoding(tmp_path: Path, name: str) -> None:
    content, expected = bad_uploads()[name]
    path = tmp_path / name
    path.write_bytes(content)
    start = time.perf_counter()
    with pytest.raises(ImageError) as err:
        decode_image(path, max_pixels=50_000_000, max_side=1024)
    assert time.perf_counter() - start < 2  # the bombs are refused from their header, not decoded
    assert expected in err.value.reason and "\n" not in str(err.value)
    assert str(path) not in err.value.reason and str(path) in str(err.value)


def test_pillows_own_bomb_limit_gets_the_same_kind_of_message(tmp_path: Path) -> None:
    content, _ = bad_uploads()["header.png"]
    (tmp_path / "h.png").write_bytes(content)
    with pytest.raises(ImageError, match=r"too large: over 178,956,970 pixels \(the limit is 178,956,970\)"):
        read_image(tmp_path / "h.png")  # no max_pixels: Pillow's decompression-bomb limit
    (tmp_path / "a.gif").write_bytes(b"GIF89a" + b"\x00" * 20)
    with pytest.raises(ImageError, match=r"not an image \(looks like a GIF\)"):
        read_image(tmp_path / "a.gif")
    assert "GIF" not in FORMATS  # only the formats the loader documents are decoded
    (tmp_path / "a.bin").write_bytes(b"\x00\x01 not a known kind of file")
    with pytest.raises(
        ImageError, match=r"not an image \(readable formats: PNG, JPEG, WEBP, BMP, TIFF, PPM\)"
    ):
        read_image(tmp_path / "a.bin")


@pytest.mark.parametrize(
    ("mode", "color", "suffix"),
    [
        ("1", 1, ".png"),
        ("L", 90, ".png"),
        ("P", 3, ".png"),
        ("RGB", (200, 120, 40), ".png"),
        ("RGBA", (200, 120, 40, 255), ".png"),
        ("LA", (90, 255), ".png"),
        ("I;16", 40000, ".png"),
        ("I", 200, ".tif"),
        ("F", 0.25, ".tif"),
        ("CMYK", (10, 80, 160, 0), ".jpg"),
        ("RGB", (200, 120, 40), ".webp"),
    ],
)
def test_max_side_shrinks_every_mode_to_the_cap(tmp_path: Path, mode: str, color, suffix: str) -> None:
    im = Image.new(mode, (900, 600), color)
    if mode == "P":
        im.putpalette([0, 0, 0] * 3 + [30, 160, 220] + [0, 0, 0] * 252)
    im.save(tmp_path / f"a{suffix}", **({"quality": 95} if suffix == ".jpg" else {}))
    full = decode_image(tmp_path / f"a{suffix}")
    small = decode_image(tmp_path / f"a{suffix}", max_side=90)
    assert small.image.shape == (60, 90, 3) and small.image.dtype == np.uint8
    assert small.size == full.size == (900, 600) and small.mode == full.mode
    assert np.abs(small.image.astype(int) - full.image[0, 0].astype(int)).max() <= 3  # same colour


def test_max_side_resamples_like_pillow_bicubic(tmp_path: Path) -> None:
    smooth = np.asarray(Image.fromarray(_random_image(12, 18)).resize((1800, 1200), Image.BICUBIC))
    Image.fromarray(smooth).save(tmp_path / "s.png")
    out = read_image(tmp_path / "s.png", max_side=180)  # box-reduced by 3 first, then bicubic
    direct = np.asarray(Image.fromarray(smooth).resize((180, 120), Image.BICUBIC))
    assert out.shape == (120, 180, 3) and np.abs(out.astype(int) - direct).mean() < 1.0
    small = _random_image(30, 40)
    Image.fromarray(small).save(tmp_path / "n.png")
    np.testing.assert_array_equal(read_image(tmp_path / "n.png", max_side=40), small)  # fits: untouched


def test_jpeg_is_decoded_at_reduced_size(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    smooth = np.asarray(Image.fromarray(_random_image(12, 16)).resize((1600, 1200), Image.BICUBIC))
    Image.fromarray(smooth).save(tmp_path / "a.jpg", quality=95)
    drafts = []
    real_draft = JpegImageFile.draft
    monkeypatch.setattr(
        JpegImageFile, "draft", lambda im, mode, size: drafts.append(size) or real_draft(im, mode, size)
    )
    out = read_image(tmp_path / "a.jpg", max_side=200)
    assert drafts == [(200, 150)] and out.shape == (150, 200, 3)  # decoded at 1/8, then resampled
    direct = np.asarray(Image.fromarray(smooth).resize((200, 150), Image.BICUBIC))
    assert np.abs(out.astype(int) - direct).mean() < 3.0


@pytest.mark.parametrize("orientation", range(1, 9))
def test_every_exif_orientation_matches_pillow(tmp_path: Path, orientation: int) -> None:
    exif = Image.Exif()
    exif[0x0112] = orientation
    Image.fromarray(_random_image(20, 30)).save(tmp_path / "o.png", exif=exif)
    with Image.open(tmp_path / "o.png") as im:
        expected = np.asarray(ImageOps.exif_transpose(im).convert("RGB"))
    decoded = decode_image(tmp_path / "o.png")
    np.testing.assert_array_equal(decoded.image, expected)
    assert decoded.size == (expected.shape[1], expected.shape[0])
    assert decode_image(tmp_path / "o.png", max_side=15).image.shape[:2] == (
        (10, 15) if expected.shape[1] > expected.shape[0] else (15, 10)
    )


# --------------------------------------------------------------------------------------------- to_rgb_uint8


def test_to_rgb_uint8_arrays_and_pil() -> None:
    gray = np.array([[0, 128]], np.uint8)
    assert to_rgb_uint8(gray).tolist() == [[[0, 0, 0], [128, 128, 128]]]
    assert to_rgb_uint8(gray[..., None]).shape == (1, 2, 3)
    assert to_rgb_uint8(np.array([[0.0, 0.5, 1.0]])).tolist()[0] == [[0] * 3, [128] * 3, [255] * 3]
    assert to_rgb_uint8(np.array([[0.0, 255.0]], np.float32))[0, 1, 0] == 255  # float beyond 1: [0, 255]
    assert to_rgb_uint8(np.array([[65535, 257]], np.uint16))[0, :, 0].tolist() == [255, 1]
    assert to_rgb_uint8(np.array([[3, 200]], np.int32))[0, :, 0].tolist() == [3, 200]
    assert to_rgb_uint8(np.array([[3, 65535]], np.int64))[0, :, 0].tolist() == [0, 255]
    img = _random_image(4, 6)
    np.testing.assert_array_equal(to_rgb_uint8(Image.fromarray(img)), img)
    np.testing.assert_array_equal(to_rgb_uint8(Image.fromarray(img).convert("CMYK")), img)


@pytest.mark.parametrize(
    "bad",
    [
        np.zeros((3, 4, 5), np.uint8),
        np.zeros(5, np.uint8),
        np.zeros((0, 4), np.uint8),
        np.array([[np.nan]]),
        "x",
    ],
)
def test_to_rgb_uint8_rejects(bad: object) -> None:
    with pytest.raises(ImageError):
        to_rgb_uint8(bad)  # type: ignore[arg-type]


# ------------------------------------------------------------------------------------ tensors and modcrop


def test_tensor_roundtrip_and_rounding() -> None:
    img = _random_image(5, 7)
    t = to_tensor(img)
    assert t.shape == (1, 3, 5, 7) and t.dtype == torch.float32 and t.min() >= 0 and t.max() <= 1
    np.testing.assert_array_equal(to_uint8(t), img)
    np.testing.assert_array_equal(to_uint8(t[0]), img)
    out = to_uint8(torch.tensor([-0.5, 2.0, 0.5 / 255, 1.5 / 255, 100.4 / 255]).view(1, 1, 1, 5))
    assert out[0, :, 0].tolist() == [0, 255, 0, 2, 100]  # clamped; round half to even like torch.round
    with pytest.raises(ValueError, match="batch"):
        to_uint8(torch.zeros(2, 3, 4, 4))
    with pytest.raises(ValueError):
        to_tensor(img.astype(np.float32))


def test_modcrop() -> None:
    img = np.zeros((13, 10, 3), np.uint8)
    assert modcrop(img, 4).shape == (12, 8, 3)
    assert modcrop(img, 1).shape == img.shape
    assert modcrop(img[..., 0], 3).shape == (12, 9)
    with pytest.raises(ValueError):
        modcrop(img, 0)


# ----------------------------------------------------------------------------------------------- benchmarks


def test_benchmark_names() -> None:
    assert BENCHMARKS == ("Set5", "Set14", "B100", "Urban100", "Manga109")
    assert benchmark_name("set5") == "Set5" and benchmark_name("BSD100") == "B100"
    with pytest.raises(ValueError, match="unknown benchmark set 'Set6'; choose from Set5"):
        benchmark_name("Set6")


@pytest.mark.parametrize("scale", [2, 3, 4])
def test_set5_uses_shipped_lr(benchmarks: Path, scale: int, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(iss.data.sets, "imresize", lambda *a: pytest.fail("shipped LR must not be remade"))
    ds = BenchmarkSet(benchmarks, "Set5", scale)
    assert len(ds) == 5 and [ds[i].name for i in range(5)] == ["baby", "bird", "butterfly", "head", "woman"]
    for sample in ds:
        assert (
            sample.hr.shape[0] == sample.lr.shape[0] * scale
            and sample.hr.shape[1] == sample.lr.shape[1] * scale
        )
        assert sample.hr.shape[0] % scale == 0 and sample.lr.dtype == sample.hr.dtype == np.uint8
    assert ds[0].lr.shape == {2: (256, 256, 3), 3: (170, 170, 3), 4: (128, 128, 3)}[scale]


def test_generated_lr_equals_shipped(benchmarks: Path, tmp_path: Path) -> None:
    shutil.copytree(benchmarks / "Set5" / "HR", tmp_path / "Set5" / "HR")  # the same set without LR_bicubic
    generated, shipped = BenchmarkSet(tmp_path, "Set5", 3), BenchmarkSet(benchmarks, "Set5", 3)
    for a, b in zip(generated, shipped, strict=True):
        np.testing.assert_array_equal(a.lr, b.lr)
        np.testing.assert_array_equal(a.hr, b.hr)


def test_set14_lr_is_generated_then_cached(
    benchmarks: Path, _private_cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ds = BenchmarkSet(benchmarks, "Set14", 4)
    assert len(ds) == 14
    index = [p.stem for p in ds.hr_files].index("bridge")  # single-channel HR
    first = ds[index]
    assert first.hr.shape == (512, 512, 3) and first.lr.shape == (128, 128, 3)
    cached = list((_private_cache / "lr" / "Set14" / "X4").glob("bridge-*.png"))
    assert len(cached) == 1
    monkeypatch.setattr(iss.data.sets, "imresize", lambda *a: pytest.fail("second access: from the cache"))
    np.testing.assert_array_equal(ds[index].lr, first.lr)


def test_changed_hr_is_not_served_a_stale_lr(tmp_path: Path, _private_cache: Path) -> None:
    hr_dir = tmp_path / "Mine" / "HR"
    hr_dir.mkdir(parents=True)
    Image.fromarray(_random_image(24, 24, seed=1)).save(hr_dir / "a.png")
    first = BenchmarkSet(tmp_path, "Mine", 2)[0].lr
    Image.fromarray(_random_image(24, 24, seed=2)).save(hr_dir / "a.png")
    second = BenchmarkSet(tmp_path, "Mine", 2)[0]
    assert not np.array_equal(first, second.lr)
    np.testing.assert_array_equal(second.lr, iss.data.resize.imresize(second.hr, 0.5))
    assert len(list((_private_cache / "lr" / "Mine" / "X2").glob("a-*.png"))) == 2


def test_benchmark_errors(benchmarks: Path, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="unknown benchmark set 'Set99'"):
        BenchmarkSet(benchmarks, "Set99", 2)
    with pytest.raises(FileNotFoundError, match="Set5/HR not found"):
        BenchmarkSet(tmp_path, "Set5", 2)
    (tmp_path / "Set14" / "HR").mkdir(parents=True)
    (tmp_path / "Set14" / "HR" / "readme.txt").write_text("no images here")
    with pytest.raises(FileNotFoundError, match="no images in"):
        BenchmarkSet(tmp_path, "Set14", 2)
    with pytest.raises(ValueError, match="scale"):
        BenchmarkSet(benchmarks, "Set5", 1)


def test_benchmark_unreadable_image_names_the_file(tmp_path: Path) -> None:
    hr_dir = tmp_path / "Set5" / "HR"
    hr_dir.mkdir(parents=True)
    (hr_dir / "broken.png").write_bytes(b"\x89PNG\r\n\x1a\n garbage")
    ds = BenchmarkSet(tmp_path, "Set5", 2)
    with pytest.raises(ImageError, match=r"broken\.png"):
        ds[0]


def test_benchmark_rejects_a_shipped_lr_of_the_wrong_size(tmp_path: Path) -> None:
    (tmp_path / "Set5" / "HR").mkdir(parents=True)
    (tmp_path / "Set5" / "LR_bicubic" / "X2").mkdir(parents=True)
    Image.fromarray(_random_image(20, 20)).save(tmp_path / "Set5" / "HR" / "a.png")
    Image.fromarray(_random_image(9, 10)).save(tmp_path / "Set5" / "LR_bicubic" / "X2" / "ax2.png")
    with pytest.raises(ValueError, match="it is not its x2 LR"):
        BenchmarkSet(tmp_path, "Set5", 2)[0]


# ------------------------------------------------------------------------------------------------- training


@pytest.fixture
def train_folder(tmp_path: Path) -> Path:
    folder = tmp_path / "train"
    folder.mkdir()
    for i, (h, w) in enumerate([(40, 50), (36, 33), (64, 48)]):
        Image.fromarray(_random_image(h, w, seed=i)).save(folder / f"img{i}.png")
    (folder / "notes.txt").write_text("ignored: not an image suffix")
    return folder


def test_train_patches_shapes_and_skip(train_folder: Path) -> None:
    Image.fromarray(_random_image(10, 60)).save(train_folder / "tiny.png")  # smaller than the HR patch
    with pytest.warns(UserWarning, match=r"skipping 1 images of .* smaller than the HR patch 24: tiny.png"):
        ds = TrainPatches(train_folder, scale=3, patch=8, length=20)
    assert len(ds) == 20 and len(ds.hr_images) == 3
    for lr, hr in (ds[i] for i in range(len(ds))):
        assert lr.shape == (3, 8, 8) and hr.shape == (3, 24, 24)
        assert lr.dtype == hr.dtype == torch.float32 and lr.min() >= 0 and hr.max() <= 1
    with pytest.raises(IndexError):
        ds[20]


def test_train_patches_are_aligned(train_folder: Path) -> None:
    """Without augmentation every (LR, HR) pair must be cut from the same place of an (LR, HR) image pair."""
    ds = TrainPatches([train_folder], scale=2, patch=6, length=30, augment=False)
    for i in range(len(ds)):
        lr, hr = (to_uint8(t) for t in ds[i])
        hits = [
            (k, y, x)
            for k, (lr_img, hr_img) in enumerate(zip(ds.lr_images, ds.hr_images, strict=True))
            for y in range(lr_img.shape[0] - 5)
            for x in range(lr_img.shape[1] - 5)
            if np.array_equal(lr_img[y : y + 6, x : x + 6], lr)
        ]
        assert any(
            np.array_equal(ds.hr_images[k][2 * y : 2 * y + 12, 2 * x : 2 * x + 12], hr) for k, y, x in hits
        )


def test_train_patches_augmentation_is_shared_by_lr_and_hr(train_folder: Path) -> None:
    """Each augmented pair is one of the 8 flips/rotations of the same un-augmented pair."""
    plain = TrainPatches(train_folder, scale=2, patch=6, length=40, augment=False, seed=5)
    augmented = TrainPatches(train_folder, scale=2, patch=6, length=40, augment=True, seed=5)
    variants = set()
    for i in range(40):
        (lr0, hr0), (lr1, hr1) = plain[i], augmented[i]
        matches = [
            v for v in range(8) if torch.equal(_dihedral(lr0, v), lr1) and torch.equal(_dihedral(hr0, v), hr1)
        ]
        assert matches, f"pair {i}: LR and HR were not transformed alike"
        variants.add(matches[0])
    assert len(variants) >= 4  # the augmentation really varies


def _dihedral(t: torch.Tensor, v: int) -> torch.Tensor:
    """Variant ``v`` (0-7) of a CxHxW tensor: rotations by 90 degrees, optionally mirrored."""
    t = torch.rot90(t, v % 4, dims=(1, 2))
    return t.flip(2) if v >= 4 else t


def test_train_patches_deterministic_per_seed_and_epoch(train_folder: Path) -> None:
    a = TrainPatches(train_folder, scale=2, patch=8, length=10, seed=1)
    b = TrainPatches(train_folder, scale=2, patch=8, length=10, seed=1)
    c = TrainPatches(train_folder, scale=2, patch=8, length=10, seed=2)
    for i in range(10):
        assert torch.equal(a[i][0], b[i][0]) and torch.equal(a[i][1], b[i][1])
    assert any(not torch.equal(a[i][1], c[i][1]) for i in range(10))
    before = [a[i][1] for i in range(10)]
    a.set_epoch(1)
    assert any(not torch.equal(x, a[i][1]) for i, x in enumerate(before))


def test_train_patches_with_dataloader_workers(train_folder: Path) -> None:
    ds = TrainPatches(train_folder, scale=2, patch=8, length=8, seed=3)
    batches = list(DataLoader(ds, batch_size=4, num_workers=2))
    assert len(batches) == 2 and batches[0][0].shape == (4, 3, 8, 8) and batches[0][1].shape == (4, 3, 16, 16)
    assert torch.equal(torch.cat([b[1] for b in batches]), torch.stack([ds[i][1] for i in range(8)]))


def test_train_patches_lr_is_bicubic_of_modcropped_hr(train_folder: Path) -> None:
    ds = TrainPatches(train_folder, scale=3, patch=4, length=1)
    for lr, hr in zip(ds.lr_images, ds.hr_images, strict=True):
        assert hr.shape[0] % 3 == 0 and hr.shape[1] % 3 == 0
        np.testing.assert_array_equal(lr, iss.data.resize.imresize(hr, 1 / 3))


def test_train_patches_errors(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="not found"):
        TrainPatches(tmp_path / "nope", scale=2, patch=8)
    (tmp_path / "small").mkdir()
    Image.fromarray(_random_image(8, 8)).save(tmp_path / "small" / "a.png")
    with pytest.warns(UserWarning), pytest.raises(ValueError, match="no training image"):
        TrainPatches(tmp_path / "small", scale=2, patch=8)


def test_device_patches_equal_train_patches(train_folder: Path) -> None:
    """Batches cut by gathers from the uint8 bank are the dataset's items, bit for bit (every flip and
    transpose, several images), so CPU and GPU runs see the same patches."""
    patches = TrainPatches(train_folder, 2, 8, length=64, seed=3)
    lr, hr = DevicePatches(patches, "cpu").batch(range(64))
    items = [patches[i] for i in range(64)]
    assert torch.equal(lr, torch.stack([a for a, _ in items]))
    assert torch.equal(hr, torch.stack([b for _, b in items]))
    assert {patches.draw(i)[3:] for i in range(64)} == set(itertools.product((False, True), repeat=3))
