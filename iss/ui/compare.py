"""The Compare tab: upscale one image with bicubic and zoo checkpoints, measure, pair and zoom the results.

A comparison is estimated before it runs (``estimate``: seconds from FLOPs and the measured speed of each
backbone), bounded to ``MAX_SECONDS`` (the input is cropped to its centre beyond) and streamed method by
method (``compare_steps``); the zoo's cells and models come from ``catalog``. Plain values in and out
(PIL/ndarray images, numbers, lists), no gradio.
"""

from __future__ import annotations

import functools
import math
import os
import tempfile
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image, ImageDraw, ImageFont

import iss
import iss.data.metrics
import iss.data.reference
import iss.sparse.kernels
import iss.sparse.speed

from . import cost
from .catalog import (
    BICUBIC,
    EXAMPLES_DIR,
    SCALES,
    availability,
    cell_note,
    default_device,
    default_ratio,
    default_scale,
    find_entry,
    in_order,
    load_model,
    method_choices,
    resolved_zoo,
    short_reason,
)

HR_LABEL, LR_LABEL = "HR (reference)", "LR input (nearest)"
MODE_HR = "HR image: downscale with MATLAB bicubic, upscale, measure"
MODE_LR = "LR image: upscale it"
MODES = (MODE_HR, MODE_LR)
MAX_SIDE = {MODE_HR: 1024, MODE_LR: None}  # HR inputs are capped (longest side); LR ones are upscaled whole
LR_MAX_SECONDS = 600.0  # an LR-mode comparison expected to take longer is refused, with the numbers
MAX_RESULT_BYTES = 2 * 1024**3  # the results of one comparison (uint8 RGB, the LR view included) at most
MAX_UPLOAD_MB = 50  # the app's upload limit (Gradio refuses bigger files before they reach us)
INPUT_POLICY = (
    "Upload a PNG, JPEG, WebP, BMP, TIFF or PPM image of at most "
    f"{iss.data.MAX_PIXELS // 1_000_000} megapixels and {MAX_UPLOAD_MB} MB."
)
TILE_ABOVE = 192  # LR inputs larger than this (either side) are upscaled in overlapping tiles
TILE = 128
URBAN100_MORE = ("img_019", "img_044", "img_067", "img_073", "img_096")  # cropped from --data-dir's Urban100
FIRST_EXAMPLE = "urban100_img_004.png"  # where ISS-P leads most at the default cell (docs/app.md, "Examples")
URBAN100_CROP_SIZE = 240  # the bundled crops' size too (assets/CREDITS.md gives their boxes)
TABLE_HEADERS = ["method", "PSNR (dB)", "SSIM", "kept weights", "ratio", "iterations", "file size",
                 "time (s)"]  # fmt: skip
MAX_SECONDS = 60.0  # expected time of one comparison; larger inputs are cropped to their centre to fit
ZOOM_NOTE = (
    "Each tile shows its method's PSNR over the zoomed region only (dB, Y channel, HR mode): it differs from "
    "the table's PSNR/SSIM, which are over the whole image."
)
_WARM: set[tuple] = set()  # (entry, device, sparse, zoo) of models that have run once


@functools.cache
def sparse_default(arch: str, device: str) -> bool:
    """The "Sparse kernels" default for ``arch`` on ``device``: ``iss.sparse.speed.sparse_by_default``
    decided once per process, so that every page load and request gets the same default however the
    speeds measured since move."""
    return iss.sparse.speed.sparse_by_default(arch, device)


def sparse_kernel_note() -> str:
    """Which kernels the "sparse kernels" toggle runs (the compiled ones, or the slower fallback)."""
    if iss.sparse.kernels.load() is None:
        return "CPU; pure-PyTorch fallback (no C compiler found), about half as fast as the C kernels"
    return "CPU; compiled C kernels, whole blocks fused; each layer stays dense where that is faster"


# ------------------------------------------------------------------------------------------------- compare


@dataclass
class Comparison:
    """One comparison's result, kept in ``RecentComparisons`` to re-pair and re-zoom it without a rerun."""

    lr: np.ndarray
    hr: np.ndarray | None
    results: dict[str, np.ndarray] = field(default_factory=dict)
    rows: list[list[Any]] = field(default_factory=list)
    files: list[str] = field(default_factory=list)
    message: str = ""

    def views(self) -> dict[str, np.ndarray]:
        """Every image at output size: the HR (HR mode), the LR blown up with nearest, then each result."""
        out = {HR_LABEL: self.hr} if self.hr is not None else {}
        h, w = next(iter(self.results.values())).shape[:2]
        out[LR_LABEL] = np.asarray(Image.fromarray(self.lr).resize((w, h), Image.NEAREST))
        return {**out, **self.results}


class RecentComparisons:
    """The last ``size`` comparisons by key, shared by every session: a session keeps only its key, so the
    memory held stays bounded by ``size`` comparisons however many visitors come and go."""

    def __init__(self, size: int = 8) -> None:
        self.size = size
        self._items: OrderedDict[str, Comparison] = OrderedDict()
        self._lock = threading.Lock()

    def put(self, key: str, comp: Comparison) -> str:
        """Keep ``comp`` under ``key`` (the newest), dropping the oldest beyond ``size``; returns ``key``."""
        with self._lock:
            self._items[key] = comp
            self._items.move_to_end(key)
            while len(self._items) > self.size:
                self._items.popitem(last=False)
        return key

    def get(self, key: Any) -> Comparison | None:
        """The comparison kept under ``key``, or None once it has been dropped (or for any other value)."""
        with self._lock:
            return self._items.get(key) if isinstance(key, str) else None

    def __len__(self) -> int:
        return len(self._items)


def prepare_input(image: Any, mode: str, scale: int) -> tuple[np.ndarray, np.ndarray | None, str]:
    """Turn the input (an image file's path, a PIL image or an array) into (LR, HR or None, message).

    Files are decoded by ``iss.data.decode_image`` within ``iss.data.MAX_PIXELS`` and shrunk to the mode's
    cap while decoding; the result is RGB uint8, downscaled with MATLAB bicubic to the LR in HR mode.
    """
    if image is None:
        raise ValueError("upload an image or pick an example first")
    if mode not in MODES:
        raise ValueError(f"unknown input mode {mode!r}; choose one of: {', '.join(MODES)}")
    cap = MAX_SIDE[mode]
    img, (w, h), source_mode, frames = _decode(image, cap)
    notes = [_conversion_note(source_mode)] if source_mode != "RGB" else []
    if frames > 1:
        notes.append(f"the file holds {frames} frames or pages: the first is used")
    shrunk = cap is not None and max(w, h) > cap
    if shrunk:
        notes.append(
            f"input {w}x{h} is above the {cap}px cap for this mode: downscaled (bicubic, antialiased) to "
            f"{img.shape[1]}x{img.shape[0]}"
        )
    if mode == MODE_LR:
        return img, None, "; ".join(notes)
    hr = iss.data.modcrop(img, scale)
    if min(hr.shape[:2]) < 4 * scale:
        need = f"at least {4 * scale}px per side"
        if shrunk:
            raise ValueError(
                f"the image is too elongated for x{scale}: fitting its {w}x{h} to the {cap}px cap of this "
                f"mode leaves {img.shape[1]}x{img.shape[0]}, and HR mode needs {need}; crop it first"
            )
        raise ValueError(f"the image is too small for x{scale}: {w}x{h}; use {need}")
    lr = iss.imresize(hr, 1 / scale)
    return lr, hr, "; ".join(notes)


def _conversion_note(source_mode: str) -> str:
    """What decoding did to a non-RGB input, for the status line."""
    alpha = source_mode in ("RGBA", "LA", "PA", "RGBa", "La")
    note = f"input mode {source_mode} converted to 8-bit RGB"
    return note + " (alpha composited on white)" if alpha else note


def _decode(image: Any, cap: int) -> iss.data.Decoded:
    """The input as RGB uint8 within ``iss.data.MAX_PIXELS`` and ``cap``; a bad file's error names only it."""
    if isinstance(image, str | os.PathLike):
        try:
            return iss.data.decode_image(image, max_pixels=iss.data.MAX_PIXELS, max_side=cap)
        except iss.data.ImageError as e:
            raise iss.data.ImageError(f"{Path(image).name}: {e.reason}. {INPUT_POLICY}") from None
    rgb = iss.data.to_rgb_uint8(image, max_pixels=iss.data.MAX_PIXELS, max_side=cap)
    size = image.size if isinstance(image, Image.Image) else (image.shape[1], image.shape[0])
    return iss.data.Decoded(rgb, size, image.mode if isinstance(image, Image.Image) else "RGB")


def check_request(
    arch: Any, scale: Any, ratio: Any, methods: Any, sparse: Any
) -> tuple[str, int, float | None, list[str], bool | None]:
    """Backbone, scale (int), ratio (float, or None: any), methods (a list) and sparse (bool, or None: the
    default), or ``ValueError`` saying what a request got wrong.

    The app hands ``/upscale``'s raw values here, so that an API client's mistake gets a one-line answer.
    """
    if not isinstance(arch, str) or arch not in iss.archs.list_archs():
        raise ValueError(f"backbone must be one of {', '.join(iss.archs.list_archs())}, got {arch!r:.40}")
    if isinstance(scale, str) and scale.strip().isdigit():
        scale = int(scale)
    if isinstance(scale, bool) or scale not in SCALES:
        raise ValueError(f"scale must be one of {', '.join(map(str, SCALES))}, got {scale!r}")
    ratio = _ratio(ratio)
    if not isinstance(methods, list | tuple) or not all(isinstance(m, str) for m in methods):
        raise ValueError(f"methods must be a list of method names such as ['{BICUBIC}'], got {methods!r:.80}")
    if not methods:
        raise ValueError("choose at least one method to compare")
    if sparse is not None and not isinstance(sparse, bool):
        raise ValueError(f"sparse must be true or false, got {sparse!r:.40}")
    return arch, int(scale), ratio, in_order(methods), sparse


def _ratio(value: Any) -> float | None:
    """A pruning ratio from a request: None (or empty) for any, else a number in [0, 1)."""
    if value is None or value == "":
        return None
    try:
        ratio = math.nan if isinstance(value, bool) else float(value)
    except (TypeError, ValueError):
        ratio = math.nan
    if not 0 <= ratio < 1:  # NaN included
        raise ValueError(f"ratio must be a number in [0, 1), got {value!r:.40}")
    return ratio


@dataclass
class Estimate:
    """Expected seconds of a comparison per method, for the LR size that will run (after the time bound)."""

    seconds: dict[str, float]
    lr_size: tuple[int, int]  # (width, height)
    scale: int
    note: str = ""  # why the input was cropped, if it was; how the machine's load slows it, if it does

    def describe(self) -> str:
        """One Markdown line: total, size, the slowest methods, and the note (crop, load)."""
        w, h, scale = *self.lr_size, self.scale
        total = sum(self.seconds.values())
        slowest = sorted(self.seconds.items(), key=lambda kv: -kv[1])[:3]
        parts = ", ".join(f"{name} {cost.format_seconds(t)}" for name, t in slowest if t >= 0.05)
        text = f"**Expected: {cost.approximately(total)}** for LR {w}x{h} to {w * scale}x{h * scale}"
        return " ".join([text + (f" ({parts})." if parts else "."), self.note]).strip()


def estimate(
    image: Any,
    arch: str,
    scale: int,
    ratio: float | None,
    methods: Sequence[str],
    mode: str = MODE_HR,
    *,
    sparse: bool | None = None,
    device: str | None = None,
    zoo_path: str | None = None,
) -> Estimate:
    """What ``compare`` with these arguments is expected to cost (loads the models, runs none)."""
    arch, scale, ratio, methods, sparse = check_request(arch, scale, ratio, methods, sparse)
    device = device or default_device()
    sparse = sparse_default(arch, device) if sparse is None else sparse
    lr, hr, _ = prepare_input(image, mode, scale)
    return _bounded(lr, hr, arch, scale, ratio, methods, sparse, device, zoo_path)[2]


def _bounded(
    lr: np.ndarray,
    hr: np.ndarray | None,
    arch: str,
    scale: int,
    ratio: float | None,
    methods: Sequence[str],
    sparse: bool,
    device: str,
    zoo_path: str | None,
) -> tuple[np.ndarray, np.ndarray | None, Estimate]:
    """(LR, HR, estimate) after cropping both to their centre when the estimate is above ``MAX_SECONDS`` (HR
    mode); an LR input (no HR) is upscaled whole, or refused by ``_check_whole``."""
    seconds = _expected_seconds(lr.shape[:2], arch, scale, ratio, methods, sparse, device, zoo_path)
    total = sum(seconds.values())
    note = ""
    if hr is None:
        _check_whole(lr.shape[:2], scale, seconds)
    elif total > MAX_SECONDS:
        h, w = lr.shape[:2]
        factor = math.sqrt(MAX_SECONDS / total)
        ch, cw = max(8, int(h * factor)), max(8, int(w * factor))
        y0, x0 = (h - ch) // 2, (w - cw) // 2
        lr = np.ascontiguousarray(lr[y0 : y0 + ch, x0 : x0 + cw])
        if hr is not None:
            hr = np.ascontiguousarray(hr[y0 * scale : (y0 + ch) * scale, x0 * scale : (x0 + cw) * scale])
        note = (
            f"⚠️ The whole LR input ({w}x{h}) would take {cost.approximately(total)} with these "
            f"methods, over the {MAX_SECONDS:.0f} s bound: cropped to its central {cw}x{ch}. Fewer or faster "
            "methods "
            "(or sparse kernels on the CPU) leave room for more."
        )
        seconds = _expected_seconds(lr.shape[:2], arch, scale, ratio, methods, sparse, device, zoo_path)
    note = " ".join(n for n in (note, iss.sparse.speed.load_note(device)) if n)
    return lr, hr, Estimate(seconds, (lr.shape[1], lr.shape[0]), scale, note)


def _check_whole(lr_shape: tuple[int, int], scale: int, seconds: dict[str, float]) -> None:
    """``ValueError`` with the numbers when upscaling a whole LR input would pass ``LR_MAX_SECONDS`` or
    ``MAX_RESULT_BYTES``: the app never returns a silently smaller image."""
    h, w = lr_shape
    size = f"the whole {w}x{h} LR image to {w * scale}x{h * scale}"
    views = len(seconds) + 1  # each result and the LR shown at output size
    needed = views * h * w * scale**2 * 3
    if needed > MAX_RESULT_BYTES:
        fit = MAX_RESULT_BYTES // (h * w * scale**2 * 3) - 1
        advice = f"choose at most {fit} method(s)" if fit >= 1 else "use a smaller image or scale"
        raise ValueError(
            f"upscaling {size} with {len(seconds)} method(s) needs {needed / 1024**3:.1f} GiB for the "
            f"results, over this app's {MAX_RESULT_BYTES / 1024**3:.0f} GiB limit: {advice}, or run "
            "`python -m iss upscale` locally"
        )
    total = sum(seconds.values())
    if total > LR_MAX_SECONDS:
        fastest = min(seconds, key=seconds.__getitem__)
        raise ValueError(
            f"upscaling {size} with these methods is expected to take {cost.approximately(total)}, over this "
            f"app's {LR_MAX_SECONDS / 60:.0f}-minute limit ({fastest} alone: "
            f"{cost.approximately(seconds[fastest])}): choose fewer methods, or run `python -m iss upscale` "
            "locally"
        )


def _expected_seconds(
    lr_shape: tuple[int, int],
    arch: str,
    scale: int,
    ratio: float | None,
    methods: Sequence[str],
    sparse: bool,
    device: str,
    zoo_path: str | None,
) -> dict[str, float]:
    """Expected seconds per method on an LR image of ``lr_shape`` (unavailable checkpoints are left out)."""
    seconds = {}
    for method in methods:
        if method == BICUBIC:
            pixels = lr_shape[0] * lr_shape[1] * scale**2
            seconds[method] = 1e-7 * pixels / iss.sparse.speed.load_factor()  # MATLAB bicubic: ~10 Mpx/s
            continue
        try:
            entry = find_entry(arch, scale, ratio, method, zoo_path)
            _, meta = load_model(entry.name, device, sparse, zoo_path)
        except (FileNotFoundError, ValueError, KeyError, OSError):
            continue  # the comparison says why
        flops = _inference_flops(meta["arch"], scale, lr_shape, meta.get("arch_kwargs"))
        speed = iss.sparse.speed.gflops("sparse" if sparse else "dense", meta["arch"], device)
        seconds[method] = flops / (speed * 1e9)
    return seconds


def _inference_flops(arch: str, scale: int, lr_shape: tuple[int, int], arch_kwargs: dict | None) -> float:
    """FLOPs of upscaling an LR image of ``lr_shape`` as ``compare`` does (tiled above ``TILE_ABOVE``)."""
    h, w = lr_shape
    pixels = h * w
    if max(h, w) > TILE_ABOVE:  # tiles of TILE overlapping by 32 (iss.infer): count the pixels they cover
        pixels = len(_starts(h)) * len(_starts(w)) * min(TILE, h) * min(TILE, w)
    reference = cost.trace(arch, scale, 64, 64, train=False, arch_kwargs=arch_kwargs)
    return reference.forward_flops * pixels / 64**2


def _starts(length: int, overlap: int = 32) -> list[int]:
    """Tile origins along one axis, as ``iss.infer.forward_tiled`` places them."""
    size = min(TILE, length)
    return [0] if size >= length else [*range(0, length - size, size - overlap), length - size]


def compare(*args: Any, **kwargs: Any) -> Comparison:
    """``compare_steps`` run to the end: the finished comparison."""
    *_, comp = compare_steps(*args, **kwargs)
    return comp


def compare_steps(
    image: Any,
    arch: str,
    scale: int,
    ratio: float | None,
    methods: Sequence[str],
    mode: str = MODE_HR,
    *,
    sparse: bool | None = None,
    device: str | None = None,
    zoo_path: str | None = None,
    out_dir: str | None = None,
    write_files: bool = True,
    progress: Callable[[float, str], None] | None = None,
    stop: threading.Event | None = None,
) -> Iterator[Comparison]:
    """Upscale one image with bicubic and each chosen method's zoo checkpoint for (``arch``, ``scale``,
    ``ratio``); measure PSNR/SSIM (Y) in HR mode. Yields the comparison after each method; the last one is
    complete, with its PNG files.

    The input is cropped to its centre when the expected time is above ``MAX_SECONDS``. ``sparse`` (default
    ``iss.sparse.speed.sparse_by_default``) runs the checkpoints through ``iss.sparsify``. A method whose
    checkpoint is missing, corrupt or for another scale is not fatal: its table row says
    ``unavailable: <reason>`` and it is left out of the images. ``progress(fraction, text)`` hears after
    every tile how far the whole comparison is and the time left; setting ``stop`` ends it after the current
    tile, keeping the methods that finished.
    """
    arch, scale, ratio, methods, sparse = check_request(arch, scale, ratio, methods, sparse)
    device = device or default_device()
    sparse = sparse_default(arch, device) if sparse is None else sparse
    lr, hr, message = prepare_input(image, mode, scale)
    lr, hr, expected = _bounded(lr, hr, arch, scale, ratio, methods, sparse, device, zoo_path)
    comp = Comparison(lr=lr, hr=hr)
    missing = availability(arch, scale, zoo_path)  # said once; the rows say which method is unavailable
    notes = [n for n in (message, expected.note, missing, cell_note(arch, scale, ratio, zoo_path)) if n]
    tile = TILE if max(lr.shape[:2]) > TILE_ABOVE else None
    tracker = _Progress(expected.seconds, progress, stop)
    for i, name in enumerate(methods):
        try:
            on_tile = tracker.method(name)
            sr, row = _run_method(name, arch, lr, scale, ratio, device, sparse, zoo_path, tile, on_tile)
        except _Stopped:
            notes.insert(0, f"Stopped: {len(comp.results)} of {len(methods)} methods finished.")
            break
        except (FileNotFoundError, ValueError, KeyError, OSError) as e:
            comp.rows.append([name, f"unavailable: {short_reason(e)}", "", "", "", "", "", ""])
            if not missing:
                notes.append(f"{name} is unavailable: {short_reason(e, limit=400)}")
            continue
        if hr is not None:
            row[1] = round(iss.data.metrics.psnr_y(sr, hr, crop_border=scale), 2)
            row[2] = round(iss.data.metrics.ssim_y(sr, hr, crop_border=scale), 4)
        comp.results[name] = sr
        comp.rows.append(row)
        if name != BICUBIC:
            found = resolved_zoo(zoo_path).get(find_entry(arch, scale, ratio, name, zoo_path).name)
            if refused := getattr(found, "refused", ""):
                notes.append(f"{name}: Hub copy refused ({short_reason(refused, 200)}); bundled copy used")
        if i + 1 < len(methods):
            progress = f"{i + 1} of {len(methods)} methods done; running {methods[i + 1]}…"
            comp.message = "\n\n".join([progress, *notes])
            yield replace(comp, results=dict(comp.results), rows=list(comp.rows))  # a snapshot
    if not comp.results and tracker.stopped:
        raise ValueError("stopped before any method finished")
    if not comp.results:
        raise ValueError(
            "none of the chosen methods could run: " + "; ".join(f"{r[0]}: {r[1]}" for r in comp.rows)
        )
    comp.files = _write_pngs(comp, out_dir) if write_files else []
    h_out, w_out = next(iter(comp.results.values())).shape[:2]
    kernels = ", ".join(_kernels_ran(comp, arch, scale, ratio, device, sparse, zoo_path)) or "dense kernels"
    summary = (
        f"{arch} x{scale}: LR {lr.shape[1]}x{lr.shape[0]} to {w_out}x{h_out}, {len(comp.results)} method(s) "
        f"ran ({kernels}; expected {cost.format_seconds(sum(expected.seconds.values()))})."
    )
    comp.message = "\n\n".join([summary, *notes])
    yield comp


_FIRST_LOCK = threading.Lock()


def first_comparison(arch: str, zoo_path: str | None = None) -> Comparison:
    """The comparison the Compare tab opens on, computed once per process: ``FIRST_EXAMPLE`` (the bundled
    Urban100 crop chosen by ``benchmarks/app_examples.py``) at ``arch``'s default cell, every method, HR
    mode, no PNG files (pressing Compare writes them)."""
    with _FIRST_LOCK:  # concurrent first visitors wait for one computation
        return _first_comparison(arch, zoo_path)


@functools.lru_cache(maxsize=4)
def _first_comparison(arch: str, zoo_path: str | None) -> Comparison:
    """``first_comparison`` without the lock."""
    scale = default_scale(arch, zoo_path)
    ratio = default_ratio(arch, scale, zoo_path)
    methods = method_choices(arch, scale, ratio, zoo_path)
    example = EXAMPLES_DIR / FIRST_EXAMPLE
    *_, comp = compare_steps(example, arch, scale, ratio, methods, zoo_path=zoo_path, write_files=False)
    return comp


class _Stopped(Exception):
    """Stop was pressed: the comparison ends with the methods that finished."""


class _Progress:
    """Reports a comparison's progress after each tile (the share of its expected seconds done, and the time
    left at the pace so far) and raises ``_Stopped`` once ``stop`` is set."""

    def __init__(
        self,
        expected: dict[str, float],
        report: Callable[[float, str], None] | None,
        stop: threading.Event | None,
    ) -> None:
        self.expected, self.report, self.stop = expected, report, stop
        self.total = max(sum(expected.values()), 1e-9)
        self.done = 0.0  # expected seconds of the methods started before this one
        self.started = time.monotonic()
        self.stopped = False

    def method(self, name: str) -> Callable[[int, int], None]:
        """The ``on_tile`` callback for the next method, ``name`` (checks Stop before it starts)."""
        self.check()
        base, share = self.done, self.expected.get(name, 0.0)
        self.done += share

        def on_tile(done: int, total: int) -> None:
            self.check()
            if self.report is not None:
                fraction = min((base + share * done / total) / self.total, 1.0)
                elapsed = time.monotonic() - self.started
                left = elapsed * (1 - fraction) / fraction if fraction > 0 else self.total
                text = f"{name}: tile {done} of {total}, {cost.approximately(left)} left"
                self.report(fraction, text)

        return on_tile

    def check(self) -> None:
        """``_Stopped`` once Stop is pressed."""
        if self.stop is not None and self.stop.is_set():
            self.stopped = True
            raise _Stopped


def _kernels_ran(
    comp: Comparison,
    arch: str,
    scale: int,
    ratio: float | None,
    device: str,
    sparse: bool,
    zoo_path: str | None,
) -> list[str]:
    """The kernels the comparison's checkpoints ran (``iss.sparse.sparse_path``), once each."""
    if not sparse:
        return []
    names = (find_entry(arch, scale, ratio, m, zoo_path).name for m in comp.results if m != BICUBIC)
    return list(
        dict.fromkeys(iss.sparse.sparse_path(load_model(n, device, True, zoo_path)[0]) for n in names)
    )


def _run_method(
    name: str,
    arch: str,
    lr: np.ndarray,
    scale: int,
    ratio: float | None,
    device: str,
    sparse: bool,
    zoo_path: str | None,
    tile: int | None,
    on_tile: Callable[[int, int], None] | None = None,
) -> tuple[np.ndarray, list[Any]]:
    """Upscale ``lr`` with one method (bicubic, or the zoo checkpoint of that method for ``arch``, ``scale``
    and ``ratio``); returns the SR and its (unmeasured) table row."""
    if name == BICUBIC:
        start = time.perf_counter()
        sr = iss.imresize(lr, scale)
        return sr, [BICUBIC, "", "", "—", "—", "—", "—", round(time.perf_counter() - start, 3)]
    entry = find_entry(arch, scale, ratio, name, zoo_path).name
    model, meta = load_model(entry, device, sparse, zoo_path)
    if int(meta["scale"]) != scale:
        raise ValueError(f"checkpoint is x{meta['scale']}, not x{scale}")
    start = time.perf_counter()
    sr = iss.infer.upscale_array(model, lr, tile=tile, device=device, on_tile=on_tile)
    seconds = time.perf_counter() - start
    key = (entry, device, sparse, zoo_path)
    if key in _WARM or not sparse:  # a sparse model's first call times its layers: no measure of speed
        flops = _inference_flops(meta["arch"], scale, lr.shape[:2], meta.get("arch_kwargs"))
        iss.sparse.speed.observe("sparse" if sparse else "dense", meta["arch"], device, flops, seconds)
    _WARM.add(key)
    kept, total = meta["kept"], meta["total"]
    size = f"{meta['size_bytes'] / 1e6:.2f} MB"
    kept_text = f"{kept / 1e3:.0f}k / {total / 1e3:.0f}k ({100 * kept / max(total, 1):.1f}%)"
    timing = round(seconds, 3)  # the kernels that ran are in the summary: the column stays narrow
    trained = meta.get("budget", {}).get("iterations", meta.get("iterations"))  # methods of a cell may differ
    trained_text = f"{trained:,}" if isinstance(trained, int) else "?"
    return sr, [name, "", "", kept_text, meta.get("ratio", ""), trained_text, size, timing]


def _write_pngs(comp: Comparison, out_dir: str | None) -> list[str]:
    """Save every result as a full-resolution PNG for download."""
    folder = Path(out_dir or tempfile.mkdtemp(prefix="iss-sr-"))
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, sr in comp.results.items():
        path = folder / f"{name.replace('/', '_')}_x{sr.shape[1] // comp.lr.shape[1]}.png"
        Image.fromarray(sr).save(path)
        paths.append(str(path))
    return paths


def pair_choices(comp: Comparison | None) -> list[str]:
    """Names the two slider dropdowns offer: HR (HR mode), the nearest-upscaled LR, and every result."""
    return list(comp.views()) if comp is not None else []


def default_pair(comp: Comparison) -> tuple[str, str]:
    """Bicubic on the left, an ISS-P checkpoint (else the last one) on the right; the HR when none ran."""
    names = list(comp.results)
    models = [n for n in names if n != BICUBIC]
    preferred = [n for n in models if "iss-p" in n] or models[::-1]
    right = preferred[0] if preferred else (HR_LABEL if comp.hr is not None else names[-1])
    left = BICUBIC if BICUBIC in names and right != BICUBIC else LR_LABEL
    return left, right


def slider_pair(comp: Comparison, left: str, right: str) -> tuple[np.ndarray, np.ndarray]:
    """The two images to put in the slider (same size)."""
    views = comp.views()
    for name in (left, right):
        if name not in views:
            raise KeyError(f"'{name}' is not among the results; choose one of: {', '.join(views)}")
    return views[left], views[right]


def zoom_box(
    comp: Comparison, x: float | None, y: float | None, size: int | None = None
) -> tuple[int, int, int, int]:
    """(x0, y0, x1, y1) of a square region of the output centred on (x, y), clamped; without (x, y), the
    most detailed region (edges and texture, where super-resolution shows; paper Fig. 2 picks such)."""
    h, w = next(iter(comp.results.values())).shape[:2]
    size = min(size or max(24, min(h, w) // 4), h, w)
    if x is None or y is None:
        x, y = most_detailed(comp.hr if comp.hr is not None else next(iter(comp.results.values())), size)
    cx, cy = float(x), float(y)
    x0 = int(min(max(cx - size / 2, 0), w - size))
    y0 = int(min(max(cy - size / 2, 0), h - size))
    return x0, y0, x0 + size, y0 + size


def most_detailed(image: np.ndarray, size: int) -> tuple[float, float]:
    """Centre (x, y) of the ``size``-pixel square of ``image`` (RGB) with the most gradient energy (sum of
    absolute differences of the channel mean to the right and below), found with an integral image."""
    gray = image.astype(np.float32).mean(axis=2)
    energy = np.zeros_like(gray)
    energy[:, :-1] += np.abs(np.diff(gray, axis=1))
    energy[:-1, :] += np.abs(np.diff(gray, axis=0))
    total = np.pad(energy.astype(np.float64).cumsum(0).cumsum(1), ((1, 0), (1, 0)))
    windows = total[size:, size:] - total[:-size, size:] - total[size:, :-size] + total[:-size, :-size]
    y0, x0 = np.unravel_index(int(np.argmax(windows)), windows.shape)
    return float(x0 + size / 2), float(y0 + size / 2)


def zoom_grid(
    comp: Comparison, box: tuple[int, int, int, int], display: int = 256
) -> list[tuple[np.ndarray, str]]:
    """The same region of every image, blown up (nearest) to ``display`` px, as paper Fig. 2; captioned with
    the method and, in HR mode, its PSNR (dB, Y) over the region."""
    x0, y0, x1, y1 = box
    tiles = []
    for name, img in comp.views().items():
        crop = Image.fromarray(img[y0:y1, x0:x1]).resize((display, display), Image.NEAREST)
        caption = {HR_LABEL: "HR", LR_LABEL: "LR (nearest)"}.get(name, name)
        if comp.hr is not None and name not in (HR_LABEL, LR_LABEL):
            caption += f" {iss.data.metrics.psnr_y(img[y0:y1, x0:x1], comp.hr[y0:y1, x0:x1], 0):.2f}"
        tiles.append((np.asarray(crop), caption))
    return tiles


def captioned(tile: np.ndarray, caption: str, size: int = 18) -> np.ndarray:
    """``tile`` with ``caption`` written on a white strip below it, so that no label covers the image."""
    strip = Image.new("RGB", (tile.shape[1], size + 10), "white")
    font = ImageFont.load_default(size=size)
    ImageDraw.Draw(strip).text((6, 4), caption, fill="black", font=font)
    return np.concatenate([tile, np.asarray(strip)], axis=0)


def overview(comp: Comparison, box: tuple[int, int, int, int]) -> np.ndarray:
    """The reference image (HR, else the first model result) with the zoom region outlined in red."""
    base = comp.hr if comp.hr is not None else list(comp.results.values())[-1]
    img = base.copy()
    x0, y0, x1, y1 = box
    t = max(2, min(img.shape[:2]) // 80)
    red = np.array([255, 0, 0], np.uint8)
    img[y0 : y0 + t, x0:x1] = red
    img[y1 - t : y1, x0:x1] = red
    img[y0:y1, x0 : x0 + t] = red
    img[y0:y1, x1 - t : x1] = red
    return img


# ------------------------------------------------------------------------------------------------ examples


def example_images(
    data_dir: str | os.PathLike | None = None, cache: str | os.PathLike | None = None
) -> list[tuple[str, str]]:
    """(path, label) of the example images: the bundled Urban100 crops, the bundled photos, then (when
    ``data_dir`` or ``$ISS_DATA_DIR`` holds Urban100) crops of ``URBAN100_MORE``.

    Those extra crops are cut into ``cache``, a folder the caller owns (by default a new private one from
    ``tempfile.mkdtemp``: never a fixed name another user could plant), around each image's most detailed
    ``URBAN100_CROP_SIZE`` square.
    """
    bundled = sorted(EXAMPLES_DIR.glob("*.png"), key=lambda p: (not p.stem.startswith("urban100_"), p.stem))
    examples = [(str(p), _label(p.stem)) for p in bundled]
    urban = _urban100_folder(data_dir)
    if urban is None:
        return examples
    out = Path(cache) if cache is not None else Path(tempfile.mkdtemp(prefix="iss-sr-urban100-"))
    out.mkdir(parents=True, exist_ok=True)
    for name in URBAN100_MORE:
        if (urban / f"{name}.png").is_file():
            dst = out / f"urban100_{name}.png"
            Image.fromarray(_detailed_crop(iss.data.read_image(urban / f"{name}.png"))).save(dst)
            examples.append((str(dst), _label(dst.stem)))
    return examples


def _label(stem: str) -> str:
    """An example's label from its file name: ``urban100_img_012`` is "Urban100 img_012 (crop)"."""
    if stem.startswith("urban100_"):
        return f"Urban100 {stem.removeprefix('urban100_')} (crop)"
    return stem.replace("_", " ")


def _detailed_crop(img: np.ndarray, size: int = URBAN100_CROP_SIZE) -> np.ndarray:
    """The ``size`` square of ``img`` with the most edges and texture (``most_detailed``)."""
    size = min(size, *img.shape[:2])
    cx, cy = most_detailed(img, size)
    x0, y0 = int(cx - size / 2), int(cy - size / 2)
    return img[y0 : y0 + size, x0 : x0 + size]


def _urban100_folder(data_dir: str | os.PathLike | None) -> Path | None:
    """The folder of Urban100 HR images under ``data_dir`` (or ``$ISS_DATA_DIR``), if any."""
    root = data_dir or os.environ.get("ISS_DATA_DIR")
    if not root:
        return None
    root = Path(root)
    for candidate in (
        root / "benchmarks" / "Urban100" / "HR",
        root / "Urban100" / "HR",
        root / "HR",
        root / "Urban100",
    ):
        if any((candidate / f"{name}.png").is_file() for name in URBAN100_MORE):
            return candidate
    return None
