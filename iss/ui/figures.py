"""Plotly figures for the app (pure functions): ISS-P vs IHT dynamics (paper Figs. 3, 4), checkpoint sparsity.

Figures are resent whole on every streamed update, so long series are bin-averaged down to ``max_points``.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from iss.train.recording import RunTrace

RUN_COLORS = {"iss-p": "#e66100", "iht": "#1a5fb4"}  # orange and blue: apart for every colour vision
RUN_LABELS = {"iss-p": "ISS-P", "iht": "IHT"}
DASHES = ("solid", "dot", "dash", "longdash", "dashdot", "longdashdot")
MAX_POINTS = 600
# One line under each plot: what it shows and what to look for (the paper's claim, never this run's result).
CAPTIONS = {
    "mask": (
        "*Look for* ISS-P (orange) above IHT (blue): in the paper's Fig. 3 ISS-P's mask keeps changing while "
        "IHT's stays mostly still. Upper panels: weights entering or leaving the mask per iteration in two "
        "layers; lowest: the whole mask's distance from its first selection; dotted: K_p, where masks freeze."
    ),
    "gradients": (
        "*Look for* ISS-P's gradient norm converging steadily in the pruning stage and its variance staying "
        "below IHT's, as the paper's Fig. 4 reports (log scale; one dash style per layer)."
    ),
    "training": (
        "*Look for* whether the extra mask movement costs or pays: training loss, and the PSNR of a 96x96 "
        "validation crop; after K_p (dotted) both runs fine-tune with frozen masks."
    ),
    "structure": (
        "Left: the share of kept weights at each 3x3 kernel tap; middle: how concentrated they are on a few "
        "channels per layer type (1 = as a random mask); right: output channels with no kept weight per "
        "block, beside a random mask with the same count (black marks)."
    ),
    "histogram": (
        "How large the kept (non-zero) weights are, log10 |w|, as a fraction of each model's (or layer's) "
        "kept weights: curves apart mean the methods keep weights of different sizes."
    ),
}


def downsample(x: Sequence[float], y: Sequence[float], max_points: int = MAX_POINTS) -> tuple[list, list]:
    """Bin-average ``(x, y)`` to at most ``max_points`` points (NaNs ignored), so spikes keep their mass."""
    xs, ys = np.asarray(x, np.float64), np.asarray(y, np.float64)
    if len(xs) <= max_points:
        return xs.tolist(), ys.tolist()
    edges = np.linspace(0, len(xs), max_points + 1).astype(int)
    bx = [float(xs[a:b].mean()) for a, b in itertools.pairwise(edges)]
    by = [_nanmean(ys[a:b]) for a, b in itertools.pairwise(edges)]
    return bx, by


def _nanmean(values: np.ndarray) -> float:
    finite = values[np.isfinite(values)]
    return float(finite.mean()) if finite.size else math.nan


def _layout(fig: go.Figure, title: str, height: int, legend_y: float = -0.16) -> go.Figure:
    """Shared look; a constant ``uirevision`` keeps the user's zoom across streamed updates."""
    fig.update_layout(
        title=dict(text=title, x=0.01, font=dict(size=14)),
        height=height,
        margin=dict(l=60, r=20, t=60, b=40),
        legend=dict(orientation="h", y=legend_y, yanchor="top", font=dict(size=10)),
        uirevision="iss",
        template="plotly_white",
    )
    return fig


def _log_axis(values: Sequence[float]) -> dict:
    """Tick settings for a log axis: 1-2-5 ticks spanning ``values`` with full labels ("0.02", not "2")."""
    finite = np.asarray([v for v in values if v is not None and math.isfinite(v) and v > 0], np.float64)
    if finite.size == 0:
        return dict(type="log")
    low, high = math.floor(math.log10(finite.min())), math.ceil(math.log10(finite.max()))
    step = (1, 2, 5) if high - low <= 3 else (1,)
    ticks = [m * 10.0**e for e in range(low, high + 1) for m in step]
    ticks = [t for t in ticks if finite.min() / 2 <= t <= finite.max() * 2]
    return dict(type="log", tickvals=ticks, ticktext=[f"{t:.3g}" for t in ticks])


def _short(layer: str) -> str:
    """A layer name short enough for a legend: drop the trailing ``.weight``."""
    return layer.removesuffix(".weight")


def _finetune_marks(fig: go.Figure, traces: dict[str, RunTrace], rows: int, cols: int = 1) -> None:
    """A dotted vertical line where a run left the pruning stage (its mask is frozen afterwards)."""
    starts = {t.finetune_from for t in traces.values() if t.finetune_from is not None}
    for start in starts:
        for r in range(1, rows + 1):
            for c in range(1, cols + 1):
                fig.add_vline(x=start, line=dict(color="gray", dash="dot", width=1), row=r, col=c)


def moving_average(values: Sequence[float], window: int) -> np.ndarray:
    """Trailing mean over ``window`` values (NaNs ignored; fewer at the start): flips come in spikes."""
    y = np.asarray(values, np.float64)
    finite = np.isfinite(y)
    totals = np.cumsum([np.where(finite, y, 0.0), finite], axis=1)  # running sums of values and counts
    totals[:, window:] -= totals[:, :-window].copy()
    with np.errstate(invalid="ignore", divide="ignore"):
        return totals[0] / totals[1]


def mask_dynamics_figure(
    traces: dict[str, RunTrace], layers: Sequence[str], max_points: int = MAX_POINTS
) -> go.Figure:
    """Paper Fig. 3: mask flips per iteration (per mille, moving average) for each of ``layers`` in its own
    panel, ISS-P against IHT, then the whole mask's Hamming distance to its first selection."""
    shown = [layer for layer in layers if any(layer in t.flips for t in traces.values())]
    length = max((len(t.iterations) for t in traces.values()), default=0)
    window = max(1, min(100, length // 20))
    titles = [f"{_short(layer)}: mask flips per iteration (‰, mean of {window})" for layer in shown]
    titles.append("whole mask: Hamming distance to its first selection (‰)")
    rows = len(titles)
    fig = make_subplots(rows=rows, cols=1, shared_xaxes=True, vertical_spacing=0.35 / rows,
                        subplot_titles=titles)  # fmt: skip
    tops: dict[int, float] = {}
    for run, trace in traces.items():
        color, label = RUN_COLORS.get(run, "black"), RUN_LABELS.get(run, run)
        series = [trace.flips[layer] for layer in shown if layer in trace.flips] + [trace.distance_first]
        for row, values in enumerate(series, 1):
            smooth = values if row == rows else moving_average(values, window)
            x, y = downsample(trace.iterations, smooth, max_points)
            fig.add_trace(
                go.Scatter(x=x, y=y, name=label, legendgroup=run, showlegend=row == 1,
                           line=dict(color=color, width=2)),
                row, 1,
            )  # fmt: skip
            later = np.asarray(y[len(y) // 20 :], np.float64)  # past the first selection's burst
            if row < rows and np.isfinite(later).any():
                tops[row] = max(tops.get(row, 0.0), float(np.nanmax(later)))
    for row, top in tops.items():  # the burst of the first iterations would flatten the rest
        fig.update_yaxes(range=[0, 1.15 * top if top > 0 else 1], row=row, col=1)
    fig.update_xaxes(title_text="iteration", row=rows, col=1)
    _finetune_marks(fig, traces, rows=rows)
    return _layout(fig, "Mask dynamics: ISS-P vs IHT (paper Fig. 3)", 220 + 200 * rows, legend_y=1.06)


def gradient_figure(
    traces: dict[str, RunTrace], layers: Sequence[str], max_points: int = MAX_POINTS
) -> go.Figure:
    """Paper Fig. 4: gradient L2 norm and variance per layer over iterations (log scale)."""
    fig = make_subplots(
        rows=2,
        cols=1,
        shared_xaxes=True,
        vertical_spacing=0.1,
        subplot_titles=("gradient L2 norm", "gradient variance"),
    )
    for run, trace in traces.items():
        color, label = RUN_COLORS.get(run, "black"), RUN_LABELS.get(run, run)
        for i, layer in enumerate(layer for layer in layers if layer in trace.grad_norm):
            dash = DASHES[i % len(DASHES)]
            for row, series in ((1, trace.grad_norm), (2, trace.grad_var)):
                x, y = downsample(trace.iterations, series[layer], max_points)
                line = dict(color=color, dash=dash, width=1.3)
                fig.add_trace(
                    go.Scatter(x=x, y=y, name=f"{label} {_short(layer)}", line=line, showlegend=row == 1),
                    row,
                    1,
                )
    fig.update_yaxes(type="log", dtick=1, exponentformat="e", row=1, col=1)
    fig.update_yaxes(type="log", dtick=1, exponentformat="e", row=2, col=1)
    fig.update_xaxes(title_text="iteration", row=2, col=1)
    _finetune_marks(fig, traces, rows=2)
    return _layout(fig, "Gradients per layer (paper Fig. 4)", 520)


def training_figure(traces: dict[str, RunTrace], max_points: int = MAX_POINTS) -> go.Figure:
    """Training L1 loss (bin-averaged) and the quick validation PSNR of both runs."""
    fig = make_subplots(rows=1, cols=2, subplot_titles=("training loss (L1)", "validation PSNR, Y (dB)"))
    for run, trace in traces.items():
        color, label = RUN_COLORS.get(run, "black"), RUN_LABELS.get(run, run)
        x, y = downsample(trace.iterations, trace.loss, max_points)
        fig.add_trace(go.Scatter(x=x, y=y, name=f"{label} loss", line=dict(color=color, width=1.5)), 1, 1)
        fig.add_trace(
            go.Scatter(
                x=trace.val_iterations,
                y=trace.val_psnr,
                name=f"{label} PSNR",
                mode="lines+markers",
                line=dict(color=color),
            ),
            1,
            2,
        )
    losses = [v for trace in traces.values() for v in downsample(trace.iterations, trace.loss, max_points)[1]]
    fig.update_yaxes(**_log_axis(losses), row=1, col=1)
    fig.update_xaxes(title_text="iteration", row=1, col=1)
    fig.update_xaxes(title_text="iteration", row=1, col=2)
    _finetune_marks(fig, traces, rows=1, cols=2)
    return _layout(fig, "Training", 380, legend_y=-0.25)


def mask_structure_figure(structure: Any, title: str) -> go.Figure:
    """Where a checkpoint keeps its weights (``sparsity.MaskStructure``): per kernel tap of its 3x3 convs, per
    layer type (how concentrated on a few channels, relative to a random mask with the same count per layer)
    and per block (output channels left empty, beside that random mask's)."""
    fig = make_subplots(
        rows=1,
        cols=3,
        column_widths=[0.22, 0.43, 0.35],
        horizontal_spacing=0.07,
        subplot_titles=(
            "kept weights per 3x3 kernel tap (%)",
            "share of kept weights in the densest 10% of channels,<br>relative to a random mask (1 = random)",
            "output channels with no kept weight (%)",
        ),
    )
    if structure.taps is not None:
        taps = 100 * structure.taps
        fig.add_trace(
            go.Heatmap(
                z=taps[::-1].tolist(),
                text=[[f"{v:.1f}" for v in row] for row in taps[::-1]],
                texttemplate="%{text}",
                colorscale="Greens",
                showscale=False,
                hovertemplate="%{z:.2f}% of kept weights<extra></extra>",
            ),
            1,
            1,
        )
        fig.update_xaxes(showticklabels=False, row=1, col=1)
        fig.update_yaxes(showticklabels=False, scaleanchor="x", row=1, col=1)
    types = list(structure.types)
    series = (("top_out", "output channels", "#2ca02c"), ("top_in", "input channels", "#9467bd"))
    for key, name, color in series:
        ratio = [structure.types[t][key] / max(structure.types[t][f"random_{key}"], 1e-12) for t in types]
        fig.add_trace(go.Bar(x=types, y=ratio, name=name, marker_color=color), 1, 2)
    fig.add_hline(y=1, line=dict(color="black", dash="dash", width=1), row=1, col=2)
    blocks = list(structure.blocks)
    fig.add_trace(
        go.Bar(
            x=blocks,
            y=[100 * structure.blocks[b]["empty_out"] for b in blocks],
            name="empty output channels",
            marker_color="#d62728",
        ),
        1,
        3,
    )
    fig.add_trace(
        go.Scatter(
            x=blocks,
            y=[100 * structure.blocks[b]["random_empty_out"] for b in blocks],
            mode="markers",
            marker=dict(symbol="line-ew", size=14, line=dict(width=2, color="black")),
            name="random mask, same count per layer",
        ),
        1,
        3,
    )
    fig.update_layout(barmode="group")
    fig.update_xaxes(tickangle=-45, tickfont=dict(size=9), row=1, col=2)
    fig.update_xaxes(tickangle=-45, tickfont=dict(size=9), row=1, col=3)
    return _layout(fig, title, 420, legend_y=-0.45)


def magnitude_histogram_figure(groups: dict[str, np.ndarray], title: str, bins: int = 80) -> go.Figure:
    """Histograms of log10 |w| of the kept (non-zero) weights, one trace per group (model, layer)."""
    fig = go.Figure()
    for name, values in groups.items():
        nonzero = np.abs(values[values != 0]).astype(np.float64)
        counts, edges = (
            np.histogram(np.log10(nonzero), bins=bins) if nonzero.size else (np.zeros(0), np.zeros(1))
        )
        centers = (edges[:-1] + edges[1:]) / 2
        fig.add_trace(
            go.Bar(x=centers.tolist(), y=(counts / max(1, counts.sum())).tolist(), name=name, opacity=0.6)
        )
    fig.update_layout(barmode="overlay")
    fig.update_xaxes(title_text="log10 |weight| (kept weights)")
    fig.update_yaxes(title_text="fraction")
    return _layout(fig, title, 380)
