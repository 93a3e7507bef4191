"""benchmarks/cold_start.py runs end to end on a small photo and prints its two tables."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from common import ROOT


@pytest.mark.slow  # four new processes that each load a model
def test_cold_start_prints_sparse_dense_and_estimates(tmp_path: Path, data_root: Path) -> None:
    out = tmp_path / "cold.json"
    argv = ["--data-dir", str(data_root), "--size", "48x40", "--reps", "1", "--methods", "bicubic,iss-p",
            "--out", str(out)]  # fmt: skip
    script = ROOT / "benchmarks" / "cold_start.py"
    done = subprocess.run([sys.executable, str(script), *argv], check=True, capture_output=True, text=True,
                          cwd=ROOT, timeout=900)  # fmt: skip
    assert "| sparse |" in done.stdout and "| dense |" in done.stdout
    assert "Urban100 img_012, x4, HR mode" in done.stdout and "48x40 LR photo, x4, LR mode" in done.stdout
    rows = json.loads(out.read_text())
    assert len(rows["upscale"]["sparse"]) == len(rows["upscale"]["dense"]) == 1
    assert all(case["estimate"] > 0 and case["actual"] > 0 for case in rows["compare"].values())
