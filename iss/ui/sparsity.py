"""The Sparsity tab: where a zoo checkpoint keeps its weights, and the zoo's scores beside the paper's.

Every pruner here keeps the same fraction of every layer, so per-layer kept fractions say nothing; the mask's
structure does: which kernel taps, how concentrated on a few channels, how many output channels are left
empty, each beside a random mask with the same count per layer. The paper's rows are its Tables 1-4
(``iss.data.reference.paper_cells``); the bicubic rows from ``iss/data/bicubic_x{2,3,4}.json``. No gradio.
"""

from __future__ import annotations

import itertools
import re
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

import numpy as np
from torch import nn

import iss
import iss.data.reference
from iss.zoo import METHOD_ORDER

from . import figures
from .catalog import BICUBIC, bicubic_results, default_cell, load_model, short_reason, zoo

ZOO_VS_PAPER_HEADERS = [
    "cell", "method", "iterations",
    *(f"{name}: ours (paper)" for name in iss.data.BENCHMARKS),
    "paper table",
]  # fmt: skip
TOP_CHANNELS = 0.1  # "densest 10% of channels"


@dataclass
class MaskStructure:
    """Where the kept (non-zero) weights of a model sit; fractions in [0, 1], ``random_*`` for a random mask
    with the same number of kept weights per layer."""

    taps: np.ndarray | None  # (3, 3): share of the 3x3 convs' kept weights at each kernel tap
    types: dict[str, dict[str, float]]  # layer type -> top_out, top_in (+ random_): share in densest channels
    blocks: dict[str, dict[str, float]]  # block -> empty_out (+ random_): output channels with nothing kept
    kept: int
    total: int


def prunable_weights(model: nn.Module) -> dict[str, np.ndarray]:
    """The Conv2d/Linear weights of ``model`` (what the pruners act on) by parameter name, as arrays."""
    return {
        f"{name}.weight": module.weight.detach().cpu().numpy()
        for name, module in model.named_modules()
        if isinstance(module, nn.Conv2d | nn.Linear)
    }


def layer_type(name: str) -> str:
    """A layer's kind, from its name without indices: ``layers.0.residual_group.blocks.3.attn.qkv.weight`` ->
    ``attn.qkv``, ``body.7.conv1.weight`` -> ``body.conv1``, ``conv_first.weight`` -> ``conv_first``."""
    parts = [p for p in name.removesuffix(".weight").split(".") if not p.isdigit()]
    return ".".join(parts[-2:])


def block_of(name: str) -> str:
    """The top-level block a layer belongs to: ``layers.2``, ``body.17``, or the layer itself (head, tail)."""
    match = re.match(r"^([^.]+\.\d+)\.", name)
    return match.group(1) if match else name.removesuffix(".weight").split(".")[0]


def mask_structure(weights: dict[str, np.ndarray], seed: int = 0) -> MaskStructure:
    """Kernel-tap, channel-concentration and empty-channel statistics of the non-zeros of ``weights``."""
    rng = np.random.default_rng(seed)
    taps = np.zeros((3, 3))
    top: dict[str, list[np.ndarray]] = defaultdict(list)  # type -> rows of [top_out, top_in, random ...]
    empty: dict[str, list[np.ndarray]] = defaultdict(list)  # block -> rows of [empty, random, channels]
    kept = total = 0
    for name, weight in weights.items():
        mask = weight != 0
        shuffled = rng.permutation(mask.ravel()).reshape(mask.shape)
        kept, total = kept + int(mask.sum()), total + mask.size
        if mask.ndim == 4 and mask.shape[2:] == (3, 3):
            taps += mask.sum(axis=(0, 1))
        top[layer_type(name)].append(
            np.array([*_concentration(mask), *_concentration(shuffled), mask.sum()], np.float64)
        )
        empty[block_of(name)].append(np.array([_empty_rows(mask), _empty_rows(shuffled), mask.shape[0]]))
    types = {}
    for kind, rows in top.items():
        stats = np.average(np.stack(rows)[:, :4], axis=0, weights=[max(r[4], 1) for r in rows])
        types[kind] = dict(zip(("top_out", "top_in", "random_top_out", "random_top_in"), stats, strict=True))
    blocks = {}
    for block, rows in empty.items():
        a = np.stack(rows)
        blocks[block] = {
            "empty_out": a[:, 0].sum() / a[:, 2].sum(),
            "random_empty_out": a[:, 1].sum() / a[:, 2].sum(),
        }
    return MaskStructure(taps / taps.sum() if taps.sum() else None, types, blocks, kept, total)


def _concentration(mask: np.ndarray) -> tuple[float, float]:
    """Share of a layer's kept weights in its densest ``TOP_CHANNELS`` of output and of input channels."""
    out = mask.reshape(mask.shape[0], -1).sum(axis=1)
    inp = np.moveaxis(mask, 1, 0).reshape(mask.shape[1], -1).sum(axis=1)
    return _top_share(out), _top_share(inp)


def _top_share(counts: np.ndarray) -> float:
    """Share of the total held by the largest ``TOP_CHANNELS`` of ``counts`` (at least one)."""
    n = max(1, round(TOP_CHANNELS * counts.size))
    return float(np.sort(counts)[-n:].sum() / max(counts.sum(), 1))


def _empty_rows(mask: np.ndarray) -> int:
    """Output channels (rows) of a layer with no kept weight."""
    return int((mask.reshape(mask.shape[0], -1).sum(axis=1) == 0).sum())


def sparsity_view(
    name: str, layer: str | None = None, zoo_path: str | None = None
) -> tuple[Any, Any, list[str]]:
    """The mask-structure figure and magnitude histograms (model, one layer) of zoo entry ``name``.

    A checkpoint that cannot be loaded raises ``ValueError("<name> is unavailable: <reason>")``, one line
    without server paths.
    """
    try:
        model, meta = load_model(name, "cpu", False, zoo_path)
    except (FileNotFoundError, ValueError, OSError) as e:
        raise ValueError(f"{name} is unavailable: {short_reason(e, 300)}") from None
    weights = prunable_weights(model)
    structure = mask_structure(weights)
    kept_share = structure.kept / max(structure.total, 1)
    title = (
        f"{name}: where the {structure.kept:,} kept weights sit ({100 * kept_share:.1f}% of "
        f"{structure.total:,}; every layer keeps the same fraction)"
    )
    groups = {"whole model": np.concatenate([w.ravel() for w in weights.values()])}
    if layer in weights:
        groups[layer] = weights[layer].ravel()
    return (
        figures.mask_structure_figure(structure, title),
        figures.magnitude_histogram_figure(groups, f"{name}: weight magnitudes (ratio {meta.get('ratio')})"),
        list(weights),
    )


def zoo_vs_paper(zoo_path: str | None = None) -> list[list[Any]]:
    """One row per zoo entry, grouped by cell (backbone, scale, ratio) in order, each set's PSNR / SSIM
    beside the paper's for the same cell, then a bicubic row per cell: the baseline every method must beat.
    PSNR to 2 decimals, SSIM to 4."""
    paper = iss.data.reference.paper_cells()
    rows = []
    for cell, entries in itertools.groupby(sorted_entries(zoo_path), key=_cell):
        arch, scale, ratio = cell
        name = f"{arch} x{scale} r{ratio:g}"
        shown = len(rows)
        for entry in entries:
            theirs = next((r for r in paper if _cell(r) == cell and r["method"] == entry.method), None)
            if not entry.metrics and not theirs:
                continue  # nothing to compare (an entry not evaluated yet)
            ours = entry.metrics or {}
            scores = [
                _score(ours.get(s)) + (f" ({_score(theirs['metrics'].get(s))})" if theirs else "")
                for s in iss.data.BENCHMARKS
            ]
            table = f"Table {theirs['table']}" if theirs else "not in the paper"
            iterations = (entry.budget or {}).get("iterations", "")
            rows.append([name, entry.method, iterations, *scores, table])
        if len(rows) == shown:
            continue
        bicubic = bicubic_results(scale)
        rows.append(
            [name, BICUBIC, "", *(_score(bicubic.get(s)) for s in iss.data.BENCHMARKS), "our baseline"]
        )
    return rows


def sorted_entries(zoo_path: str | None = None) -> list[Any]:
    """The zoo's entries by backbone, scale, ratio, then method (``METHOD_ORDER``)."""
    order = {m: i for i, m in enumerate(METHOD_ORDER)}
    return sorted(zoo(zoo_path), key=lambda e: (*_cell(e), order.get(e.method, len(order)), e.method))


def default_checkpoint(zoo_path: str | None = None) -> str | None:
    """The checkpoint the tab opens on: ISS-P of the app's default cell (``catalog.default_cell``), else that
    cell's first entry in ``sorted_entries`` order, else the first entry (None for an empty zoo)."""
    arch, scale, ratio = default_cell(zoo_path)
    entries = sorted_entries(zoo_path)
    cell = [e for e in entries if _cell(e) == (arch, scale, round(float(ratio or 0), 6))]
    chosen = next((e for e in cell if e.method == "iss-p"), cell[0] if cell else None)
    chosen = chosen or (entries[0] if entries else None)
    return chosen.name if chosen else None


def _cell(item: Any) -> tuple[str, int, float]:
    """(backbone, scale, ratio) of a zoo entry or a paper row."""
    get = item.get if isinstance(item, dict) else lambda k: getattr(item, k)
    return get("arch"), int(get("scale")), round(float(get("ratio")), 6)


def _score(metrics: dict | None) -> str:
    """``28.79 / 0.8190`` (PSNR / SSIM), or a dash."""
    if not metrics or "psnr" not in metrics:
        return "—"
    ssim = metrics.get("ssim")
    return f"{metrics['psnr']:.2f}" + (f" / {ssim:.4f}" if ssim is not None else "")
