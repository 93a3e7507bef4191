"""benchmarks/checkpoint_size.py on SwinIR-light: format 3 is smaller than format 2, same weights."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from common import ROOT


def test_format_3_beats_bitmasks_at_high_ratios_and_loads_the_same(tmp_path: Path) -> None:
    out = tmp_path / "size"
    argv = ["--archs", "swinir-light", "--ratios", "0.9,0.99", "--dtypes", "fp16", "--out", str(out)]
    script = ROOT / "benchmarks" / "checkpoint_size.py"
    subprocess.run([sys.executable, str(script), *argv], check=True, capture_output=True, cwd=ROOT)
    rows = {(r["model"], r["ratio"]): r for r in json.loads(out.with_suffix(".json").read_text())}
    assert rows["swinir-light", 0.9]["format3"] <= rows["swinir-light", 0.9]["format2"]
    assert rows["swinir-light", 0.99]["format3"] < 0.7 * rows["swinir-light", 0.99]["format2"]
    trained = rows["swinir-light_x4_iss-p_r0.99", 0.99]  # a bundled checkpoint, re-saved
    assert trained["format3"] < 0.7 * trained["format2"]
    assert "| swinir-light | 0.99 | fp16 |" in out.with_suffix(".md").read_text()
