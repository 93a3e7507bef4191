"""iss.sparse.threads: jobs on the caller and the pool, where torch runs its ops, threads kept to CPUs."""

from __future__ import annotations

import os
import threading
import time

import pytest
import torch
from common import masked
from torch import nn

from iss import sparse
from iss.sparse import sparsify, threads


def test_chunks_run_on_the_calling_thread_and_the_pool_each_once(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(threads, "PARALLEL_MIN_WORK", 0)
    meet = threading.Barrier(2, timeout=10)  # each thread's first job waits for the other's: both run some
    ran: dict[int, int] = {}

    def job(index: int, buffers: list) -> None:
        if threading.get_ident() not in ran.values():
            meet.wait()
        assert index not in ran
        ran[index] = threading.get_ident()

    with threads.torch_threads(2):
        threads.run_chunks(job, range(20), 1.0, list)
    assert sorted(ran) == list(range(20))
    assert len(set(ran.values())) == 2 and threading.get_ident() in ran.values()


class _Stall(nn.Module):
    """Sleeps ``seconds`` on calls where torch runs on ``threads`` threads; records what each call saw."""

    def __init__(self, threads: int, seconds: float = 0.05) -> None:
        super().__init__()
        self.threads, self.seconds, self.seen = threads, seconds, []

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.seen.append((torch.get_num_threads(), threads.pool_threads()))
        if torch.get_num_threads() == self.threads:
            time.sleep(self.seconds)
        return x


@pytest.mark.parametrize(("slow_threads", "mode"), [(1, "all"), (2, "one")])
def test_torch_ops_run_on_one_thread_when_that_is_faster(slow_threads: int, mode: str) -> None:
    """Calls 2 and 3 time torch's ops on all threads, then on one (the kernels keep 2); the faster stays,
    and torch's thread count is back after every call."""
    fast = sparsify(masked(nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), _Stall(slow_threads)), 0.9))
    stall = fast[1]  # sparsify's copy
    (choice,) = [hook.__self__ for hook in fast._forward_pre_hooks.values()]
    with threads.torch_threads(2), torch.inference_mode():
        for _ in range(sparse.SETUP_CALLS + 1):
            fast(torch.rand(1, 3, 6, 6))
            assert torch.get_num_threads() == 2
    assert choice.mode == mode
    assert stall.seen[:3] == [(2, 2), (2, 2), (1, 2)]
    assert stall.seen[3] == ((1, 2) if mode == "one" else (2, 2))


def test_a_failing_forward_restores_torch_threads() -> None:
    fast = sparsify(nn.Sequential(masked(nn.Conv2d(3, 8, 3, padding=1), 0.9)), min_speedup=0.0)
    (choice,) = [hook.__self__ for hook in fast._forward_pre_hooks.values()]
    with threads.torch_threads(2), torch.inference_mode():
        fast(torch.rand(1, 3, 6, 6))
        fast(torch.rand(1, 3, 6, 6))
        with pytest.raises(ValueError):
            fast(torch.rand(1, 5, 6, 6))  # the third call, torch on one thread: wrong channel count
        assert torch.get_num_threads() == 2 and threads.pool_threads() == 2
    assert choice.mode == "undecided"  # a failed call decides nothing


@pytest.mark.skipif(
    not hasattr(os, "sched_setaffinity") or len(os.sched_getaffinity(0)) < 2, reason="needs 2 CPUs to pin"
)
def test_a_forward_keeps_its_threads_on_cpus_of_their_own(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(threads, "PARALLEL_MIN_WORK", 0)
    allowed = os.sched_getaffinity(0)
    seen: list[tuple[int, frozenset[int]]] = []  # (thread, its CPUs) for every job
    runner = threads.run_chunks

    def spy(fn, jobs, work, scratch):
        def job(j, buffers):
            seen.append((threading.get_native_id(), frozenset(os.sched_getaffinity(0))))
            time.sleep(0.001)  # long enough for both threads to take jobs
            fn(j, buffers)

        runner(job, jobs, work, scratch)

    monkeypatch.setattr(sparse.layers, "run_chunks", spy)
    net = masked(nn.Sequential(nn.Conv2d(4, 8, 3, padding=1)), 0.9)
    fast = sparsify(net, exact=True, min_speedup=0.0)
    x = torch.rand(1, 4, 16, 16)
    with threads.torch_threads(2), torch.inference_mode():
        torch.testing.assert_close(fast(x), net(x), atol=1e-5, rtol=0)
    assert os.sched_getaffinity(0) == allowed  # restored after the forward
    cpus = {tid: cpus for tid, cpus in seen}
    assert all(len(c) == 1 for c in cpus.values())
    assert len(cpus) == 2 and len(set(cpus.values())) == 2  # two threads, each on a CPU of its own


def test_a_forward_runs_where_the_os_forbids_pinning(monkeypatch: pytest.MonkeyPatch) -> None:
    def forbidden(*_: object) -> None:
        raise PermissionError("sched_setaffinity: operation not permitted")

    monkeypatch.setattr(threads.os, "sched_setaffinity", forbidden, raising=False)
    monkeypatch.setattr(threads, "PARALLEL_MIN_WORK", 0)
    net = masked(nn.Sequential(nn.Conv2d(4, 8, 3, padding=1)), 0.9)
    fast = sparsify(net, exact=True, min_speedup=0.0)
    x = torch.rand(1, 4, 16, 16)
    with threads.torch_threads(2), torch.inference_mode():
        torch.testing.assert_close(fast(x), net(x), atol=1e-5, rtol=0)
