"""How the sparse kernels share the CPU's threads with torch, and what a sparsified model's forward does.

* The kernels split their work into jobs run by the calling thread and a small pool of Python threads
  (:func:`run_chunks`; the C kernels release the GIL). This avoids an OpenMP barrier per call, which stalls
  badly on a shared CPU.
* Between the kernels a model still runs torch ops (LayerNorm, adds, attention outside fused blocks). On
  several threads each one wakes OpenMP workers that then spin for more work (libgomp's default,
  ``OMP_WAIT_POLICY`` unset), holding the cores the pool needs for milliseconds. :class:`ForwardThreads`
  times whether torch's ops should run on one thread during the forward.
* Linux wakes a thread on the core of the thread that woke it. After an idle pause the caller and a pool
  thread then shared one core for much of a forward, so during a forward each thread keeps to one CPU of
  its own.

``benchmarks/sparse_threads.py`` measures both (SwinIR-light x4 at 64x64 on 2 Zen 5 cores: 18.7 ms with
torch's ops on one thread against 46.0 on both; 20.6 ms pinned after a 0.1 s pause against 31.8).
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import os
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field

import torch
from torch import Tensor, nn

__all__ = [
    "PARALLEL_MIN_WORK",
    "SETUP_CALLS",
    "ForwardThreads",
    "pool_threads",
    "run_chunks",
    "torch_threads",
]

PARALLEL_MIN_WORK = 4e6  # below ~0.4 ms of one-thread work the pool's hand-offs (~0.1-0.2 ms) cost more
SETUP_CALLS = 3  # calls a sparsified model spends choosing: its kernels on the first, ForwardThreads's mode
_POOL: dict[int, ThreadPoolExecutor] = {}  # thread count -> pool


@dataclass
class _Forwards:
    """The sparsified forwards running now, process-wide (``torch.set_num_threads`` and CPUs are shared)."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    running: int = 0
    one_thread: int = 0  # of them, those running torch's ops on one thread
    threads: int | None = None  # while one_thread > 0: torch's thread count before the first of those
    allowed: set[int] | None = None  # while the threads are pinned: the CPUs they may use otherwise
    cpus: list[int] = field(default_factory=list)  # while pinned: the caller's CPU, then one per pool thread
    pinned: set[int] = field(default_factory=set)  # native ids of the threads pinned


_FORWARDS = _Forwards()


@contextmanager
def torch_threads(threads: int | None) -> Iterator[None]:
    """Temporarily run torch with ``threads`` intra-op threads (None: leave as is)."""
    previous = torch.get_num_threads()
    if threads is not None:
        torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(previous)


def pool_threads() -> int:
    """Threads for the sparse kernels: torch's count, or while a forward runs torch's ops on one thread
    (:class:`ForwardThreads`), the count torch had before."""
    return _FORWARDS.threads or torch.get_num_threads()


def _pool(threads: int) -> ThreadPoolExecutor:
    """Process-wide pool of ``threads`` Python threads whose torch kernels run single-threaded."""
    if threads not in _POOL:
        _POOL[threads] = ThreadPoolExecutor(threads, "iss-sparse", torch.set_num_threads, (1,))
    return _POOL[threads]


def run_chunks(
    fn: Callable[[object, list[Tensor]], None],
    jobs: Sequence[object],
    work: float,
    scratch: Callable[[], list[Tensor]],
) -> None:
    """Run ``fn(job, buffers)`` on every job, on this thread for small ``work`` (multiply-adds and such),
    else spread over :func:`pool_threads` threads.

    The calling thread and ``threads - 1`` pool threads each take the next job when done with one, so a
    core taken by another process delays one job rather than every call, and no call waits for a pool
    thread to wake that it could have run itself. The per-thread ``scratch()`` buffers are allocated here,
    on the calling thread: allocations inside the pool threads would land in per-thread malloc arenas that
    keep their memory.
    """
    threads = min(pool_threads(), len(jobs))
    if threads <= 1 or work < PARALLEL_MIN_WORK:
        threads = 1
    todo = iter(jobs)  # shared: next() on it is atomic under the GIL
    inference = torch.is_inference_mode_enabled()

    def run(buffers: list[Tensor], helper: int | None = None) -> None:
        if helper is not None:
            _pin_helper(helper)
        with torch.inference_mode(inference), torch.no_grad():  # both modes are thread-local
            for job in todo:
                fn(job, buffers)

    with torch_threads(1):  # MKL's thread count may be process-wide: keep each thread's calls sequential
        helpers = [_pool(threads - 1).submit(run, scratch(), k) for k in range(threads - 1)]
        try:
            run(scratch())
        finally:
            for helper in helpers:
                helper.result()


class ForwardThreads:
    """Forward hooks of a :func:`iss.sparsify`-ed model: threads kept to their CPUs during the forward, and
    torch's own ops on one thread where that measured faster (see the module doc).

    Running torch's ops on one thread while the kernels keep the caller's thread count avoids the spinning
    OpenMP workers, but slows models whose own torch ops weigh (CAT-R's attention). So the second call runs
    as usual, the third with torch on one thread, and the faster per input element is kept (``mode``:
    "undecided", "all" or "one").
    """

    def __init__(self) -> None:
        self.mode = "undecided"
        self._calls = 0
        self._seconds: dict[bool, float] = {}  # one thread? -> seconds per input element
        self._running: list[tuple[float, bool, int]] = []  # (start, one thread?, input elements)

    def enter(self, module: nn.Module, args: tuple) -> None:
        self._calls += 1
        one = self.mode == "one" or (self.mode == "undecided" and self._calls == 3)
        _enter_forward(one)
        size = next((a.numel() for a in args if isinstance(a, Tensor)), 1)
        self._running.append((time.perf_counter(), one, max(size, 1)))

    def exit(self, module: nn.Module, args: tuple, output: object) -> None:
        start, one, size = self._running.pop()
        _exit_forward(one)
        if self.mode == "undecided" and self._calls in (2, 3) and output is not None:
            self._seconds[one] = (time.perf_counter() - start) / size
            if len(self._seconds) == 2:
                self.mode = "one" if self._seconds[True] < self._seconds[False] else "all"


def _enter_forward(one_thread: bool) -> None:
    """A forward begins: the first running pins its thread (and the pool's), the first with ``one_thread``
    saves torch's thread count for :func:`pool_threads` and sets it to 1."""
    state = _FORWARDS
    with state.lock:
        if state.running == 0:
            _pin_caller(state, pool_threads())
        state.running += 1
        if one_thread:
            if state.one_thread == 0:
                state.threads = torch.get_num_threads()
                torch.set_num_threads(1)
            state.one_thread += 1


def _exit_forward(one_thread: bool) -> None:
    """A forward ends (also on errors): the last with ``one_thread`` restores torch's thread count, the last
    running the threads' CPUs."""
    state = _FORWARDS
    with state.lock:
        if one_thread:
            state.one_thread -= 1
            if state.one_thread == 0:
                torch.set_num_threads(state.threads)
                state.threads = None
        state.running -= 1
        if state.running == 0 and state.allowed is not None:
            for tid in state.pinned:
                with contextlib.suppress(OSError):  # that pool thread has ended
                    os.sched_setaffinity(tid, state.allowed)
            state.allowed, state.cpus, state.pinned = None, [], set()


@functools.cache
def _sched_getcpu() -> Callable[[], int] | None:
    """The C library's ``sched_getcpu`` (the CPU this thread runs on), if it has one."""
    try:
        return ctypes.CDLL(None).sched_getcpu
    except (OSError, AttributeError):
        return None


def _pin_caller(state: _Forwards, threads: int) -> None:
    """Keep this thread on the CPU it runs on, and reserve another allowed CPU for each pool thread; nothing
    where the OS cannot, or there are too few CPUs."""
    getcpu = _sched_getcpu()
    if threads < 2 or getcpu is None or not hasattr(os, "sched_setaffinity"):
        return
    allowed, cpu = os.sched_getaffinity(0), getcpu()
    others = sorted(allowed - {cpu})
    if cpu not in allowed or len(others) < threads - 1:
        return
    try:
        os.sched_setaffinity(0, {cpu})
    except OSError:  # e.g. a sandbox that forbids it: run unpinned
        return
    state.allowed, state.cpus = allowed, [cpu, *others[: threads - 1]]
    state.pinned = {threading.get_native_id()}


def _pin_helper(k: int) -> None:
    """Keep pool thread ``k`` of the running forward on its reserved CPU (nothing outside a forward)."""
    state = _FORWARDS
    with state.lock:
        if state.allowed is None or k + 1 >= len(state.cpus):
            return
        with contextlib.suppress(OSError):
            os.sched_setaffinity(0, {state.cpus[k + 1]})
            state.pinned.add(threading.get_native_id())
