"""The Sparsity tab as plain functions (no server): the paper's tables, the zoo beside them, masks."""

from __future__ import annotations

import re

import numpy as np
import plotly.graph_objects as go
import pytest

from iss.data import reference
from iss.ui import catalog, figures, sparsity


def test_paper_results_match_the_paper() -> None:
    rows = reference.paper_results()["rows"]
    assert len(rows) == 64
    cell = next(r for r in rows if (r["table"], r["scale"], r["method"]) == (2, 4, "iss-p"))
    assert cell["ratio"] == 0.95 and cell["metrics"]["Set5"] == {"psnr": 31.16, "ssim": 0.8775}
    cat = next(r for r in rows if r["arch"] == "cat-r" and r["method"] == "iss-p")
    assert cat["metrics"]["Urban100"]["psnr"] == 26.94


def test_cells_are_held_against_tables_1_to_4_not_the_ablation() -> None:
    """Table 5 prints x4 r0.9 ISS-P at Set5 35.86, not a x4 figure: a cell's paper number is Table 1's."""
    assert catalog.paper_psnr("swinir-light", 4, 0.9, "iss-p") == 31.60
    assert catalog.paper_psnr("swinir-light", 4, 0.9, "iht") is None  # only the ablation has IHT
    assert catalog.paper_psnr("swinir-light", 2, 0.9, "iss-p") == 37.66


def test_zoo_vs_paper_is_one_row_per_entry_grouped_by_cell_with_bicubic_last(tiny_zoo: str) -> None:
    """Grouped by cell, ours beside the paper, 2 and 4 decimals, bicubic closing a cell."""
    rows = sparsity.zoo_vs_paper(tiny_zoo)
    cell = "swinir-light x2 r0.5"
    assert [r[:2] for r in rows] == [[cell, "iht"], [cell, "bicubic"]]  # the iss-p entry has no scores
    iht, bicubic = rows
    assert iht[3] == "30.00 / 0.9000" and iht[-1] == "not in the paper"  # ratio 0.5 is not a paper cell
    assert bicubic[3] == "33.67 / 0.9303" and len(bicubic) == len(sparsity.ZOO_VS_PAPER_HEADERS)
    assert [e.method for e in sparsity.sorted_entries(tiny_zoo)] == ["iss-p", "iht"]


def test_zoo_vs_paper_puts_the_papers_scores_beside_ours() -> None:
    rows = sparsity.zoo_vs_paper()
    issp = next(r for r in rows if r[0] == "swinir-light x4 r0.95" and r[1] == "iss-p")
    assert re.fullmatch(r"\d\d\.\d\d / 0\.\d{4} \(31\.\d\d / 0\.\d{4}\)", issp[3]), issp[3]
    assert issp[-1].startswith("Table ")


def test_layer_types_and_blocks() -> None:
    assert sparsity.layer_type("layers.0.residual_group.blocks.3.attn.qkv.weight") == "attn.qkv"
    assert sparsity.layer_type("body.7.conv1.weight") == "body.conv1"
    assert sparsity.layer_type("conv_first.weight") == "conv_first"
    assert sparsity.block_of("layers.2.residual_group.blocks.0.mlp.fc1.weight") == "layers.2"
    assert sparsity.block_of("body.17.conv2.weight") == "body.17"
    assert sparsity.block_of("conv_last.weight") == "conv_last"


def test_mask_structure_finds_where_weights_sit() -> None:
    conv = np.zeros((8, 4, 3, 3), np.float32)
    conv[:, :, 1, 1] = 1.0  # only the centre tap
    linear = np.zeros((20, 10), np.float32)
    linear[:2] = 1.0  # two of twenty output channels hold everything
    structure = sparsity.mask_structure({"body.0.conv1.weight": conv, "body.1.fc.weight": linear})
    assert structure.taps[1, 1] == 1.0 and structure.taps.sum() == pytest.approx(1.0)
    assert structure.kept == 32 + 20 and structure.total == conv.size + linear.size
    fc = structure.types["body.fc"]
    assert fc["top_out"] == 1.0 and fc["random_top_out"] < 0.5  # concentrated vs a random mask
    assert fc["top_in"] == pytest.approx(0.1)  # every input channel is used equally
    assert structure.blocks["body.1"]["empty_out"] == 0.9 and structure.blocks["body.0"]["empty_out"] == 0.0
    assert structure.blocks["body.1"]["random_empty_out"] < 0.9


def test_sparsity_view_is_drawn_for_a_checkpoint(tiny_zoo: str) -> None:
    fig, hist, layers = sparsity.sparsity_view("tiny_x2_iht_r0.5", None, tiny_zoo)
    assert isinstance(fig, go.Figure) and isinstance(hist, go.Figure) and layers
    assert "every layer keeps the same fraction" in fig.layout.title.text
    assert {t.type for t in fig.data} == {"heatmap", "bar", "scatter"}
    taps = next(t for t in fig.data if t.type == "heatmap")
    assert np.asarray(taps.z).sum() == pytest.approx(100.0)  # percent of the 3x3 convs' kept weights


def test_a_malformed_checkpoint_is_unavailable_with_its_reason_and_no_paths(malformed_zoo: str) -> None:
    """One line naming the entry and the fault; the other entries still show."""
    with pytest.raises(ValueError, match=r"^int16_x2_iss-p_r0\.5 is unavailable: .*torch\.int16") as err:
        sparsity.sparsity_view("int16_x2_iss-p_r0.5", None, malformed_zoo)
    assert "/" not in str(err.value).replace("r0.5", "")
    assert sparsity.sparsity_view("tiny_x2_iht_r0.5", None, malformed_zoo)[2]
    methods = [row[1] for row in sparsity.zoo_vs_paper(malformed_zoo)]
    assert methods == ["iht", "bicubic"]  # the one evaluated entry, then the baseline


def test_the_tab_opens_on_the_default_cells_iss_p() -> None:
    """Sparsity opens where Compare does (``catalog.default_cell``), on that cell's ISS-P checkpoint."""
    arch, scale, ratio = catalog.default_cell()
    assert sparsity.default_checkpoint() == f"{arch}_x{scale}_iss-p_r{ratio}"


def test_every_plot_has_a_caption() -> None:
    assert set(figures.CAPTIONS) >= {"mask", "gradients", "training", "structure", "histogram"}
    assert all(text.count(". ") <= 3 for text in figures.CAPTIONS.values())
