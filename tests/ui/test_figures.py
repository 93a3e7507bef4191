"""Plotly figures of the app: axes a reader can read, titles that say what is plotted."""

from __future__ import annotations

import numpy as np
import pytest

from iss.train.recording import RunTrace
from iss.ui import figures


def _traces(losses: list[float]) -> dict[str, RunTrace]:
    trace = RunTrace(layers=["conv.weight"])
    for i, loss in enumerate(losses, 1):
        trace.commit(i, loss)
    return {"iss-p": trace}


def test_downsample_keeps_mass() -> None:
    x, y = figures.downsample(list(range(1000)), [1.0 if i % 10 == 0 else 0.0 for i in range(1000)], 100)
    assert len(x) == 100 and np.mean(y) == pytest.approx(0.1)


def test_loss_axis_labels_are_whole_numbers() -> None:
    """The log axis of the training loss labels 0.2 and 0.02 as such (plotly's default wrote both as "2")."""
    fig = figures.training_figure(_traces([0.3, 0.2, 0.05, 0.02, 0.015]))
    axis = fig.layout.yaxis
    assert axis.type == "log"
    labels = dict(zip(axis.tickvals, axis.ticktext, strict=True))
    assert labels[0.2] == "0.2" and labels[0.02] == "0.02" and labels[0.05] == "0.05"
    assert fig.layout.title.text == "Training"


def test_mask_dynamics_is_one_panel_per_layer_and_two_legend_entries() -> None:
    """A panel per layer plus the whole mask's distance, ISS-P and IHT once each."""
    traces = {run: RunTrace(layers=["a.weight", "b.weight"]) for run in ("iss-p", "iht")}
    fig = figures.mask_dynamics_figure(traces, ["a.weight", "b.weight"])
    titles = [a.text for a in fig.layout.annotations]
    assert titles[0].startswith("a: mask flips per iteration") and titles[1].startswith("b: mask flips")
    assert titles[2].startswith("whole mask: Hamming distance")
    assert [t.name for t in fig.data if t.showlegend] == ["ISS-P", "IHT"] and len(fig.data) == 6
    assert fig.data[0].line.color != fig.data[3].line.color


def test_moving_average_smooths_spikes_and_ignores_gaps() -> None:
    y = figures.moving_average([0, 0, 4, 0, float("nan"), 0], 4)
    assert y.tolist() == pytest.approx([0, 0, 4 / 3, 1, 4 / 3, 4 / 3])  # a trailing window of 4
