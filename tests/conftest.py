"""Shared fixtures: where the benchmark and training data live (never committed; see README)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
DATA = Path(os.environ.get("ISS_DATA_DIR", ROOT.parent / "shared" / "data"))

torch.set_num_threads(min(2, torch.get_num_threads()))


@pytest.fixture(scope="session")
def data_root() -> Path:
    """``../shared/data`` (or ``$ISS_DATA_DIR``): benchmarks/, train/, div2k/."""
    if not (DATA / "benchmarks").is_dir():
        pytest.skip(f"benchmark data not found at {DATA}")
    return DATA


@pytest.fixture(scope="session")
def benchmarks(data_root: Path) -> Path:
    return data_root / "benchmarks"
