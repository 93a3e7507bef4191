"""benchmarks/sparse_threads.py and swin_phases.py: the thread choices and the Swin block's phases, timed."""

from __future__ import annotations

import platform
import re
import subprocess
import sys

import pytest
from common import ROOT

from iss.sparse import kernels


def run(script: str, *args: str) -> str:
    cmd = [sys.executable, str(ROOT / "benchmarks" / script), *args]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=ROOT / "benchmarks")
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def test_sparse_threads_times_both_modes_and_both_pinnings() -> None:
    out = run("sparse_threads.py", "--archs", "swinir-light", "--size", "16", "--reps", "1", "--pause", "0")
    line = out.splitlines()[-1]
    assert re.search(r"'one': [\d.]+, 'all': [\d.]+, 'chosen': [\d.]+\} \(chose (one|all)\)", line), line
    assert re.search(r"'pinned': [\d.]+, 'unpinned': [\d.]+", line), line


@pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"), reason="rdtsc: x86 only")
def test_swin_phases_counts_every_phase() -> None:
    if kernels.load() is None:
        pytest.skip("no C compiler")
    out = run("swin_phases.py", "--size", "16", "--reps", "1")
    phases = dict(re.findall(r"(\w+) ([\d.]+)", out.splitlines()[-1]))
    assert " ".join(phases) == "gather ln1 qkv attention proj ln2 fc1 gelu fc2 scatter"
    assert all(float(ticks) > 0 for ticks in phases.values())
