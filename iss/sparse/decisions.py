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

A clear call is not timed at all (:func:`clear`): with the compiled C kernels on float32, a layer (or a fused
block whose Linears all are) at least ``CLEAR_ZEROS`` zero with ``CLEAR_WORK`` dense multiply-adds or more
per call runs sparse. Timed, every such layer chose sparse: all 38 decisions of SwinIR-light x4 ISS-P r0.95
on a 384x303 photo (2-core AMD EPYC), and every layer in docs/sparse-inference.md's runs; timing them cost a
new process most of its first upscale on a machine that had not stored them yet.
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

__all__ = ["CLEAR_WORK", "CLEAR_ZEROS", "clear", "recall", "remember", "store"]

CLEAR_ZEROS = 0.94  # the zoo's ratios 0.95 and 0.99 are clear; 0.9 is timed (once per machine)
CLEAR_WORK = 1e7  # dense multiply-adds per call: below this a timing costs little and dense may win


def clear(zeros: float, work: float, x: torch.Tensor, min_speedup: float) -> bool:
    """Whether a layer with this zero fraction and ``work`` dense multiply-adds on ``x`` runs sparse
    without timing (``min_speedup`` above 1 asks for a measured margin, so it is always timed)."""
    native = x.dtype == torch.float32 and kernels.load() is not None
    return native and min_speedup <= 1.0 and zeros >= CLEAR_ZEROS and work >= CLEAR_WORK


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
