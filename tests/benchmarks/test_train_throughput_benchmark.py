"""benchmarks/train_throughput.py at a tiny size: every mode runs and reports sane figures (CI has no GPU)."""

from __future__ import annotations

import json
from pathlib import Path

from common import load_benchmark


def test_tiny_run_reports_both_modes_and_shares(tmp_path: Path, data_root: Path, monkeypatch) -> None:
    monkeypatch.setenv("ISS_CACHE_DIR", str(tmp_path / "cache"))
    out = tmp_path / "tp.json"
    argv = ["--tiny", "--archs", "swinir-light,edsr-l", "--threads", "1", "--steps", "2",
            "--data", str(data_root / "train" / "T91"), "--json", str(out)]  # fmt: skip
    assert load_benchmark("train_throughput").main(argv) == 0
    rows = json.loads(out.read_text())["rows"]
    assert [(r["arch"], r["mode"]) for r in rows] == [
        ("swinir-light", "eager"), ("swinir-light", "fast"), ("edsr-l", "eager"), ("edsr-l", "fast"),
    ]  # fmt: skip
    for row in rows:
        assert row["steps_per_second"] > 0 and row["images_per_second"] == 2 * row["steps_per_second"]
        assert row["pruner_share"] < 1 and row["data_share"] < 1 and row["device"].startswith("cpu")
