"""The Sparsity tab: where a zoo checkpoint keeps its weights, and the zoo's scores beside the paper's.

The paper's Tables 1-5 are bundled as ``paper_results.json``. No gradio.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
from torch import nn

import iss
from iss.ui import figures
from iss.ui.compare import load_model, short_reason, zoo

PAPER_RESULTS = Path(__file__).with_name("paper_results.json")
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


def sparsity_view(
    name: str, layer: str | None = None, zoo_path: str | None = None
) -> tuple[Any, Any, list[str]]:
    """Per-layer kept fraction and magnitude histograms (model, one layer) of zoo entry ``name``.

    A checkpoint that cannot be loaded raises ``ValueError("<name> is unavailable: <reason>")``, one line
    without server paths.
    """
    try:
        model, meta = load_model(name, "cpu", False, zoo_path)
    except (FileNotFoundError, ValueError, OSError) as e:
        raise ValueError(f"{name} is unavailable: {short_reason(e, 300)}") from None
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
