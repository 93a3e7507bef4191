"""This machine's speed per backbone, and the rule that turns sparse kernels on where they are faster.

Speeds are GFLOP/s of the FLOPs ``iss.ui.cost.trace`` counts, per kind of work (``KINDS``) and backbone:
priors measured by ``benchmarks/app_speed.py`` (``speed.json``, taken as an idle machine's), replaced by
what the process measures itself as it runs (``observe``: each weighted by the seconds it took, halved for
every ``HALF_LIFE`` it is older, so recent runs weigh most), plus the seconds to build a live run
(``setup_seconds``, ``observe_setup``). On the CPU both follow the machine's load now (``load_factor``): a
measurement is kept as the idle speed it implies (its value over the load factor when it was measured) and
scaled by the load factor of each estimate, so that one measured under load is not slowed down twice.
:func:`sparse_by_default` decides whether ``iss.load`` and the app run a backbone through ``iss.sparsify``.
"""

from __future__ import annotations

import json
import math
import os
import threading
import time
from pathlib import Path
from typing import Any

import torch

SPEED_FILE = Path(__file__).with_name("speed.json")
KINDS = ("train", "dense", "sparse")  # a training step of one run; dense inference; iss.sparsify inference
SETUP = "setup"  # seconds to build a live run, kept beside the speeds
HALF_LIFE = 60.0  # seconds: a measurement weighs half as much as one as long taken this much later
MINUTE = 60.0  # seconds over which the kernel's 1-min load average (and our CPU use beside it) decays
# (kind, arch, device) -> measured in this process: (idle equivalent, its weight in seconds, when updated)
_observed: dict[tuple[str, str, str], tuple[float, float, float]] = {}
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
    """Record a measured speed (later estimates use it, recent ones most, corrected for the load since)."""
    if flops > 0 and seconds > 0:
        _record(kind, arch, device, flops / seconds / 1e9, seconds)


def setup_seconds(arch: str, device: str) -> float:
    """Seconds to build both runs of a live run of ``arch`` (models, masks): measured, else the prior."""
    return _lookup(SETUP, arch, device, 60.0)


def observe_setup(arch: str, device: str, seconds: float) -> None:
    """Record how long building a live run of ``arch`` took."""
    if seconds > 0:
        _record(SETUP, arch, device, seconds, seconds)


def load_factor() -> float:
    """The share of its idle CPU speed this process can expect now: cores / (others' load + our threads), at
    most 1. Others' load is the 1-min load average less our own (our CPU use over this share: our threads
    that wait for the CPU count too), times the share of others' CPU time at normal priority (niced work,
    such as a background training, barely slows us), and only the part on the cores we may use; our
    threads are PyTorch's, at most those cores."""
    load, cores, usable = _system()
    own, normal, niced = _usage()
    others_normal = max(0.0, normal - own)
    k = usable / cores * (others_normal / (others_normal + niced) if others_normal + niced > 0 else 1.0)
    threads = min(torch.get_num_threads(), usable)
    # solves f = usable / ((load - own / f) * k + threads): others' load on our cores, plus our threads
    return min(1.0, (usable + own * k) / (load * k + threads))


def load_note(device: str) -> str:
    """A sentence for estimates made while other work slows this process down (empty on a GPU or idle CPU)."""
    factor = load_factor()
    if _device(device) != "cpu" or factor > 0.9:
        return ""
    return f"Allows for the machine's load: other work leaves this process about {factor:.0%} of the CPU."


def _system() -> tuple[float, int, int]:
    """(1-min load average, the machine's cores, the cores this process may use)."""
    cores = os.cpu_count() or 1
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else cores
    return os.getloadavg()[0], cores, min(usable, cores)


def _cpu_seconds() -> tuple[float, float, float]:
    """CPU seconds so far: this process's, and the machine's at normal priority and niced (``/proc/stat``'s
    user + system and nice; both 0 where there is no ``/proc``)."""
    own = time.process_time()
    try:
        user, nice, system = (int(v) for v in Path("/proc/stat").read_text().split()[1:4])
    except (OSError, ValueError):
        return own, 0.0, 0.0
    tick = os.sysconf("SC_CLK_TCK")
    return own, (user + system) / tick, nice / tick


def _since_boot(seconds: tuple[float, float, float]) -> tuple[float, float, float]:
    """The machine's mean CPU use since it started (what ``_usage`` starts from): none of it ours."""
    up = time.clock_gettime(time.CLOCK_BOOTTIME) if hasattr(time, "CLOCK_BOOTTIME") else 0.0
    return (0.0, seconds[1] / up, seconds[2] / up) if up > 0 else (0.0, 0.0, 0.0)


_seconds = _cpu_seconds()
_usage_state = {"at": time.monotonic(), "seconds": _seconds, "rates": _since_boot(_seconds)}


def _usage() -> tuple[float, float, float]:
    """CPU seconds per second (cores busy), decayed over ``MINUTE`` as the load average is (from the means
    since boot at import): this process's, the machine's at normal priority (ours included), the niced."""
    now, seconds = time.monotonic(), _cpu_seconds()
    with _lock:
        elapsed = now - _usage_state["at"]
        if elapsed > 0:
            keep = math.exp(-elapsed / MINUTE)
            pairs = zip(_usage_state["rates"], seconds, _usage_state["seconds"], strict=True)
            rates = tuple(keep * rate + (1 - keep) * (new - old) / elapsed for rate, new, old in pairs)
            _usage_state.update(at=now, seconds=seconds, rates=rates)
        return _usage_state["rates"]


def _device(device: str) -> str:
    """``cuda`` or ``cpu``: what measurements are kept per."""
    return "cuda" if str(device).startswith("cuda") else "cpu"


def _lookup(kind: str, arch: str, device: str, fallback: float) -> float:
    """The idle value measured in this process, else ``speed.json``'s for the backbone, its default,
    ``fallback``; on the CPU, at the load now (speeds times the load factor, setup seconds over it)."""
    device = _device(device)
    with _lock:
        measured = _observed.get((kind, arch, device))
    table = priors().get(device, {}).get(kind, {})
    idle = measured[0] if measured else float(table.get(arch, table.get("default", fallback)))
    factor = load_factor() if device == "cpu" else 1.0
    return idle / factor if kind == SETUP else idle * factor


def _record(kind: str, arch: str, device: str, value: float, seconds: float) -> None:
    """Fold a measurement that took ``seconds``, as the idle value it implies at the load now, into the key's
    weighted mean (speeds so weighted add up as total FLOPs over total seconds)."""
    key = (kind, arch, _device(device))
    factor = load_factor() if key[2] == "cpu" else 1.0
    idle = value * factor if kind == SETUP else value / factor
    now = time.monotonic()
    with _lock:
        mean, weight, then = _observed.get(key, (0.0, 0.0, now))
        weight *= 0.5 ** ((now - then) / HALF_LIFE)
        _observed[key] = ((mean * weight + idle * seconds) / (weight + seconds), weight + seconds, now)
