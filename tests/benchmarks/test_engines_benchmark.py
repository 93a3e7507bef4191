"""benchmarks/engines.py --quick: every installed engine agrees with PyTorch, missing ones are named."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest
from common import ROOT


@pytest.mark.slow
def test_quick_engine_comparison_runs_and_checks_outputs(tmp_path: Path) -> None:
    out = tmp_path / "engines"
    cmd = [sys.executable, str(ROOT / "benchmarks" / "engines.py"), "--quick", "--out", str(out)]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-2000:]
    cases = json.loads(out.with_suffix(".json").read_text())["cases"]
    assert {c["arch"] for c in cases} == {"edsr-l", "swinir-light"}
    for case in cases:
        assert {"pytorch", "iss", "iss-exact"} <= set(case["times_ms"])
        for engine, err in case["max_abs_err"].items():  # every engine's output checked
            # iss's default (half tiles) and OpenVINO (bf16) compute in lower precision on AVX-512 CPUs
            assert err < (2e-3 if engine in ("iss", "openvino") else 1e-4), engine
        assert case["iss_path"] in ("fused C kernels", "C kernels", "PyTorch kernels (no C compiler)")
        for engine in ("onnxruntime", "openvino"):
            if importlib.util.find_spec(engine) is None:
                assert case["skipped"][engine].startswith("not installed")
    table = out.with_suffix(".md").read_text()
    assert "| edsr-l | 1 | 0.95 |" in table and "iss vs fastest dense" in table
