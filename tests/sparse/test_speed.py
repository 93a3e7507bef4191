"""iss/sparse/speed.py: speeds per backbone (priors, then this process's measurements) and the sparse rule."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch

from iss.sparse import speed


@pytest.fixture(autouse=True)
def fresh(monkeypatch: pytest.MonkeyPatch) -> None:
    """No measurement from another test leaks in, and none leaks out."""
    monkeypatch.setattr(speed, "_observed", {})


def test_speed_priors_then_measurements(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(speed, "load_factor", lambda: 1.0)  # an idle machine: the load has its own tests
    prior = speed.gflops("train", "swinir-light", "cpu")
    assert prior == speed.priors()["cpu"]["train"]["swinir-light"]
    assert speed.gflops("dense", "no-such-arch", "cpu") == speed.priors()["cpu"]["dense"]["default"]
    speed.observe("train", "swinir-light", "cpu", flops=30e9, seconds=1.0)
    assert speed.gflops("train", "swinir-light", "cpu") == 30.0
    speed.observe("train", "swinir-light", "cpu", flops=10e9, seconds=3.0)
    # 40 GFLOP in 4 s (not the mean of 30 and 3.3); the first weight decays (HALF_LIFE) in the time between
    assert speed.gflops("train", "swinir-light", "cpu") == pytest.approx(10.0, rel=1e-3)
    with pytest.raises(ValueError, match="unknown kind"):
        speed.gflops("backward", "swinir-light", "cpu")
    speed.observe_setup("cat-r", "cpu", 12.0)
    assert speed.setup_seconds("cat-r", "cpu") == 12.0 and speed.gflops("train", "cat-r", "cpu") != 12.0


def test_sparse_kernels_are_the_default_where_measured_faster(monkeypatch: pytest.MonkeyPatch) -> None:
    speeds = {"dense": 10.0, "sparse": 20.0}
    monkeypatch.setattr(speed, "gflops", lambda kind, arch, device: speeds[kind])
    assert speed.sparse_by_default("edsr-l", "cpu") and not speed.sparse_by_default("edsr-l", "cuda:0")
    speeds["sparse"] = 5.0
    assert not speed.sparse_by_default("edsr-l", "cpu")


def test_the_shipped_priors_turn_sparse_kernels_on_for_every_measured_backbone() -> None:
    cpu = speed.priors()["cpu"]
    assert all(speed.sparse_by_default(arch, "cpu") for arch in cpu["sparse"] if arch != "default")
    speed.observe("sparse", "swinir-light", "cpu", flops=1e9, seconds=1.0)  # measured slower than dense now
    assert not speed.sparse_by_default("swinir-light", "cpu")


def _load(
    monkeypatch: pytest.MonkeyPatch,
    load: float,
    own: float = 0.0,
    niced: float = 0.0,
    cores: int = 2,
    usable: int = 2,
    threads: int = 2,
) -> None:
    """The 1-min load average ``load`` (``own`` of it this process's, ``niced`` of it niced work)."""
    monkeypatch.setattr(speed, "_system", lambda: (load, cores, usable))
    others = load - own - niced
    monkeypatch.setattr(speed, "_usage", lambda: (own, own + others, niced))
    monkeypatch.setattr(torch, "get_num_threads", lambda: threads)


def test_estimates_follow_the_load_of_other_work(monkeypatch: pytest.MonkeyPatch) -> None:
    _load(monkeypatch, 0.0)
    idle, setup = speed.gflops("dense", "edsr-l", "cpu"), speed.setup_seconds("edsr-l", "cpu")
    assert speed.load_factor() == 1.0 and speed.load_note("cpu") == ""
    _load(monkeypatch, 6.0)  # 2 cores, others keep 6 threads busy: our 2 get 2 of 8 shares
    assert speed.gflops("dense", "edsr-l", "cpu") == pytest.approx(idle / 4)
    assert speed.setup_seconds("edsr-l", "cpu") == pytest.approx(setup * 4)
    assert "about 25% of the CPU" in speed.load_note("cpu") and speed.load_note("cuda:0") == ""
    assert speed.gflops("dense", "edsr-l", "cuda:0") == speed.gflops("dense", "edsr-l", "cuda")  # GPU: as is
    _load(monkeypatch, 6.0, threads=1)
    assert speed.load_factor() == pytest.approx(2 / 7)  # 3.5x the idle time
    _load(monkeypatch, 4.0, cores=4, usable=2)  # half of the others' load is on the 2 cores we may use
    assert speed.load_factor() == pytest.approx(0.5)


def test_our_own_and_niced_load_do_not_slow_the_estimate(monkeypatch: pytest.MonkeyPatch) -> None:
    _load(monkeypatch, 2.0, own=2.0)  # the load is this process's last run
    assert speed.load_factor() == 1.0
    _load(monkeypatch, 6.0, niced=6.0)  # a niced background training
    assert speed.load_factor() == 1.0
    _load(monkeypatch, 4.0, own=1.0)  # our 2 threads ran half the time beside 2 others': 2 of them waited
    assert speed.load_factor() == pytest.approx(0.5)
    _load(monkeypatch, 5.0, niced=3.0)  # 2 of 5 at normal priority
    assert speed.load_factor() == pytest.approx(0.5)


def test_a_measurement_under_load_is_not_slowed_down_again(monkeypatch: pytest.MonkeyPatch) -> None:
    _load(monkeypatch, 6.0)
    speed.observe("sparse", "edsr-l", "cpu", flops=10e9, seconds=1.0)
    speed.observe_setup("edsr-l", "cpu", 8.0)
    assert speed.gflops("sparse", "edsr-l", "cpu") == pytest.approx(10.0)  # the load it was measured at
    assert speed.setup_seconds("edsr-l", "cpu") == pytest.approx(8.0)
    _load(monkeypatch, 0.0)  # the others finished: 4x faster now
    assert speed.gflops("sparse", "edsr-l", "cpu") == pytest.approx(40.0)
    assert speed.setup_seconds("edsr-l", "cpu") == pytest.approx(2.0)


def test_a_newer_measurement_outweighs_an_older_one(monkeypatch: pytest.MonkeyPatch) -> None:
    """Measurements as long as each other a minute apart: the newer weighs twice as much."""
    _load(monkeypatch, 0.0)
    clock = [0.0]
    monkeypatch.setattr(speed, "time", SimpleNamespace(monotonic=lambda: clock[0]))
    speed.observe("train", "cat-r", "cpu", flops=40e9, seconds=1.0)
    speed.observe_setup("cat-r", "cpu", 2.0)
    clock[0] = 60.0  # the machine got 4x slower (something the load does not show)
    speed.observe("train", "cat-r", "cpu", flops=10e9, seconds=1.0)
    speed.observe_setup("cat-r", "cpu", 8.0)
    assert speed.gflops("train", "cat-r", "cpu") == pytest.approx(20.0)  # (40 + 2 x 10) / 3, not 25
    assert speed.setup_seconds("cat-r", "cpu") == pytest.approx((2 * 2 * 0.5 + 8 * 8) / (2 * 0.5 + 8))


def test_own_cpu_use_is_measured_and_decays(monkeypatch: pytest.MonkeyPatch) -> None:
    """``_usage``: a core busy for a minute reads 1 - 1/e of a core, then decays as the load average does."""
    clock, cpu = [0.0], [(0.0, 0.0, 0.0)]
    monkeypatch.setattr(speed, "time", SimpleNamespace(monotonic=lambda: clock[0]))
    monkeypatch.setattr(speed, "_cpu_seconds", lambda: cpu[0])
    monkeypatch.setattr(speed, "_usage_state", {"at": 0.0, "seconds": cpu[0], "rates": (0.0, 0.0, 1.0)})
    clock[0], cpu[0] = 60.0, (60.0, 60.0, 0.0)  # we ran one core for a minute; the niced work stopped
    own, normal, niced = speed._usage()
    assert own == normal == pytest.approx(1 - 1 / math.e) and niced == pytest.approx(1 / math.e)
    clock[0] = 120.0  # a minute idle
    assert speed._usage()[0] == pytest.approx(own / math.e)
