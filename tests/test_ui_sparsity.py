"""The Sparsity tab as plain functions (no server): the paper's tables, the zoo beside them, sparsity."""

from __future__ import annotations

import plotly.graph_objects as go
import pytest

from iss.ui import sparsity


def test_paper_results_match_the_paper() -> None:
    rows = sparsity.paper_results()["rows"]
    assert len(rows) == 64
    cell = next(r for r in rows if (r["table"], r["scale"], r["method"]) == (2, 4, "iss-p"))
    assert cell["ratio"] == 0.95 and cell["metrics"]["Set5"] == {"psnr": 31.16, "ssim": 0.8775}
    cat = next(r for r in rows if r["arch"] == "cat-r" and r["method"] == "iss-p")
    assert cat["metrics"]["Urban100"]["psnr"] == 26.94


def test_zoo_vs_paper_and_sparsity_view(tiny_zoo: str) -> None:
    rows = sparsity.zoo_vs_paper(tiny_zoo)
    assert rows[0][:5] == ["tiny_x2_iht_r0.5", "", "Set5", 30.0, 0.9]
    assert rows[0][-1] == "not in the paper"  # ratio 0.5 is not a paper cell
    kept, hist, layers = sparsity.sparsity_view("tiny_x2_iht_r0.5", None, tiny_zoo)
    assert isinstance(kept, go.Figure) and isinstance(hist, go.Figure) and layers
    assert all(0.4 < v <= 0.6 for v in kept.data[0].y[1:-1])  # pruned layers keep about half


def test_a_malformed_checkpoint_is_unavailable_with_its_reason_and_no_paths(malformed_zoo: str) -> None:
    """Issue 17 items 2 and 6: one line naming the entry and the fault; the other entries still show."""
    with pytest.raises(ValueError, match=r"^int16_x2_iht_r0\.5 is unavailable: .*torch\.int16") as err:
        sparsity.sparsity_view("int16_x2_iht_r0.5", None, malformed_zoo)
    assert "/" not in str(err.value).replace("r0.5", "")
    assert sparsity.sparsity_view("tiny_x2_iht_r0.5", None, malformed_zoo)[2]
    assert [row[0] for row in sparsity.zoo_vs_paper(malformed_zoo)] == ["tiny_x2_iht_r0.5"]
