"""Benchmark evaluation: ``evaluate(upscaler, datasets, scale, data_dir)`` and ``python -m iss eval``.

The protocol is the one behind the SwinIR/CAT/ISS-P tables: LR from MATLAB bicubic of the mod-cropped HR, the
SR output quantised to uint8, PSNR and SSIM on BT.601 Y with ``scale`` pixels cropped from every side (see
``iss.data.metrics``). ``--rgb`` measures PSNR on RGB instead, as BasicSR's EDSR configs do.

Examples::

    python -m iss eval --model bicubic --scale 4 --datasets Set5,Set14 --data-dir ../shared/data
    python -m iss eval --model swinir-light --weights 002_lightweightSR_DIV2K_s64w8_SwinIR-S_x4.pth --scale 4
    python -m iss eval --model swinir-light_x4_iss-p_r0.95 --datasets Set5 --data-dir ../shared/data
"""

from __future__ import annotations

import argparse
import json
import os
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np
import torch
from torch import nn
from tqdm import tqdm

import iss
from iss.archs import SCALES
from iss.cli import UsageError
from iss.data import BENCHMARKS, BenchmarkSet, benchmark_name, metrics
from iss.infer import Upscaler, bicubic_upscaler, model_upscaler

__all__ = ["SCALES", "add_arguments", "evaluate", "format_table", "image_scores", "mean_scores", "run"]


def evaluate(
    upscaler: Upscaler,
    datasets: Sequence[str],
    scale: int,
    data_dir: str | os.PathLike | dict[str, str | os.PathLike],
    progress: bool = True,
    y_channel: bool = True,
) -> dict[str, dict[str, float]]:
    """Mean PSNR/SSIM of ``upscaler`` on each benchmark set: ``{"Set5": {"psnr": .., "ssim": ..}, ...}``.

    ``data_dir`` holds ``<Set>/HR`` folders (or maps set names to such folders' parents). All sets are opened
    before any image is processed, so a missing set fails fast. ``y_channel=False`` gives PSNR on RGB (SSIM
    stays on Y). The progress bar goes to stderr and hides itself when stderr is not a terminal.
    """
    sets = [BenchmarkSet(_root_for(data_dir, name), name, scale) for name in datasets]
    results: dict[str, dict[str, float]] = {}
    with tqdm(total=sum(map(len, sets)), unit="img", disable=None if progress else True) as bar:
        for bench in sets:
            bar.set_description(f"{bench.name} x{scale}")
            scores = []
            for score in image_scores(upscaler, bench, y_channel=y_channel):
                scores.append(score)
                bar.update()
            results[bench.name] = mean_scores(scores)
    return results


def image_scores(
    upscaler: Upscaler, bench: BenchmarkSet, *, start: int = 0, y_channel: bool = True
) -> Iterator[tuple[float, float]]:
    """(PSNR, SSIM) of each image of ``bench`` from index ``start`` on, one at a time, so that a long
    evaluation can stop between images and resume later."""
    psnr = metrics.psnr_y if y_channel else metrics.psnr_rgb
    for index in range(start, len(bench)):
        sample = bench[index]
        sr = upscaler(sample.lr)
        if not isinstance(sr, np.ndarray) or sr.shape != sample.hr.shape or sr.dtype != np.uint8:
            got = f"{sr.dtype} {sr.shape}" if isinstance(sr, np.ndarray) else type(sr).__name__
            raise ValueError(
                f"{bench.name}/{sample.name}: the upscaler returned {got}, expected uint8 "
                f"{sample.hr.shape} (x{bench.scale} of the {sample.lr.shape[1]}x{sample.lr.shape[0]} LR)"
            )
        yield psnr(sr, sample.hr, bench.scale), metrics.ssim_y(sr, sample.hr, bench.scale)


def mean_scores(scores: Sequence[Sequence[float]]) -> dict[str, float]:
    """A set's metrics: the mean over its images of PSNR and of SSIM."""
    mean_psnr, mean_ssim = np.mean(scores, axis=0)
    return {"psnr": float(mean_psnr), "ssim": float(mean_ssim)}


def _root_for(data_dir: str | os.PathLike | dict[str, str | os.PathLike], name: str) -> Path:
    """The folder holding ``<name>/HR`` for one set."""
    if isinstance(data_dir, dict):
        return Path(data_dir[name])
    return Path(data_dir)


def format_table(results: dict[str, dict[str, float]], title: str = "") -> str:
    """An aligned text table of PSNR (2 decimals) and SSIM (4 decimals), one row per set."""
    width = max([len("set"), *map(len, results)])
    lines = [title] if title else []
    lines.append(f"{'set':<{width}}  {'PSNR':>7}  {'SSIM':>6}")
    lines += [f"{name:<{width}}  {r['psnr']:>7.2f}  {r['ssim']:>6.4f}" for name, r in results.items()]
    return "\n".join(lines)


# ----------------------------------------------------------------------------------------------------- CLI


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Arguments of ``python -m iss eval``."""
    parser.add_argument(
        "--model",
        default="bicubic",
        help="'bicubic', an architecture (with --weights), a zoo name or a .safetensors checkpoint",
    )
    parser.add_argument("--weights", type=Path, help="official .pth weights for an architecture name")
    parser.add_argument("--scale", type=int, help="2, 3 or 4 (default: the checkpoint's scale)")
    parser.add_argument(
        "--datasets",
        default=",".join(BENCHMARKS),
        help=f"comma-separated sets (default: {','.join(BENCHMARKS)})",
    )
    parser.add_argument(
        "--data-dir", type=Path,
        help="data folder holding benchmarks/<Set>/HR, or a folder holding <Set>/HR (default: $ISS_DATA_DIR)",
    )  # fmt: skip
    parser.add_argument(
        "--download", action="store_true", help="fetch sets missing from --data-dir from the Hugging Face Hub"
    )
    parser.add_argument("--json", type=Path, help="also write {set: {psnr, ssim}} to this JSON file")
    parser.add_argument("--tile", type=int, help="run the model on tiles of this LR size (saves memory)")
    parser.add_argument("--overlap", type=int, default=32, help="tile overlap in LR pixels (default: 32)")
    parser.add_argument(
        "--rgb", action="store_true", help="PSNR on RGB instead of Y (EDSR/BasicSR convention)"
    )
    parser.add_argument("--device", help="cpu, cuda, ... (default: cuda when available)")
    parser.add_argument(
        "--sparse", action="store_true", help="run pruned layers with sparse CPU kernels (iss.sparsify)"
    )


def run(args: argparse.Namespace) -> int:
    """``python -m iss eval``: build the upscaler, evaluate, print the table, optionally write JSON."""
    try:
        return _run(args)
    except (ValueError, FileNotFoundError, KeyError) as e:  # the dispatcher prints one line: keep it one line
        message = str(e.args[0] if isinstance(e, KeyError) and e.args else e)
        raise UsageError(_one_line(message)) from e


def _one_line(message: str, limit: int = 400) -> str:
    """``message`` with its lines joined (library errors span several), cut to ``limit`` characters."""
    text = " ".join(message.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _run(args: argparse.Namespace) -> int:
    """The body of :func:`run`."""
    datasets = [name.strip() for name in args.datasets.split(",") if name.strip()]
    if not datasets:
        raise UsageError("--datasets is empty; name at least one of " + ", ".join(BENCHMARKS))
    roots = _dataset_roots(datasets, args.data_dir, download=args.download)
    upscaler, scale, model = _build_upscaler(args)
    start = time.perf_counter()
    results = evaluate(upscaler, datasets, scale, roots, y_channel=not args.rgb)
    seconds = time.perf_counter() - start
    channel = "Y" if not args.rgb else "RGB (PSNR), Y (SSIM)"
    title = f"{args.model} x{scale}, {channel}, border {scale}, {seconds:.1f} s"
    if args.sparse:
        from iss.sparse import sparse_path

        title += f" ({sparse_path(model)})"
    print(format_table(results, title))
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(results, indent=2) + "\n")
    return 0


def _build_upscaler(args: argparse.Namespace) -> tuple[Upscaler, int, nn.Module | None]:
    """The upscaler named by ``--model``, the scale it works at (checked against ``--scale``) and its model
    (None for bicubic)."""
    if args.tile is not None and (args.tile <= args.overlap or args.overlap < 0):
        raise UsageError(f"--tile must be larger than --overlap ({args.overlap}) >= 0, got {args.tile}")
    if args.model == "bicubic":
        return bicubic_upscaler(_check_scale(args.scale)), args.scale, None
    from iss import archs  # lazy: torch model code is not needed for bicubic

    device = _device(args.device)
    if args.model in archs.list_archs():
        scale = _check_scale(args.scale)
        if args.weights is None:
            raise UsageError(
                f"--model {args.model} needs --weights FILE (official .pth weights for x{scale})"
            )
        if not args.weights.is_file():
            raise FileNotFoundError(f"weights file {args.weights} not found")
        model = archs.load_official(archs.build(args.model, scale), args.weights)
    elif Path(args.model).suffix == ".safetensors" or args.model in _zoo_names():
        model = iss.load(args.model, sparse=False, device=device)  # --sparse below, where asked for
        scale = _check_scale(args.scale if args.scale is not None else model.scale)
        if scale != model.scale:
            raise UsageError(f"{args.model} is an x{model.scale} checkpoint, but --scale is {scale}")
    else:
        hint = (
            " (official .pth weights go with --weights and an architecture name)"
            if args.model.endswith(".pth")
            else ""
        )
        raise UsageError(
            f"unknown --model '{args.model}'{hint}; use 'bicubic', one of {', '.join(archs.list_archs())}, "
            "a zoo name (`python -m iss zoo list`) or a path to a .safetensors checkpoint"
        )
    if args.sparse:
        if device.type != "cpu":
            raise UsageError("--sparse runs on the CPU only: add --device cpu")
        from iss.sparse import sparsify  # lazy: only when asked for

        model = sparsify(model)
    return model_upscaler(model, tile=args.tile, overlap=args.overlap, device=device), scale, model


def _zoo_names() -> set[str]:
    """The names of the bundled zoo's models (what ``upscale`` and ``iss.load`` accept)."""
    return {model.name for model in iss.list_models()}


def _check_scale(scale: int | None) -> int:
    """Only x2, x3 and x4 have benchmark conventions (and official weights)."""
    if scale not in SCALES:
        raise UsageError(
            f"--scale must be 2, 3 or 4, got {scale}" if scale is not None else "--scale is required"
        )
    return scale


def _device(name: str | None) -> torch.device:
    """``--device`` checked up front (CUDA by default when available) so a bad name is a one-line error."""
    if name is None:
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(name)
    except RuntimeError as e:
        raise UsageError(f"--device {name!r} is not a device name ({e})") from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise UsageError(f"--device {name} but CUDA is not available here; use --device cpu")
    return device


def _dataset_roots(datasets: list[str], data_dir: Path | None, *, download: bool) -> dict[str, Path]:
    """Folder holding ``<Set>/HR`` for each set: ``--data-dir`` / ``$ISS_DATA_DIR/benchmarks``, or the Hub."""
    if data_dir is None and os.environ.get("ISS_DATA_DIR"):
        data_dir = Path(os.environ["ISS_DATA_DIR"]) / "benchmarks"
    if data_dir is None and not download:
        raise UsageError(
            "no benchmark folder: pass --data-dir DIR (holding <Set>/HR), set ISS_DATA_DIR, or --download"
        )
    if data_dir is not None and not data_dir.is_dir():
        raise FileNotFoundError(f"--data-dir {data_dir} is not a folder")
    if data_dir is not None and (data_dir / "benchmarks").is_dir():
        data_dir = data_dir / "benchmarks"  # the data folder every command takes, holding benchmarks/<Set>/HR
    roots = {}
    for name in datasets:
        if data_dir is not None and (not download or _has_set(data_dir, name)):
            roots[name] = data_dir
        else:
            roots[name] = _fetch(name)
    return roots


def _has_set(data_dir: Path, name: str) -> bool:
    """Whether ``data_dir`` already holds set ``name`` (any spelling BenchmarkSet accepts)."""
    try:
        BenchmarkSet(data_dir, name, 2)
    except (ValueError, FileNotFoundError):
        return False
    return True


def _fetch(name: str) -> Path:
    """Download a set's HR images from the Hub and return the folder holding ``<Set>/HR``."""
    from iss.hub import fetch_benchmark  # lazy: huggingface_hub is imported only when a set is downloaded

    folder = Path(fetch_benchmark(benchmark_name(name)))
    return folder.parent if (folder / "HR").is_dir() else folder
