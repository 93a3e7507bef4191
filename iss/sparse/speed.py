"""This machine's speed per backbone, and the rule that turns sparse kernels on where they are faster.

Speeds are GFLOP/s of the FLOPs ``iss.ui.cost.trace`` counts, per kind of work (``KINDS``) and backbone:
priors measured by ``benchmarks/app_speed.py`` (``speed.json``), replaced by what the process measures itself
as it runs (``observe``), plus the seconds to build a live run (``setup_seconds``, ``observe_setup``).
:func:`sparse_by_default` decides whether ``iss.load`` and the app run a backbone through ``iss.sparsify``.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

SPEED_FILE = Path(__file__).with_name("speed.json")
KINDS = ("train", "dense", "sparse")  # a training step of one run; dense inference; iss.sparsify inference
SETUP = "setup"  # seconds to build a live run, kept beside the speeds
_observed: dict[tuple[str, str, str], float] = {}  # (kind, arch, device) -> measured in this process
_lock = threading.Lock()


def priors() -> dict[str, Any]:
    """The measured speeds shipped with the package (``speed.json``): GFLOP/s per kind and backbone."""
    return json.loads(SPEED_FILE.read_text()) if SPEED_FILE.is_file() else {}


def gflops(kind: str, arch: str, device: str) -> float:
    """This machine's speed for ``kind`` work on ``arch``: measured in this process, else the prior."""
    if kind not in KINDS:
        raise ValueError(f"unknown kind {kind!r}; one of {KINDS}")
    return _lookup(kind, arch, device, 20.0 if _device(device) == "cpu" else 2000.0)


def sparse_by_default(arch: str, device: str) -> bool:
    """Whether ``arch``'s checkpoints run through ``iss.sparsify`` unless told otherwise (the one
    switch point): on the CPU where its measured sparse speed beats dense; not on a GPU (CPU kernels)."""
    return _device(device) == "cpu" and gflops("sparse", arch, device) > gflops("dense", arch, device)


def observe(kind: str, arch: str, device: str, flops: float, seconds: float) -> None:
    """Record a measured speed (later estimates use it): a running mean that follows the machine's load."""
    if flops > 0 and seconds > 0:
        _record(kind, arch, device, flops / seconds / 1e9)


def setup_seconds(arch: str, device: str) -> float:
    """Seconds to build both runs of a live run of ``arch`` (models, masks): measured, else the prior."""
    return _lookup(SETUP, arch, device, 60.0)


def observe_setup(arch: str, device: str, seconds: float) -> None:
    """Record how long building a live run of ``arch`` took."""
    _record(SETUP, arch, device, seconds)


def _device(device: str) -> str:
    """``cuda`` or ``cpu``: what measurements are kept per."""
    return "cuda" if str(device).startswith("cuda") else "cpu"


def _lookup(kind: str, arch: str, device: str, fallback: float) -> float:
    """Measured in this process, else ``speed.json``'s value for the backbone, its default, ``fallback``."""
    device = _device(device)
    with _lock:
        if (kind, arch, device) in _observed:
            return _observed[(kind, arch, device)]
    table = priors().get(device, {}).get(kind, {})
    return float(table.get(arch, table.get("default", fallback)))


def _record(kind: str, arch: str, device: str, value: float) -> None:
    """Fold a measurement into the running mean of (kind, arch, device)."""
    key = (kind, arch, _device(device))
    with _lock:
        previous = _observed.get(key)
        _observed[key] = value if previous is None else 0.5 * (previous + value)
