"""What the app's events do, as plain functions (no gradio): compare, stream ISS-P vs IHT, inspect sparsity.

Inputs and outputs are plain values (PIL/ndarray images, numbers, lists, plotly figures) so every handler is
testable without a server. All SR, pruning, training and metric logic comes from the ``iss`` library.
"""

from __future__ import annotations

import copy
import functools
import json
import os
import re
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from PIL import Image
from torch import nn

import iss
from iss.ui import figures
from iss.ui.recording import RUNS, RunTrace, list_recordings, load_recording, load_state

ROOT = Path(__file__).resolve().parents[2]
ASSETS = ROOT / "assets"
EXAMPLES_DIR = ASSETS / "examples"
RECORDINGS_DIR = ASSETS / "recordings"
PAPER_RESULTS = Path(__file__).with_name("paper_results.json")

BICUBIC = "bicubic"
HR_LABEL, LR_LABEL = "HR (reference)", "LR input (nearest)"
MODE_HR = "HR image: downscale with MATLAB bicubic, upscale, measure"
MODE_LR = "LR image: upscale it"
MODES = (MODE_HR, MODE_LR)
SCALES = (2, 3, 4)
MAX_SIDE = {MODE_HR: 1024, MODE_LR: 512}  # input size caps (longest side), CPU-friendly
TILE_ABOVE = 192  # LR inputs larger than this (either side) are upscaled in overlapping tiles
TILE = 128
URBAN100_CROPS = {
    "img_012": (560, 100),
    "img_061": (420, 250),
    "img_004": (40, 250),
    "img_092": (300, 250),
}  # x0, y0
URBAN100_CROP_SIZE = 240
TABLE_HEADERS = ["method", "PSNR (dB)", "SSIM", "kept weights", "ratio", "checkpoint", "time (s)"]

# Live analysis defaults: first point well under 10 s, ~100 iterations of SwinIR-light in a minute on CPU.
LIVE_DEFAULTS = dict(
    arch="swinir-light", scale=2, ratio=0.95, alpha=0.95, iterations=100, prune_iters=80, patch=16, batch=4
)
MAX_LIVE_ITERATIONS = {"cpu": 2000, "cuda": 20000}
MAX_LIVE_SECONDS = 900
SHORT_RUN = 1500  # from random init both masks barely move before ~1.5k iterations (issue 4, measured on CPU)
RANDOM_INIT = "random init"


def default_device() -> str:
    """``cuda`` when a GPU is present, else ``cpu``."""
    return "cuda" if torch.cuda.is_available() else "cpu"


def sparse_kernel_note() -> str:
    """Which kernels the "sparse kernels" toggle runs (the compiled one, or the slower fallback)."""
    if iss.spmm.load() is None:
        return "CPU; pure-PyTorch fallback (no C compiler found), about half as fast as the C kernel"
    return "CPU; compiled C kernel; each layer stays dense where that is faster"


# ----------------------------------------------------------------------------------------------------- zoo


def zoo(path: str | None = None) -> list[Any]:
    """The checkpoint zoo entries (empty when the manifest is missing, so the app still runs bicubic)."""
    try:
        return list(iss.zoo.load_zoo(path))
    except FileNotFoundError:
        return []


def zoo_entry(name: str, zoo_path: str | None = None) -> Any:
    """The zoo entry called ``name``; ``KeyError`` listing the names otherwise."""
    entries = {e.name: e for e in zoo(zoo_path)}
    if name not in entries:
        raise KeyError(f"no zoo entry '{name}'; the zoo has: {', '.join(entries) or 'nothing'}")
    return entries[name]


def backbones(zoo_path: str | None = None) -> list[str]:
    """Architectures with at least one zoo entry, else every registered one."""
    names = sorted({e.arch for e in zoo(zoo_path)})
    return names or iss.archs.list_archs()


def ratios(arch: str, scale: int, zoo_path: str | None = None) -> list[float]:
    """Pruning ratios present in the zoo for ``arch`` at ``scale`` (for the ratio dropdown)."""
    return sorted({float(e.ratio) for e in zoo(zoo_path) if e.arch == arch and int(e.scale) == int(scale)})


def method_choices(arch: str, scale: int, ratio: float | None, zoo_path: str | None = None) -> list[str]:
    """Bicubic plus every zoo entry matching backbone, scale and ratio (the default selection to compare)."""
    matching = [
        e.name
        for e in zoo(zoo_path)
        if e.arch == arch
        and int(e.scale) == int(scale)
        and (ratio is None or abs(float(e.ratio) - float(ratio)) < 1e-9)
    ]
    return [BICUBIC, *matching]


@functools.lru_cache(maxsize=16)
def load_model(
    name: str, device: str = "cpu", sparse: bool = False, zoo_path: str | None = None
) -> tuple[nn.Module, dict]:
    """Load (Hub or bundled, sha256-checked) zoo entry ``name``, cached per (name, device, sparse)."""
    entry = zoo_entry(name, zoo_path)
    path = iss.zoo.resolve(entry)
    model, meta = iss.checkpoint.load(path, device=device)
    model.eval()
    kept, total = kept_weights(model)  # before sparsify: converted layers no longer hold a dense weight
    meta = {**meta, "size_bytes": Path(path).stat().st_size, "kept": kept, "total": total}
    if sparse:
        model = iss.sparse.sparsify(model)
    return model, meta


def kept_weights(model: nn.Module) -> tuple[int, int]:
    """(non-zero, total) entries of the model's conv/linear weights: what pruning acts on."""
    kept = total = 0
    for module in model.modules():
        if isinstance(module, nn.Conv2d | nn.Linear):
            kept += int(torch.count_nonzero(module.weight).item())
            total += module.weight.numel()
    return kept, total


# ------------------------------------------------------------------------------------------------- compare


@dataclass
class Comparison:
    """The result of one comparison, kept in the session state to re-pair and re-zoom without rerunning."""

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


def prepare_input(image: Any, mode: str, scale: int) -> tuple[np.ndarray, np.ndarray | None, str]:
    """Turn the uploaded image into (LR, HR or None, message): RGB uint8, capped, downscaled in HR mode."""
    if image is None:
        raise ValueError("upload an image or pick an example first")
    if mode not in MODES:
        raise ValueError(f"unknown input mode {mode!r}; choose one of: {', '.join(MODES)}")
    if int(scale) not in SCALES:
        raise ValueError(f"scale must be one of {SCALES}, got {scale}")
    img = iss.data.to_rgb_uint8(image)
    notes = []
    if isinstance(image, Image.Image) and image.mode not in ("RGB",):
        notes.append(f"input mode {image.mode} converted to 8-bit RGB (alpha composited on white)")
    cap = MAX_SIDE[mode]
    h, w = img.shape[:2]
    if max(h, w) > cap:
        factor = cap / max(h, w)
        img = iss.imresize(img, factor)
        notes.append(
            f"input {w}x{h} is above the {cap}px cap for this mode: downscaled (MATLAB bicubic) to "
            f"{img.shape[1]}x{img.shape[0]}"
        )
    if mode == MODE_LR:
        return img, None, "; ".join(notes)
    hr = iss.data.modcrop(img, int(scale))
    if min(hr.shape[:2]) < 4 * int(scale):
        raise ValueError(f"the image is too small for x{scale}: {w}x{h}; use at least {4 * scale}px per side")
    lr = iss.imresize(hr, 1 / int(scale))
    return lr, hr, "; ".join(notes)


def compare(
    image: Any,
    scale: int,
    methods: Sequence[str],
    mode: str = MODE_HR,
    *,
    sparse: bool = False,
    device: str | None = None,
    zoo_path: str | None = None,
    out_dir: str | None = None,
) -> Comparison:
    """Upscale one image with bicubic and each chosen zoo checkpoint; measure PSNR/SSIM (Y) in HR mode.

    A method whose checkpoint is missing, corrupt or for another scale is not fatal: its table row says
    ``unavailable: <reason>`` and it is left out of the images.
    """
    scale = int(scale)
    device = device or default_device()
    lr, hr, message = prepare_input(image, mode, scale)
    methods = list(dict.fromkeys(methods or [BICUBIC]))
    comp = Comparison(lr=lr, hr=hr)
    notes = [message] if message else []
    tile = TILE if max(lr.shape[:2]) > TILE_ABOVE else None
    for name in methods:
        try:
            sr, row = _run_method(name, lr, scale, device, sparse, zoo_path, tile)
        except (FileNotFoundError, ValueError, KeyError, OSError) as e:
            comp.rows.append([name, f"unavailable: {_reason(e)}", "", "", "", "", ""])
            notes.append(f"{name} is unavailable: {_reason(e, limit=400)}")
            continue
        if hr is not None:
            row[1] = round(iss.metrics.psnr_y(sr, hr, crop_border=scale), 2)
            row[2] = round(iss.metrics.ssim_y(sr, hr, crop_border=scale), 4)
        comp.results[name] = sr
        comp.rows.append(row)
    if not comp.results:
        raise ValueError(
            "none of the chosen methods could run: " + "; ".join(f"{r[0]}: {r[1]}" for r in comp.rows)
        )
    comp.files = _write_pngs(comp, out_dir)
    h_out, w_out = next(iter(comp.results.values())).shape[:2]
    summary = (
        f"x{scale}: LR {lr.shape[1]}x{lr.shape[0]} to {w_out}x{h_out}, {len(comp.results)} method(s) ran."
    )
    comp.message = "\n\n".join([summary, *notes])
    return comp


def _reason(error: BaseException, limit: int = 140) -> str:
    """A one-line reason for an unavailable method: no folders, no digests, at most ``limit`` characters."""
    text = error.args[0] if isinstance(error, KeyError) and error.args else str(error)
    text = re.sub(r"^refusing checkpoint \S+: ", "", re.sub(r"\b[0-9a-f]{64}\b", "<sha256>", str(text)))
    line = " ".join(Path(w).name if w.startswith("/") else w for w in text.split())
    return line if len(line) <= limit else line[: limit - 1] + "…"


def _run_method(
    name: str, lr: np.ndarray, scale: int, device: str, sparse: bool, zoo_path: str | None, tile: int | None
) -> tuple[np.ndarray, list[Any]]:
    """Upscale ``lr`` with one method; returns the SR and its (unmeasured) table row."""
    if name == BICUBIC:
        start = time.perf_counter()
        sr = iss.imresize(lr, scale)
        return sr, [BICUBIC, "", "", "—", "—", "—", round(time.perf_counter() - start, 3)]
    model, meta = load_model(name, device, sparse, zoo_path)
    if int(meta["scale"]) != scale:
        raise ValueError(f"checkpoint is x{meta['scale']}, not x{scale}")
    start = time.perf_counter()
    sr = iss.infer.upscale(model, lr, tile=tile, device=device)
    seconds = time.perf_counter() - start
    kept, total = meta["kept"], meta["total"]
    size = f"{meta['size_bytes'] / 1e6:.2f} MB"
    kept_text = f"{kept / 1e3:.0f}k / {total / 1e3:.0f}k ({100 * kept / max(total, 1):.1f}%)"
    return sr, [name, "", "", kept_text, meta.get("ratio", ""), size, round(seconds, 3)]


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
    """(x0, y0, x1, y1) of a square region of the output centred on (x, y) (default: centre), clamped."""
    h, w = next(iter(comp.results.values())).shape[:2]
    size = min(size or max(24, min(h, w) // 4), h, w)
    cx = w / 2 if x is None else float(x)
    cy = h / 2 if y is None else float(y)
    x0 = int(min(max(cx - size / 2, 0), w - size))
    y0 = int(min(max(cy - size / 2, 0), h - size))
    return x0, y0, x0 + size, y0 + size


def zoom_grid(
    comp: Comparison, box: tuple[int, int, int, int], display: int = 192
) -> list[tuple[np.ndarray, str]]:
    """The same region of every image, blown up (nearest) to ``display`` px and captioned, as paper Fig. 2."""
    x0, y0, x1, y1 = box
    tiles = []
    for name, img in comp.views().items():
        crop = Image.fromarray(img[y0:y1, x0:x1]).resize((display, display), Image.NEAREST)
        caption = name
        if comp.hr is not None and name not in (HR_LABEL, LR_LABEL):
            caption = f"{iss.metrics.psnr_y(img[y0:y1, x0:x1], comp.hr[y0:y1, x0:x1], 0):.2f} dB {name}"
        tiles.append((np.asarray(crop), caption))
    return tiles


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
    """(path, label) of the example images: Urban100 crops if the data folder has them, else bundled photos.

    Urban100 crops are cut on the fly into a cache folder outside the repository (benchmark images are never
    committed).
    """
    urban = _urban100_folder(data_dir)
    if urban is not None:
        out = Path(cache or Path(tempfile.gettempdir()) / "iss-sr-urban100-crops")
        out.mkdir(parents=True, exist_ok=True)
        examples = []
        for name, (x, y) in URBAN100_CROPS.items():
            src = urban / f"{name}.png"
            if not src.is_file():
                continue
            dst = out / f"Urban100_{name}_crop.png"
            if not dst.is_file():
                img = iss.data.read_image(src)
                x0, y0 = min(x, img.shape[1] - URBAN100_CROP_SIZE), min(y, img.shape[0] - URBAN100_CROP_SIZE)
                Image.fromarray(img[y0 : y0 + URBAN100_CROP_SIZE, x0 : x0 + URBAN100_CROP_SIZE]).save(dst)
            examples.append((str(dst), f"Urban100 {name} (crop)"))
        if examples:
            return examples
    return [(str(p), p.stem.replace("_", " ")) for p in sorted(EXAMPLES_DIR.glob("*.png"))]


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
        if (candidate / "img_012.png").is_file() or (candidate / "img_061.png").is_file():
            return candidate
    return None


# ------------------------------------------------------------------------------------------------ analysis


def recorded_states() -> list[str]:
    """Start points offered to a live run: random init, then ``<recording> @ <iteration>`` per saved state."""
    choices = [RANDOM_INIT]
    for folder in list_recordings(RECORDINGS_DIR):
        config = json.loads((folder / "run.json").read_text())
        states = [s for s in config.get("states", []) if (folder / s["file"]).is_file()]
        choices += [f"{folder.name} @ {s['iteration']}" for s in states]
    return choices


def recording_names() -> list[str]:
    """Names of the recorded runs bundled in ``assets/recordings``."""
    return [p.name for p in list_recordings(RECORDINGS_DIR)]


def default_layers(layers: Sequence[str], count: int = 2) -> list[str]:
    """Two representative layers (a quarter and three quarters into the network), as the paper's Fig. 3."""
    if len(layers) <= count:
        return list(layers)
    return [layers[len(layers) // 4], layers[(3 * len(layers)) // 4]]


def recorded_figures(name: str, layers: Sequence[str] | None = None) -> tuple[Any, Any, Any, str]:
    """The three analysis figures for a whole recorded run, and a summary line."""
    config, traces = load_recording(RECORDINGS_DIR / name)
    chosen = [layer for layer in (layers or []) if layer in config["layers"]] or default_layers(
        config["layers"]
    )
    summary = (
        f"Recorded run `{name}`: {config.get('arch')} x{config.get('scale')}, ratio {config.get('ratio')}, "
        f"alpha {config.get('alpha')}, batch {config.get('batch')}, LR patch {config.get('patch')}, "
        f"{config['iterations_done']} iterations of each run on {config.get('device', 'cpu')} "
        f"({config.get('seconds_per_iteration', float('nan')):.2f} s per iteration of both runs)."
    )
    return (
        figures.mask_dynamics_figure(traces, chosen),
        figures.gradient_figure(traces, chosen),
        figures.training_figure(traces),
        summary,
    )


def recording_layers(name: str) -> list[str]:
    """Layers traced in recording ``name``."""
    config, _ = load_recording(RECORDINGS_DIR / name)
    return list(config["layers"])


def prunable_layers(arch: str, scale: int) -> list[str]:
    """Names of the weights the pruners act on for ``arch`` (what the layer picker offers)."""
    model = iss.archs.build(arch, int(scale))
    return iss.pruning.build("iht", model, 0.5, prune_iters=1).layer_names


@dataclass
class LiveRun:
    """Two models (same init), two pruners (ISS-P, IHT), two trainers, fed from one batch stream."""

    models: dict[str, nn.Module]
    pruners: dict[str, Any]
    trainers: dict[str, Any]
    traces: dict[str, RunTrace]
    start_iteration: int
    config: dict[str, Any]


def build_live_run(
    arch: str,
    scale: int,
    ratio: float,
    alpha: float,
    prune_iters: int,
    layers: Sequence[str] | None,
    start: str = RANDOM_INIT,
    *,
    seed: int = 0,
    device: str = "cpu",
    arch_kwargs: dict[str, Any] | None = None,
    lr: float = 2e-4,
    all_layers: bool = False,
) -> LiveRun:
    """Set up ISS-P and IHT from the same random init, or from a recorded state of both runs.

    Per-layer series are traced for ``layers`` (two representative ones when empty), or for every pruned
    layer with ``all_layers`` (recordings).
    """
    config = dict(
        arch=arch, scale=int(scale), ratio=float(ratio), alpha=float(alpha), prune_iters=int(prune_iters)
    )
    state_path = None
    if start and start != RANDOM_INIT:
        state_path, recorded = _recorded_state(start)
        config.update(
            {k: recorded[k] for k in ("arch", "scale", "ratio", "alpha", "prune_iters") if k in recorded}
        )
        arch_kwargs = recorded.get("arch_kwargs", arch_kwargs)
    torch.manual_seed(seed)
    first = iss.archs.build(config["arch"], config["scale"], **(arch_kwargs or {}))
    models = {"iss-p": first, "iht": copy.deepcopy(first)}
    options = {"iss-p": {"alpha": config["alpha"]}, "iht": {}}
    pruners = {
        run: iss.pruning.build(
            run, models[run], config["ratio"], prune_iters=config["prune_iters"], **options[run]
        )
        for run in RUNS
    }
    start_iteration = 0
    if state_path is not None:
        meta = load_state(state_path, models, pruners)
        start_iteration = int(meta["iteration"])
    for model in models.values():
        model.to(device).train()
    names = pruners["iss-p"].layer_names
    chosen = names if all_layers else [n for n in (layers or []) if n in names] or default_layers(names)
    traces = {run: RunTrace(layers=chosen) for run in RUNS}
    for run in RUNS:
        pruners[run].add_callback(traces[run].observe)
    train_config = iss.train.TrainConfig(lr=lr)
    trainers = {run: iss.train.Trainer(models[run], pruners[run], train_config) for run in RUNS}
    return LiveRun(models, pruners, trainers, traces, start_iteration, {**config, "layers": chosen})


def _recorded_state(start: str) -> tuple[Path, dict[str, Any]]:
    """Path of the state file named ``<recording> @ <iteration>`` and the recording's config."""
    name, _, iteration = start.partition(" @ ")
    folder = RECORDINGS_DIR / name.strip()
    config, _ = load_recording(folder)
    for state in config.get("states", []):
        if str(state["iteration"]) == iteration.strip():
            return folder / state["file"], config
    raise KeyError(f"no recorded state '{start}'; choose one of: {', '.join(recorded_states())}")


LIVE_SETS = ("T91",)  # small enough to load in a second or two when a live run starts
RECORDING_SETS = ("T91", "BSD200")


def training_batches(
    scale: int,
    patch: int,
    batch: int,
    data_dir: str | None = None,
    seed: int = 0,
    sets: Sequence[str] = LIVE_SETS,
) -> Iterator:
    """Endless (lr, hr) batches of random patches: the training sets when present, else the bundled photos."""
    folders = training_folders(data_dir, sets)
    dataset = iss.data.TrainPatches(folders, int(scale), int(patch), length=int(batch) * 1000, seed=seed)
    epoch = 0
    while True:
        dataset.set_epoch(epoch)
        for start in range(0, len(dataset), int(batch)):
            pairs = [dataset[i] for i in range(start, start + int(batch))]
            yield torch.stack([p[0] for p in pairs]), torch.stack([p[1] for p in pairs])
        epoch += 1


def training_folders(data_dir: str | None, sets: Sequence[str] = LIVE_SETS) -> list[Path]:
    """The training ``sets`` under ``data_dir``/``$ISS_DATA_DIR`` when present, else ``assets/examples``."""
    root = data_dir or os.environ.get("ISS_DATA_DIR")
    if root:
        found = [Path(root) / "train" / name for name in sets if (Path(root) / "train" / name).is_dir()]
        if found:
            return found
    return [EXAMPLES_DIR]


def validation_pair(scale: int, size: int = 96) -> tuple[np.ndarray, np.ndarray]:
    """A small fixed (LR, HR) pair for the quick validation PSNR: the centre of the first bundled photo."""
    hr = iss.data.read_image(sorted(EXAMPLES_DIR.glob("*.png"))[0])
    h, w = hr.shape[:2]
    side = min(size - size % int(scale), h, w)
    y0, x0 = (h - side) // 2, (w - side) // 2
    hr = iss.data.modcrop(hr[y0 : y0 + side, x0 : x0 + side], int(scale))
    return iss.imresize(hr, 1 / int(scale)), hr


def validate(model: nn.Module, pair: tuple[np.ndarray, np.ndarray], scale: int) -> float:
    """PSNR (Y) of ``model`` on the validation pair."""
    lr, hr = pair
    return iss.metrics.psnr_y(iss.infer.upscale(model, lr), hr, crop_border=int(scale))


def train_live(
    arch: str = LIVE_DEFAULTS["arch"],
    scale: int = LIVE_DEFAULTS["scale"],
    ratio: float = LIVE_DEFAULTS["ratio"],
    alpha: float = LIVE_DEFAULTS["alpha"],
    iterations: int = LIVE_DEFAULTS["iterations"],
    prune_iters: int = LIVE_DEFAULTS["prune_iters"],
    patch: int = LIVE_DEFAULTS["patch"],
    batch: int = LIVE_DEFAULTS["batch"],
    layers: Sequence[str] | None = None,
    start: str = RANDOM_INIT,
    *,
    data_dir: str | None = None,
    device: str | None = None,
    seed: int = 0,
    update_seconds: float = 1.0,
    validate_every: int = 25,
    arch_kwargs: dict[str, Any] | None = None,
) -> Iterator[tuple[Any, Any, Any, str]]:
    """Train ISS-P and IHT side by side on the same batches, yielding (flips, gradients, training, status).

    The first update comes after the first iteration; then one about every ``update_seconds``, and the last at
    the end. Runs are bounded by ``MAX_LIVE_ITERATIONS`` and ``MAX_LIVE_SECONDS``.
    """
    device = device or default_device()
    cap = MAX_LIVE_ITERATIONS["cuda" if device.startswith("cuda") else "cpu"]
    if int(iterations) < 1:
        raise ValueError(f"iterations must be at least 1, got {iterations}")
    iterations = min(int(iterations), cap)
    run = build_live_run(
        arch,
        scale,
        ratio,
        alpha,
        prune_iters,
        layers,
        start,
        seed=seed,
        device=device,
        arch_kwargs=arch_kwargs,
    )
    scale = run.config["scale"]
    batches = training_batches(scale, patch, batch, data_dir, seed)
    pair = validation_pair(scale)
    started = last_yield = time.perf_counter()
    done = 0
    for done in range(1, iterations + 1):
        lr, hr = next(batches)
        lr, hr = lr.to(device), hr.to(device)
        iteration = run.start_iteration + done
        for name in RUNS:
            run.traces[name].commit(iteration, run.trainers[name].step(lr, hr))
        if done % validate_every == 0 or done in (1, iterations):
            for name in RUNS:
                run.traces[name].val_iterations.append(iteration)
                run.traces[name].val_psnr.append(validate(run.models[name], pair, scale))
        elapsed = time.perf_counter() - started
        if done == 1 or done == iterations or time.perf_counter() - last_yield >= update_seconds:
            last_yield = time.perf_counter()
            yield _live_update(run, done, iterations, elapsed, cap)
        if elapsed > MAX_LIVE_SECONDS:
            yield _live_update(
                run, done, iterations, elapsed, cap, f"stopped at the {MAX_LIVE_SECONDS} s bound"
            )
            return


def _live_update(
    run: LiveRun, done: int, total: int, elapsed: float, cap: int, note: str = ""
) -> tuple[Any, Any, Any, str]:
    """Figures and a status line for the current state of a live run."""
    layers = run.config["layers"]
    return (
        figures.mask_dynamics_figure(run.traces, layers),
        figures.gradient_figure(run.traces, layers),
        figures.training_figure(run.traces),
        live_status(run, done, total, elapsed, cap, note),
    )


def live_status(run: LiveRun, done: int, total: int, elapsed: float, cap: int, note: str = "") -> str:
    """Progress, speed, stage, and a warning when the run is too short for the ISS-P vs IHT contrast."""
    c = run.config
    stage = run.pruners["iss-p"].stage
    lines = [
        f"**{done} / {total}** iterations of both runs ({elapsed:.1f} s, "
        f"{elapsed / max(done, 1):.2f} s per iteration), "
        f"{c['arch']} x{c['scale']}, ratio {c['ratio']}, alpha {c['alpha']}, K_p {c['prune_iters']}, "
        f"iteration {run.start_iteration + done}, stage: {stage}. Runs are capped at {cap} iterations.",
    ]
    if run.start_iteration == 0 and total < SHORT_RUN:
        lines.append(
            f"⚠️ This run is too short for the ISS-P vs IHT contrast: from random init both masks barely "
            f"move for the first ~{SHORT_RUN} iterations, and the ISS-P mask keeps its first selection "
            "longest "
            "(the shrinking makes it self-reinforcing). Start from a recorded mid-pruning state, or open the "
            "recorded runs, to see "
            "the steady-state regime where ISS-P's mask moves faster than IHT's."
        )
    if run.start_iteration:
        lines.append(
            f"Resumed both runs from a recorded state at iteration {run.start_iteration} (backbone, scale, "
            "ratio, alpha and K_p come from the recording; Adam restarts, so the first steps are larger)."
        )
    if note:
        lines.append(note)
    return "\n\n".join(lines)


# ------------------------------------------------------------------------------------------------ sparsity


def sparsity_view(
    name: str, layer: str | None = None, zoo_path: str | None = None
) -> tuple[Any, Any, list[str]]:
    """Per-layer kept fraction and magnitude histograms (model, one layer) of zoo entry ``name``."""
    model, meta = load_model(name, "cpu", False, zoo_path)
    weights = {
        f"{module_name}.weight": module.weight.detach().cpu().numpy().ravel()
        for module_name, module in model.named_modules()
        if isinstance(module, nn.Conv2d | nn.Linear)
    }
    layers = list(weights)
    kept = [float(np.count_nonzero(w)) / w.size for w in weights.values()]
    total_kept = sum(np.count_nonzero(w) for w in weights.values())
    title = f"{name}: kept fraction per layer ({total_kept:,} weights kept)"
    groups = {"whole model": np.concatenate(list(weights.values()))}
    if layer in weights:
        groups[layer] = weights[layer]
    return (
        figures.kept_ratio_figure(layers, kept, title),
        figures.magnitude_histogram_figure(groups, f"{name}: weight magnitudes (ratio {meta.get('ratio')})"),
        layers,
    )


def paper_results() -> dict[str, Any]:
    """The paper's Tables 1-5 as parsed into ``paper_results.json``."""
    return json.loads(PAPER_RESULTS.read_text())


ZOO_VS_PAPER_HEADERS = [
    "zoo entry",
    "budget (iterations)",
    "set",
    "zoo PSNR",
    "zoo SSIM",
    "paper PSNR",
    "paper SSIM",
    "paper table",
]


def zoo_vs_paper(zoo_path: str | None = None) -> list[list[Any]]:
    """One row per (zoo entry, benchmark set): the zoo's PSNR/SSIM beside the paper's same cell."""
    rows = []
    paper = paper_results()["rows"]
    for entry in zoo(zoo_path):
        cells = [
            r for r in paper
            if r["arch"] == entry.arch and r["scale"] == int(entry.scale) and r["method"] == entry.method
            and abs(r["ratio"] - float(entry.ratio)) < 1e-9
        ]  # fmt: skip
        budget = (getattr(entry, "budget", None) or {}).get("iterations", "")
        metrics = getattr(entry, "metrics", None) or {}
        for set_name in iss.data.BENCHMARKS:
            ours = metrics.get(set_name, {})
            theirs = cells[0]["metrics"].get(set_name, {}) if cells else {}
            if not ours and not theirs:
                continue
            rows.append([
                entry.name, budget, set_name, ours.get("psnr", ""), ours.get("ssim", ""),
                theirs.get("psnr", ""), theirs.get("ssim", ""),
                cells[0]["table"] if cells else "not in the paper",
            ])  # fmt: skip
    return rows
