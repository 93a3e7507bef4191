"""benchmarks/mask_overlap.py: shares count exactly per layer kind, and SRP keeps L1's mask."""

from __future__ import annotations

import numpy as np
from common import ROOT, load_benchmark


def test_shared_counts_kept_weights_of_the_other_per_kind_and_overall() -> None:
    shared = load_benchmark("mask_overlap").shared
    ref = {"layers.0.conv.weight": np.array([1, 1, 0, 0], dtype=bool),
           "layers.1.conv.weight": np.array([1, 0, 0, 0], dtype=bool),
           "upsample.0.weight": np.array([0, 0, 1, 1], dtype=bool)}  # fmt: skip
    other = {"layers.0.conv.weight": np.array([1, 0, 1, 0], dtype=bool),
             "layers.1.conv.weight": np.array([1, 0, 0, 1], dtype=bool),
             "upsample.0.weight": np.array([0, 0, 1, 1], dtype=bool)}  # fmt: skip
    assert shared(ref, other) == {"layers.conv": (2, 4), "upsample": (2, 2), "all": (4, 6)}


def test_bundled_srp_keeps_exactly_l1s_weights_at_099(capsys) -> None:
    """SRP and L1 both pick the largest |w| of the same initialisation and never re-pick."""
    ckpt = ROOT / "checkpoints"
    load_benchmark("mask_overlap").main([str(ckpt / "swinir-light_x4_l1_r0.99.safetensors"),
                       str(ckpt / "swinir-light_x4_srp_r0.99.safetensors")])  # fmt: skip
    rows = {line.split(" | ")[0].strip("| "): line for line in capsys.readouterr().out.splitlines()}
    assert rows["all"].endswith("| 1.00 |")
    assert rows["mlp.fc1"].endswith("| 1.00 |")
