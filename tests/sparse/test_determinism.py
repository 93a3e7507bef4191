"""Same input, same bytes: the compiled kernels on several threads, and the timed dense-or-sparse choices
(remembered per machine by iss.sparse.decisions, so timing jitter cannot change a later run's output)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from common import TINY_ARCHS, masked

from iss import archs
from iss.sparse import kernels, layer_modes, layers, sparsify, threads


def _bytes(model: torch.nn.Module, x: torch.Tensor) -> bytes:
    with torch.inference_mode():
        return model(x).numpy().tobytes()


@pytest.mark.parametrize("arch", ["swinir-light", "edsr-l", "cat-r"])
def test_kernels_on_two_threads_repeat_bytes(arch: str) -> None:
    if kernels.load() is None:
        pytest.skip("no C compiler: the compiled kernels are what is checked")
    torch.manual_seed(0)
    model = masked(archs.build(arch, 2, **TINY_ARCHS[arch]), 0.9)
    x = torch.rand(1, 3, 96, 96)  # enough work that the kernels split it over the pool's threads
    with threads.torch_threads(2):
        runs = {_bytes(sparsify(model, min_speedup=0.0), x) for _ in range(3)}
        fast = sparsify(model, min_speedup=0.0)
        runs |= {_bytes(fast, x) for _ in range(4)}  # also across ForwardThreads' timed thread modes
    assert len(runs) == 1


def test_jittery_timings_make_one_choice_per_machine(monkeypatch: pytest.MonkeyPatch) -> None:
    timing = [(1.0, 2.0)]  # what the next measurement finds (dense, sparse seconds)
    monkeypatch.setattr(layers, "_time_pair", lambda *a: timing[0])
    torch.manual_seed(0)
    model = masked(archs.build("swinir-light", 2, **TINY_ARCHS["swinir-light"]), 0.9)
    x = torch.rand(1, 3, 32, 32)
    outputs, modes = set(), set()
    for found in [(1.0, 2.0), (2.0, 1.0), (1.0, 2.0)]:  # a close pair: each process measures another winner
        timing[0] = found
        fast = sparsify(model)  # as a new process would: a plan of its own
        outputs.add(_bytes(fast, x))
        modes.add(tuple(layer_modes(fast).items()))
    assert len(outputs) == len(modes) == 1


def test_unreadable_store_is_measured_again(own_cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(layers, "_time_pair", lambda *a: (2.0, 1.0))
    torch.manual_seed(0)
    model = masked(archs.build("edsr-l", 2, **TINY_ARCHS["edsr-l"]), 0.9)
    x = torch.rand(1, 3, 16, 16)
    first = _bytes(sparsify(model), x)
    stores = list((own_cache / "sparse").glob("*.json"))
    assert stores
    for path in stores:
        path.write_text("{not json")
    assert _bytes(sparsify(model), x) == first  # measured again (the same timing here), then stored again
    assert all(isinstance(json.loads(path.read_text()), dict) for path in stores)
