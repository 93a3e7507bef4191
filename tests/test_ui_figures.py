"""Plotly figures of the app: axes a reader can read, titles that say what is plotted."""

from __future__ import annotations

import numpy as np
import pytest

from iss.ui import figures
from iss.ui.recording import RunTrace


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


def test_mask_dynamics_plots_every_layer_and_the_whole_model() -> None:
    fig = figures.mask_dynamics_figure(_traces([0.1, 0.1]), ["conv.weight"])
    names = [t.name for t in fig.data]
    assert "ISS-P all layers" in names and "ISS-P conv" in names
    assert fig.layout.title.text.startswith("Mask dynamics")
