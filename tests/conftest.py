"""Shared fixtures: where the benchmark and training data live (never committed; see README), an isolated
Hub for the tests of ``iss.hub`` and ``iss.zoo`` (no request may leave 127.0.0.1), and a tiny zoo.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
from pathlib import Path

import numpy as np
import pytest
import torch
from common import ROOT, TINY, rewrite_checkpoint
from fakehub import FakeHub, closed_port_url
from huggingface_hub import constants
from PIL import Image

import iss
import iss.sparse.kernels
import iss.sparse.speed

DATA = Path(os.environ.get("ISS_DATA_DIR", ROOT.parent / "shared" / "data"))

torch.set_num_threads(min(2, torch.get_num_threads()))


@pytest.fixture(autouse=True)
def idle_machine(monkeypatch: pytest.MonkeyPatch) -> None:
    """Time estimates as on an idle machine (``iss.sparse.speed.load_factor`` 1), whatever the load now: no
    test depends on it (tests/sparse/test_speed.py sets the loads it tests)."""
    monkeypatch.setattr(iss.sparse.speed, "_system", lambda: (0.0, 2, 2))


@pytest.fixture(params=["c", "mkl"])
def kernel_path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Run the test with iss.sparse's compiled C kernels, then with the pure-PyTorch (MKL) fallback."""
    if request.param == "mkl":
        monkeypatch.setattr(iss.sparse.kernels, "load", lambda: None)
    elif iss.sparse.kernels.load() is None:
        pytest.skip("no C compiler: the compiled kernels are unavailable (CI installs gcc)")
    return request.param


@pytest.fixture(scope="session")
def data_root() -> Path:
    """``../shared/data`` (or ``$ISS_DATA_DIR``): benchmarks/, train/, div2k/."""
    if not (DATA / "benchmarks").is_dir():
        pytest.skip(f"benchmark data not found at {DATA}")
    return DATA


@pytest.fixture(scope="session")
def benchmarks(data_root: Path) -> Path:
    return data_root / "benchmarks"


@pytest.fixture
def data_dir(tmp_path: Path, benchmarks: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A zoo plan's ``--data-dir``: train/a with three random images, benchmarks/Set5 the real one."""
    monkeypatch.setenv("ISS_CACHE_DIR", str(tmp_path / "cache"))
    root = tmp_path / "data"
    (root / "train" / "a").mkdir(parents=True)
    rng = np.random.default_rng(0)
    for i in range(3):
        Image.fromarray(rng.integers(0, 256, (48, 56, 3), dtype=np.uint8)).save(
            root / "train" / "a" / f"{i}.png"
        )
    (root / "benchmarks").mkdir()
    (root / "benchmarks" / "Set5").symlink_to(benchmarks / "Set5")
    return root


@pytest.fixture
def isolated_hub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Hub cache, HF_HOME and tokens in tmp_path; default endpoint dead; only loopback hosts resolvable.

    huggingface_hub reads its environment at import, so the module constants it reads at call time are
    patched too (ENDPOINT together with the URL template derived from it).
    """
    dead = closed_port_url()
    cache = tmp_path / "hf-cache"
    for key in (
        "HF_HUB_OFFLINE",
        "TRANSFORMERS_OFFLINE",
        "HF_TOKEN",
        "HUGGING_FACE_HUB_TOKEN",
        "HF_HUB_ETAG_TIMEOUT",
    ):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.setenv("HF_ENDPOINT", dead)
    monkeypatch.setenv("ISS_CACHE_DIR", str(tmp_path / "iss-cache"))
    monkeypatch.setattr(constants, "ENDPOINT", dead)
    monkeypatch.setattr(
        constants, "HUGGINGFACE_CO_URL_TEMPLATE", dead + "/{repo_id}/resolve/{revision}/{filename}"
    )
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(constants, "HF_TOKEN_PATH", str(tmp_path / "hf-home" / "token"))
    monkeypatch.setattr(constants, "HF_STORED_TOKENS_PATH", str(tmp_path / "hf-home" / "stored_tokens"))
    real_getaddrinfo = socket.getaddrinfo

    def loopback_only(host, *args, **kwargs):  # type: ignore[no-untyped-def]
        if host not in ("127.0.0.1", "localhost", "::1"):
            raise OSError(f"test tried to reach {host!r}: the network is off limits")
        return real_getaddrinfo(host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", loopback_only)
    return cache


@pytest.fixture
def fakehub():
    with FakeHub() as server:
        yield server


@pytest.fixture
def offline(monkeypatch: pytest.MonkeyPatch) -> None:
    """HF_HUB_OFFLINE=1, both in the environment and in the constant huggingface_hub read at import."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)


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
    meta = {"arch": "swinir-light", "scale": 2, "arch_kwargs": TINY, "method": "iht", "ratio": 0.5,
            "budget": {"iterations": 1200}}  # fmt: skip
    path = iss.checkpoint.save(model, folder / "tiny_x2_iht.safetensors", meta, pruner.masks)
    entries = [
        _entry("tiny_x2_iht_r0.5", path, 2, 0.5, "iht", metrics={"Set5": {"psnr": 30.0, "ssim": 0.9}}),
        _entry("missing_x2_iss-p_r0.5", folder / "missing.safetensors", 2, 0.5),
    ]
    return _write_zoo(folder, entries)


@pytest.fixture(scope="module")
def malformed_zoo(tiny_zoo: str, tmp_path_factory: pytest.TempPathFactory) -> str:
    """``tiny_zoo`` plus two re-signed malformed checkpoints whose manifest sha256 matches them (a manifest
    the forger controls): an int16 mask, and an arch_kwargs option SwinIR does not have."""
    folder = Path(tiny_zoo).parent
    good = folder / "tiny_x2_iht.safetensors"
    tensors, _ = iss.checkpoint.read(good)
    mask = next(k for k in tensors if k.endswith(iss.checkpoint.MASK_SUFFIX))
    int16, unknown = folder / "int16_mask.safetensors", folder / "unknown_kwarg.safetensors"
    int16.write_bytes(good.read_bytes())
    rewrite_checkpoint(int16, tensors={mask: tensors[mask].to(torch.int16)})
    unknown.write_bytes(good.read_bytes())
    rewrite_checkpoint(unknown, meta={"arch_kwargs": json.dumps({**TINY, "colour": "red"})})
    good_entry = json.loads(Path(tiny_zoo).read_text())["entries"][0]
    entries = [
        good_entry,
        _entry("int16_x2_iss-p_r0.5", int16, 2, 0.5, "iss-p"),  # one method each: the app asks for methods
        _entry("unknown_x2_l1_r0.5", unknown, 2, 0.5, "l1"),
    ]
    out = tmp_path_factory.mktemp("malformed")
    for entry in entries:
        (out / entry["file"]).write_bytes((folder / entry["file"]).read_bytes())
    return _write_zoo(out, entries)
