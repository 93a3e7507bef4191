"""Shared fixtures: where the benchmark and training data live (never committed; see README); a tiny zoo."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest
import torch

import iss

ROOT = Path(__file__).resolve().parents[1]
DATA = Path(os.environ.get("ISS_DATA_DIR", ROOT.parent / "shared" / "data"))
TINY = dict(embed_dim=12, depths=(2,), num_heads=(2,))  # a few thousand weights: fast on CPU

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


def _write_zoo(folder: Path, entries: list[dict]) -> str:
    path = folder / "zoo.json"
    path.write_text(json.dumps({"version": 1, "entries": entries}))
    return str(path)


def _entry(name: str, file: Path, scale: int, ratio: float, method: str = "iss-p", **extra) -> dict:
    data = file.read_bytes() if file.is_file() else b""
    return {
        "name": name, "arch": "swinir-light", "scale": scale, "method": method, "ratio": ratio,
        "file": file.name, "sha256": hashlib.sha256(data).hexdigest(), "size_bytes": len(data), **extra,
    }  # fmt: skip


@pytest.fixture(scope="module")
def tiny_zoo(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A zoo with one tiny pruned x2 checkpoint (bundled, no Hub entry) and one whose file is missing."""
    folder = tmp_path_factory.mktemp("zoo")
    torch.manual_seed(0)
    model = iss.archs.build("swinir-light", 2, **TINY)
    pruner = iss.pruning.build("iht", model, 0.5, prune_iters=0)
    path = iss.checkpoint.save(
        model, folder / "tiny_x2_iht.safetensors", {"arch": "swinir-light", "scale": 2, "arch_kwargs": TINY,
                                                    "method": "iht", "ratio": 0.5}, pruner.masks,
    )  # fmt: skip
    entries = [
        _entry("tiny_x2_iht_r0.5", path, 2, 0.5, "iht", metrics={"Set5": {"psnr": 30.0, "ssim": 0.9}}),
        _entry("missing_x2_iss-p_r0.5", folder / "missing.safetensors", 2, 0.5),
    ]
    return _write_zoo(folder, entries)
