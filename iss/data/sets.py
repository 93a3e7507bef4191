"""Benchmark sets and training patches, on top of the one image loader (:mod:`iss.data.images`).

Benchmark LR images follow the standard recipe (SwinIR/EDSR ``benchmark`` folders): MATLAB bicubic
``imresize(modcrop(hr, s), 1/s)``. Shipped ``LR_bicubic/X{s}`` files are used when present; otherwise the LR
is made with :func:`iss.data.resize.imresize` and cached as PNG under ``$ISS_CACHE_DIR`` (default
``~/.cache/iss-sr``), keyed by the HR file's content so a changed HR never gets a stale LR.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
import warnings
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import NamedTuple

import numpy as np
import torch
from PIL import Image
from torch.utils.data import Dataset

from .images import ImageError, modcrop, read_image, to_tensor
from .resize import imresize

__all__ = [
    "BENCHMARKS",
    "IMAGE_SUFFIXES",
    "BenchmarkSet",
    "DevicePatches",
    "Sample",
    "TrainPatches",
    "benchmark_name",
    "cache_dir",
    "list_images",
]


BENCHMARKS = ("Set5", "Set14", "B100", "Urban100", "Manga109")


IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp", ".tif", ".tiff", ".webp", ".ppm", ".pgm")


_ALIASES = {"bsd100": "B100", "bsds100": "B100", "urban": "Urban100", "manga": "Manga109"}


_LR_RECIPE = b"matlab-bicubic-modcrop-v1"  # part of the cache key: bump it if the LR recipe ever changes


def cache_dir() -> Path:
    """Root of the on-disk cache: ``$ISS_CACHE_DIR`` or ``~/.cache/iss-sr``."""
    return Path(os.environ.get("ISS_CACHE_DIR") or Path.home() / ".cache" / "iss-sr")


def _file_digest(path: Path) -> str:
    """Short content hash of a file plus the LR recipe: the cache key of its generated LR."""
    h = hashlib.sha256(_LR_RECIPE)
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()[:16]


def _make_lr(hr: np.ndarray, scale: int) -> np.ndarray:
    """Standard bicubic LR of an already mod-cropped HR ."""
    return imresize(hr, 1.0 / scale)


def _cached_lr(hr: np.ndarray, hr_path: Path, scale: int, group: str) -> np.ndarray:
    """LR of ``hr`` from the PNG cache, or made with ``imresize`` and stored there (best effort)."""
    folder = cache_dir() / "lr" / group / f"X{scale}"
    file = folder / f"{hr_path.stem}-{_file_digest(hr_path)}.png"
    expected = (hr.shape[0] // scale, hr.shape[1] // scale)
    if file.is_file():
        try:
            lr = read_image(file)
            if lr.shape[:2] == expected:
                return lr
        except ImageError:
            pass  # a damaged cache entry is simply rebuilt
    lr = _make_lr(hr, scale)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        # Write to a temporary name then rename, so parallel workers never read a half-written PNG.
        with tempfile.NamedTemporaryFile(dir=folder, suffix=".png.tmp", delete=False) as tmp:
            Image.fromarray(lr).save(tmp, format="PNG")
        os.replace(tmp.name, file)
    except OSError as e:
        warnings.warn(f"could not cache LR image in {folder}: {e}", stacklevel=3)
    return lr


class Sample(NamedTuple):
    """One benchmark image: its file stem, the LR input and the mod-cropped HR reference (uint8 HxWx3)."""

    name: str
    lr: np.ndarray
    hr: np.ndarray


def list_images(folder: str | os.PathLike) -> list[Path]:
    """Image files directly inside ``folder``, sorted by name."""
    folder = Path(folder)
    return sorted(p for p in folder.iterdir() if p.is_file() and p.suffix.lower() in IMAGE_SUFFIXES)


def benchmark_name(name: str) -> str:
    """Canonical spelling of a standard set (case-insensitive, a few aliases such as BSD100 -> B100)."""
    key = name.strip().lower()
    canonical = {b.lower(): b for b in BENCHMARKS} | _ALIASES
    if key not in canonical:
        raise ValueError(f"unknown benchmark set '{name}'; choose from {', '.join(BENCHMARKS)}")
    return canonical[key]


def _resolve_set_name(name: str, root: Path) -> str:
    """Canonical set name, or ``name`` itself for a user's own set laid out as ``root/<name>/HR``."""
    if (root / name / "HR").is_dir() and name.strip().lower() not in _ALIASES:
        return name
    return benchmark_name(name)


class BenchmarkSet(Sequence[Sample]):
    """A benchmark folder ``root/<name>/HR/*`` as a sequence of ``Sample(name, lr, hr)``, loaded lazily.

    LR comes from ``root/<name>/LR_bicubic/X{scale}/<stem>x{scale}.png`` when that folder exists, otherwise it
    is generated from the mod-cropped HR and cached (see the module docstring).
    """

    def __init__(self, root: str | os.PathLike, name: str, scale: int) -> None:
        if isinstance(scale, bool) or not isinstance(scale, int) or scale < 2:
            raise ValueError(f"scale must be an integer >= 2, got {scale!r}")
        self.root = Path(root).expanduser()
        self.name = _resolve_set_name(name, self.root)
        self.scale = scale
        hr_dir = self.root / self.name / "HR"
        if not hr_dir.is_dir():
            raise FileNotFoundError(
                f"benchmark folder {hr_dir} not found (expected <data-dir>/{self.name}/HR/*.png; "
                "check --data-dir / ISS_DATA_DIR, or use --download)"
            )
        self.hr_files = list_images(hr_dir)
        if not self.hr_files:
            raise FileNotFoundError(f"no images in {hr_dir}")
        self.lr_dir = self.root / self.name / "LR_bicubic" / f"X{scale}"

    def __len__(self) -> int:
        return len(self.hr_files)

    def __getitem__(self, index: int) -> Sample:  # type: ignore[override]
        """Load image ``index``: HR mod-cropped to the scale, LR shipped or generated."""
        if isinstance(index, slice):
            raise TypeError("BenchmarkSet does not support slicing; index one image at a time")
        hr_path = self.hr_files[index]
        hr = modcrop(read_image(hr_path), self.scale)
        shipped = self.lr_dir / f"{hr_path.stem}x{self.scale}.png"
        if shipped.is_file():
            lr = read_image(shipped)
            if lr.shape[0] * self.scale != hr.shape[0] or lr.shape[1] * self.scale != hr.shape[1]:
                raise ValueError(
                    f"{shipped} is {lr.shape[1]}x{lr.shape[0]} but the mod-cropped HR {hr_path} is "
                    f"{hr.shape[1]}x{hr.shape[0]}; it is not its x{self.scale} LR"
                )
        else:
            lr = _cached_lr(hr, hr_path, self.scale, self.name)
        return Sample(hr_path.stem, lr, hr)

    def __repr__(self) -> str:
        return f"BenchmarkSet({self.name!r}, scale={self.scale}, images={len(self)}, root={str(self.root)!r})"


class TrainPatches(Dataset):
    """Random aligned (LR, HR) patch pairs from folders of HR images, with flips and 90-degree rotations.

    All images are decoded once and kept as uint8 (T91 + BSD200 take ~100 MB); the LR of each is made once
    with MATLAB bicubic from the mod-cropped HR (and cached on disk like benchmark LR). ``patch`` is the LR
    patch size; the HR patch is ``patch * scale``. Item ``i`` is a pure function of ``(seed, epoch, i)``, so
    runs repeat exactly, also with DataLoader workers. Images whose LR is smaller than ``patch`` are skipped.
    """

    def __init__(
        self,
        folders: str | os.PathLike | Iterable[str | os.PathLike],
        scale: int,
        patch: int,
        *,
        length: int = 1000,
        seed: int = 0,
        augment: bool = True,
    ) -> None:
        if isinstance(scale, bool) or not isinstance(scale, int) or scale < 1:
            raise ValueError(f"scale must be a positive integer, got {scale!r}")
        if patch < 1 or length < 1:
            raise ValueError(f"patch and length must be positive, got patch={patch}, length={length}")
        folders = [folders] if isinstance(folders, (str, os.PathLike)) else list(folders)
        self.scale, self.patch, self.length, self.seed, self.augment = scale, patch, length, seed, augment
        self.epoch = 0
        self.lr_images: list[np.ndarray] = []
        self.hr_images: list[np.ndarray] = []
        self.names: list[str] = []
        for folder in map(Path, folders):
            self._load_folder(folder)
        if not self.hr_images:
            raise ValueError(f"no training image of at least {patch * scale}x{patch * scale} in {folders}")

    def _load_folder(self, folder: Path) -> None:
        """Decode every image of ``folder`` and make its LR; skip images that are too small, with one warning
        per folder naming them."""
        if not folder.is_dir():
            raise FileNotFoundError(f"training folder {folder} not found")
        small = []
        for path in list_images(folder):
            hr = modcrop(read_image(path), self.scale)
            if min(hr.shape[:2]) < self.patch * self.scale:
                small.append(f"{path.name} ({hr.shape[1]}x{hr.shape[0]})")
                continue
            self.lr_images.append(_cached_lr(hr, path, self.scale, f"train-{folder.name}"))
            self.hr_images.append(hr)
            self.names.append(str(path))
        if small:
            shown = ", ".join(small[:5]) + (f" and {len(small) - 5} more" if len(small) > 5 else "")
            warnings.warn(
                f"skipping {len(small)} images of {folder} smaller than the HR patch "
                f"{self.patch * self.scale}: {shown}",
                stacklevel=3,
            )

    def set_epoch(self, epoch: int) -> None:
        """Draw different patches for the same indices in a new epoch (like ``DistributedSampler``)."""
        self.epoch = epoch

    def __len__(self) -> int:
        return self.length

    def draw(self, index: int) -> tuple[int, int, int, bool, bool, bool]:
        """Where the ``index``-th pair comes from: image, LR top-left (y, x), and hflip, vflip, transpose."""
        if not 0 <= index < self.length:
            raise IndexError(f"index {index} out of range for {self.length} patches")
        rng = np.random.default_rng([self.seed, self.epoch, index])
        k = int(rng.integers(len(self.hr_images)))
        y = int(rng.integers(self.lr_images[k].shape[0] - self.patch + 1))
        x = int(rng.integers(self.lr_images[k].shape[1] - self.patch + 1))
        hflip, vflip, rot = (bool(f) for f in rng.random(3) < 0.5) if self.augment else (False,) * 3
        return k, y, x, hflip, vflip, rot

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The ``index``-th random pair: float32 CxPxP LR and Cx(sP)x(sP) HR tensors in [0, 1]."""
        k, y, x, hflip, vflip, rot = self.draw(index)
        p, s = self.patch, self.scale
        lr = self.lr_images[k][y : y + p, x : x + p]
        hr = self.hr_images[k][y * s : (y + p) * s, x * s : (x + p) * s]
        lr, hr = (_augment(a, hflip, vflip, rot) for a in (lr, hr))
        return to_tensor(lr)[0], to_tensor(hr)[0]


class DevicePatches:
    """``TrainPatches`` batches cut on a device: the images live there as uint8, crops and flips are gathers.

    Batch ``indices`` hold exactly the tensors ``TrainPatches`` would give for them (the same draws, the same
    uint8 -> float32 conversion), made with one gather per batch for LR and one for HR and no host
    synchronisation, so a GPU spends no time waiting for patches. The images take ~150 MB for T91 + BSD200.
    """

    def __init__(self, patches: TrainPatches, device: str | torch.device) -> None:
        self.patches, self.device = patches, torch.device(device)
        self.lr = _PixelBank(patches.lr_images, self.device)
        self.hr = _PixelBank(patches.hr_images, self.device)

    def batch(self, indices: Sequence[int]) -> tuple[torch.Tensor, torch.Tensor]:
        """float32 (B, 3, P, P) LR and (B, 3, sP, sP) HR on the device for these patch indices."""
        draws = torch.tensor([self.patches.draw(i) for i in indices], dtype=torch.int64)
        if self.device.type == "cuda":
            draws = draws.pin_memory().to(self.device, non_blocking=True)
        p, s = self.patches.patch, self.patches.scale
        return self.lr.crops(draws, p, 1), self.hr.crops(draws, p * s, s)


class _PixelBank:
    """Images of different sizes as one flat uint8 tensor, with their offsets and widths, on one device."""

    def __init__(self, images: list[np.ndarray], device: torch.device) -> None:
        sizes = [img.size for img in images]
        self.offsets = torch.tensor(np.cumsum([0, *sizes[:-1]]), dtype=torch.int64, device=device)
        self.widths = torch.tensor([img.shape[1] for img in images], dtype=torch.int64, device=device)
        flat = np.concatenate([img.reshape(-1) for img in images])
        self.pixels = torch.from_numpy(flat).to(device)

    def crops(self, draws: torch.Tensor, size: int, stride: int) -> torch.Tensor:
        """(B, 3, size, size) float32 crops for draws (k, y, x, hflip, vflip, transpose) of LR coordinates."""
        k, y, x, hflip, vflip, rot = (d.view(-1, 1, 1) for d in draws.unbind(1))
        i = torch.arange(size, device=draws.device).view(1, -1, 1)
        j = i.view(1, 1, -1)
        row, col = torch.where(rot.bool(), j, i), torch.where(rot.bool(), i, j)  # transpose is applied last
        row = torch.where(vflip.bool(), size - 1 - row, row)
        col = torch.where(hflip.bool(), size - 1 - col, col)
        width = self.widths[k]
        pixel = self.offsets[k] + ((y * stride + row) * width + x * stride + col) * 3
        channels = torch.arange(3, device=draws.device).view(1, 3, 1, 1)
        values = torch.take(self.pixels, pixel.unsqueeze(1) + channels)
        return values.float().div_(255.0)


def _augment(img: np.ndarray, hflip: bool, vflip: bool, rot90: bool) -> np.ndarray:
    """The 8 dihedral variants (BasicSR's ``augment``): optional horizontal flip, vertical flip, transpose."""
    if hflip:
        img = img[:, ::-1]
    if vflip:
        img = img[::-1]
    if rot90:
        img = img.transpose(1, 0, 2)
    return img
