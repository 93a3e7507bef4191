"""Timed dense-or-sparse choices remembered per machine, so that the same command gives the same bytes.

A sparsified layer or block runs whichever of its two kernels measured faster on its first input
(:mod:`.layers`). The two round differently (different summation orders), and on a loaded CPU the timing
of a close pair flips from one process to the next, so a choice timed afresh in every process changed the
output's last bits between runs of one command. The compiled kernels themselves are deterministic for a
given thread count: each output element is summed by one thread in a fixed order, and threads only decide
which windows or tiles they take, never how a sum is split.

So the first measurement of each signature (shape, density, dtype, thread count) is stored, as the dense
over sparse time ratio, in ``$ISS_CACHE_DIR/sparse/decisions-<machine>.json``, keyed by the CPU, the torch
build and the kernels' sources, and every later process decides from it. Delete the file to measure again.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import tempfile
from pathlib import Path

import torch

from iss.data import cache_dir

from . import kernels

__all__ = ["recall", "remember", "store"]


def store() -> Path:
    """The file holding this machine's measured ratios (CPU flags, torch build and kernel sources)."""
    code = b"".join(path.read_bytes() for path in (*kernels.SOURCES, *kernels.HEADERS))
    machine = f"{kernels._cpu_id()} torch {torch.__version__}".encode()
    return cache_dir() / "sparse" / f"decisions-{hashlib.sha256(machine + code).hexdigest()[:16]}.json"


def _read(path: Path) -> dict[str, float]:
    """The stored ratios; an unreadable or foreign file counts as empty (it is measured again)."""
    try:
        found = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return found if isinstance(found, dict) else {}


def recall(key: tuple) -> float | None:
    """Dense time over sparse time stored for signature ``key``, or None if never measured here."""
    ratio = _read(store()).get(repr(key))
    return float(ratio) if isinstance(ratio, int | float) else None


def remember(key: tuple, ratio: float) -> float:
    """Store the ratio measured for ``key`` unless another process stored one first, and return the one
    stored (merged with the other entries, written atomically). Without a writable cache: ``ratio``."""
    path = store()
    found = _read(path)
    if repr(key) in found:  # the first measurement stays: it made earlier outputs
        stored = recall(key)
        return ratio if stored is None else stored
    found[repr(key)] = ratio
    with contextlib.suppress(OSError):
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile("w", dir=path.parent, suffix=".json", delete=False) as tmp:
            json.dump(found, tmp, indent=0, sort_keys=True)
        os.replace(tmp.name, path)
    return ratio
