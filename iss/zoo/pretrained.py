"""Zoo models in one line: ``iss.load``, ``iss.list_models``, ``iss.upscale`` and ``python -m iss upscale``.

:func:`load` takes a zoo name (``checkpoints/zoo.json``, resolved and sha256-checked by ``iss.zoo``: the Hub
copy, else the bundled one) or the path of an ISS-SR ``.safetensors`` checkpoint, and returns the model in
eval mode, run through ``iss.sparsify`` where ``iss.sparse.speed.sparse_by_default`` says the sparse kernels
are faster. Images are read as the app reads uploads: ``iss.data``'s loader, within ``iss.data.MAX_PIXELS``.

Example::

    python -m iss upscale swinir-light_x4_iss-p_r0.95 photo.jpg 'shots/*.png' album/ -o upscaled
"""

from __future__ import annotations

import argparse
import difflib
import glob
import os
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import NamedTuple

import numpy as np
import torch
from PIL import Image
from torch import nn

from iss import checkpoint, data, infer, zoo
from iss.sparse import sparsify, speed

__all__ = ["FORMATS", "ModelInfo", "add_arguments", "list_models", "load", "run", "upscale"]

FORMATS = ("png", "webp")  # output formats, both lossless
_GLOB_CHARS = ("*", "?", "[")


class ModelInfo(NamedTuple):
    """One zoo model as :func:`list_models` lists it."""

    name: str
    arch: str
    scale: int
    method: str
    ratio: float
    set5_psnr: float | None  # dB on Y, from the manifest's metrics (None where not measured)


def list_models(manifest: str | os.PathLike | None = None) -> list[ModelInfo]:
    """The zoo's models (what :func:`load` accepts by name) with scale, method, ratio and Set5 PSNR."""
    return [
        ModelInfo(e.name, e.arch, e.scale, e.method, e.ratio, e.metrics.get("Set5", {}).get("psnr"))
        for e in zoo.load_zoo(manifest)
    ]


def load(
    model: str | os.PathLike,
    *,
    sparse: bool | None = None,
    device: str | torch.device = "cpu",
    manifest: str | os.PathLike | None = None,
    exact: bool = False,
) -> nn.Module:
    """A zoo model by name, or an ISS-SR checkpoint by path, verified and ready for ``model(x)`` in eval mode.

    ``sparse`` (default: ``iss.sparse.speed.sparse_by_default`` for its backbone and ``device``) runs it
    through ``iss.sparsify`` (``exact`` as there), whose kernels are for the CPU; ``model.scale`` is its
    upscaling factor.
    """
    if sparse and torch.device(device).type != "cpu":
        raise ValueError(f"the sparse kernels run on the CPU only, not on {device}; pass sparse=False")
    net, meta = checkpoint.load(_checkpoint_file(model, manifest), device=device)
    if sparse is None:
        sparse = speed.sparse_by_default(meta["arch"], str(device))
    return (sparsify(net, exact=exact) if sparse else net).eval()


def _checkpoint_file(model: str | os.PathLike, manifest: str | os.PathLike | None) -> Path:
    """``model`` itself when it is a file, else the verified local copy of the zoo entry of that name."""
    if Path(model).is_file():
        return Path(model)
    if Path(model).suffix == ".safetensors" or os.sep in str(model):
        raise FileNotFoundError(f"checkpoint {model} does not exist")
    entries = {e.name: e for e in zoo.load_zoo(manifest)}
    if str(model) not in entries:
        close = difflib.get_close_matches(str(model), entries, n=3, cutoff=0.6)
        hint = f"did you mean {' or '.join(close)}?" if close else "`python -m iss zoo list` shows the names"
        raise KeyError(f"no zoo model or checkpoint file {model!s}; {hint}")
    return zoo.resolve(entries[str(model)])


def upscale(
    model: nn.Module, image: str | os.PathLike | Image.Image | np.ndarray, *, tile: int | None = None
) -> Image.Image:
    """Super-resolve one image (a file, a PIL image or an array, in any mode the loader reads) to RGB.

    ``tile`` as in ``iss.infer.upscale_array`` (default: whole, tiled above ``iss.infer.AUTO_TILE_PIXELS``).
    """
    return Image.fromarray(infer.upscale_array(model, _rgb(image), tile=tile))


def _rgb(image: str | os.PathLike | Image.Image | np.ndarray) -> np.ndarray:
    """``image`` as uint8 RGB through the project's loader; ``iss.data.ImageError`` above ``MAX_PIXELS``."""
    if isinstance(image, str | os.PathLike):
        return data.decode_image(image, max_pixels=data.MAX_PIXELS).image
    return data.to_rgb_uint8(image, max_pixels=data.MAX_PIXELS)


# -------------------------------------------------------------------------------------------- upscale command


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """``upscale MODEL INPUT... -o OUTDIR [--tile N] [--dense] [--format png|webp] [--manifest PATH]``."""
    parser.add_argument(
        "model", metavar="MODEL", help="a zoo name (`python -m iss zoo list`) or an ISS-SR .safetensors file"
    )
    parser.add_argument(
        "inputs", nargs="+", metavar="INPUT",
        help="image files, folders (their images and subfolders, kept in OUTDIR) and globs",
    )  # fmt: skip
    parser.add_argument(
        "-o", "--out", type=Path, required=True, metavar="OUTDIR", help="output folder (created if missing)"
    )
    parser.add_argument(
        "--tile", type=_tile, default=None,
        help=f"upscale in NxN tiles, N > {infer.OVERLAP} (default: whole images; tiles above 640x640 pixels)",
    )  # fmt: skip
    parser.add_argument("--dense", action="store_true", help="dense kernels only (default: sparse if faster)")
    parser.add_argument("--format", choices=FORMATS, default="png", help="output format (default png)")
    parser.add_argument("--overwrite", action="store_true", help="replace results already in OUTDIR")
    parser.add_argument(
        "--manifest", type=Path, default=None, help=f"zoo manifest (default {zoo.DEFAULT_ZOO})"
    )


def _tile(text: str) -> int:
    """A ``--tile`` size: a whole number larger than the tiles' overlap."""
    if not text.isdigit() or int(text) <= infer.OVERLAP:
        raise argparse.ArgumentTypeError(f"must be a whole number above {infer.OVERLAP}, got {text!r}")
    return int(text)


def run(args: argparse.Namespace) -> int:
    """Upscale every input image into ``--out``, a line per image (n of N, elapsed, time left); an existing
    result is skipped unless ``--overwrite``; an unreadable image is one line and exit status 1."""
    images = collect_images(args.inputs)
    if args.out.exists() and not args.out.is_dir():
        raise ValueError(f"output folder {args.out} is a file")
    model = load(args.model, sparse=False if args.dense else None, manifest=args.manifest)
    targets = output_paths(images, args.out, _label(args.model, model.scale), args.format)
    _make_folder(args.out)
    failed = skipped = 0
    start = time.monotonic()
    for n, (source, target) in enumerate(targets.items(), 1):
        if target.exists() and not args.overwrite:
            print(f"[{n}/{len(targets)}] {target}: exists, skipped (--overwrite replaces it)")
            skipped += 1
            continue
        try:
            result = upscale(model, source, tile=args.tile)
        except data.ImageError as e:
            print(f"[{n}/{len(targets)}] {source}: skipped: {e.reason}")
            failed += 1
            continue
        _make_folder(target.parent)
        _save(result, target, args.format)
        print(f"[{n}/{len(targets)}] {target}  {_progress(start, n - skipped, len(targets) - n)}", flush=True)
    kept = f" ({skipped} already there)" if skipped else ""
    print(f"wrote {len(targets) - failed - skipped} of {len(targets)} images to {args.out}{kept}")
    return 1 if failed else 0


def _progress(start: float, done: int, left: int) -> str:
    """``elapsed 0:00:12, about 0:00:30 left``: time so far, and the rest at the average pace so far."""
    elapsed = time.monotonic() - start
    remaining = elapsed / max(done, 1) * left
    return f"elapsed {_clock(elapsed)}, about {_clock(remaining)} left"


def _clock(seconds: float) -> str:
    """Seconds as ``H:MM:SS``."""
    s = round(seconds)
    return f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}"


def _make_folder(folder: Path) -> None:
    """Create ``folder`` and check that a file can be written in it; ``ValueError`` in one line if not."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
        tempfile.TemporaryFile(dir=folder).close()
    except OSError as e:
        raise ValueError(f"cannot write to output folder {folder}: {e.strerror or e}") from None


def collect_images(inputs: Sequence[str]) -> dict[Path, Path]:
    """The files ``inputs`` name (files, the images in folders and their subfolders, glob matches), each
    once, with the subfolder (relative to the folder named) its result goes to."""
    found: dict[Path, tuple[Path, Path]] = {}
    for item in inputs:
        for path, subfolder in _expand(item):
            found.setdefault(path.resolve(), (path, subfolder))
    if not found:
        raise ValueError(f"no images in {', '.join(inputs)} (readable: {', '.join(data.IMAGE_SUFFIXES)})")
    return dict(found.values())


def _expand(item: str) -> list[tuple[Path, Path]]:
    """The files one input names, with their subfolders; ``FileNotFoundError`` when it names nothing."""
    path = Path(item)
    if path.is_dir():
        return _walk(path)
    if path.is_file():
        return [(path, Path())]
    if not any(c in item for c in _GLOB_CHARS):
        raise FileNotFoundError(f"no such file or folder: {item}")
    matches = [Path(m) for m in sorted(glob.glob(item, recursive=True))]
    if not matches:
        raise FileNotFoundError(f"nothing matches {item}")
    return [f for m in matches for f in (_walk(m) if m.is_dir() else [(m, Path())])]


def _walk(
    folder: Path, subfolder: Path = Path(), above: frozenset[tuple[int, int]] = frozenset()
) -> list[tuple[Path, Path]]:
    """The images in ``folder`` and its subfolders (sorted, links followed) as (file, subfolder) pairs;
    ``ValueError`` for a link back to a folder above it, which would never end."""
    here = _identity(folder)
    if here in above:
        raise ValueError(f"symlink loop: {folder} leads back to a folder above it; remove the link")
    try:
        children = sorted(folder.iterdir())
    except OSError as e:
        raise ValueError(f"cannot read folder {folder}: {e.strerror or e}") from None
    found = [(c, subfolder) for c in children if c.is_file() and c.suffix.lower() in data.IMAGE_SUFFIXES]
    for child in children:
        if child.is_dir():
            found += _walk(child, subfolder / child.name, above | {here})
    return found


def output_paths(images: dict[Path, Path], out: Path, label: str, fmt: str) -> dict[Path, Path]:
    """Input -> ``out/<subfolder>/<stem>_<label>.<fmt>``; ``ValueError`` when a result would land on an input
    (or on another input's result), so that no input is ever overwritten."""
    inputs = {_identity(p) for p in images}
    sources: dict[Path, Path] = {}  # target -> input
    for source, subfolder in images.items():
        target = out / subfolder / f"{source.stem}_{label}.{fmt}"
        if target.exists() and _identity(target) in inputs:
            raise ValueError(f"refusing to write {target}: it is one of the inputs; choose another -o folder")
        if target in sources:
            raise ValueError(f"{sources[target]} and {source} would both be written to {target}; split them")
        sources[target] = source
    return {source: target for target, source in sources.items()}


def _identity(path: Path) -> tuple[int, int]:
    """(device, inode) of the file ``path`` is or links to: the same for every name of one file."""
    st = path.stat()
    return st.st_dev, st.st_ino


def _label(model: str | os.PathLike, scale: int) -> str:
    """How output names call the model: its zoo name or file stem, with ``x<scale>`` unless it has it."""
    name = Path(model).name.removesuffix(".safetensors")
    return name if f"x{scale}" in name.split("_") else f"{name}_x{scale}"


def _save(image: Image.Image, target: Path, fmt: str) -> None:
    """Write ``image`` losslessly, through a temporary file so an interrupted run leaves no partial image."""
    tmp = target.with_name(f".{target.name}.tmp")
    image.save(tmp, format=fmt.upper(), **({"lossless": True} if fmt == "webp" else {}))
    os.replace(tmp, target)
