"""Which kernel a sparse layer runs, decided without timing wherever that is safe.

Timing dense against sparse on the first call costs a few forwards per distinct layer and input size (on a
loaded 2-core CPU, 89 s of a 92 s first SwinIR-light x4 upscale of a 384x303 photo). So a layer is timed
only when neither of these decides it:

* **Clear calls** (:func:`clear`): with the compiled C kernels on float32, a layer (or a fused block whose
  layers are all) at least ``CLEAR_ZEROS`` zero with ``CLEAR_WORK`` dense multiply-adds or more per call runs
  sparse. Timed, every such layer chose sparse: all 38 decisions of SwinIR-light x4 ISS-P r0.95 on a
  384x303 photo (2-core AMD EPYC), and every layer in docs/sparse-inference.md's runs.
* **Timings from earlier processes** (:func:`recall`, :func:`remember`): each timing is kept on disk, under
  ``$ISS_CACHE_DIR/sparse`` (default ``~/.cache/iss-sr``), in one JSON file per machine: CPU model, its
  feature flags, the compiled kernel's build and torch's version. The layer's key holds its shapes, zero
  fraction, input size and thread count.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import platform
import tempfile
from pathlib import Path

import torch

from iss.data import cache_dir

from . import kernels

CLEAR_ZEROS = 0.94  # the zoo's ratios 0.95 and 0.99 are clear; 0.9 is timed once per machine
CLEAR_WORK = 1e7  # dense multiply-adds per call: below this a timing costs little and dense may win


def clear(zeros: float, work: float, x: torch.Tensor, min_speedup: float) -> bool:
    """Whether a layer with this zero fraction and ``work`` dense multiply-adds on ``x`` runs sparse
    without timing (``min_speedup`` above 1 asks for a measured margin, so it is always timed)."""
    native = x.dtype == torch.float32 and kernels.load() is not None
    return native and min_speedup <= 1.0 and zeros >= CLEAR_ZEROS and work >= CLEAR_WORK


def timings_file() -> Path:
    """This machine's file of timings: CPU model and flags, kernel build, torch version in its name."""
    return cache_dir() / "sparse" / f"timings-{_machine()}.json"


def recall(key: tuple) -> tuple[float, float] | None:
    """(dense, sparse) seconds measured for ``key`` by an earlier process on this machine, if any."""
    found = _read(timings_file()).get(repr(key))
    return (float(found[0]), float(found[1])) if found else None


def remember(key: tuple, dense_s: float, sparse_s: float) -> None:
    """Keep a timing for later processes (merged into the file, replaced atomically; no cache: skipped)."""
    path = timings_file()
    with contextlib.suppress(OSError):
        path.parent.mkdir(parents=True, exist_ok=True)
        saved = {**_read(path), repr(key): [dense_s, sparse_s]}
        with tempfile.NamedTemporaryFile("w", dir=path.parent, suffix=".json", delete=False) as tmp:
            json.dump(saved, tmp, indent=0)
        os.replace(tmp.name, path)


def _read(path: Path) -> dict[str, list[float]]:
    """The timings in ``path`` (empty when missing or unreadable: then the layer is timed again)."""
    try:
        saved = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return saved if isinstance(saved, dict) else {}


@functools.cache
def _machine() -> str:
    """Short hash of what a timing depends on besides the layer: CPU model and flags, kernel build, torch."""
    model = ""
    with contextlib.suppress(OSError, StopIteration):
        lines = Path("/proc/cpuinfo").read_text().splitlines()
        model = next(line for line in lines if line.startswith("model name"))
    library = kernels.load()
    build = Path(library._name).name if library is not None else "no-kernels"
    text = "|".join((model or platform.processor(), kernels._cpu_id(), build, torch.__version__))
    return hashlib.sha256(text.encode()).hexdigest()[:16]
