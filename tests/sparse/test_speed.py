"""iss/sparse/speed.py: speeds per backbone (priors, then this process's measurements) and the sparse rule."""

from __future__ import annotations

import pytest

from iss.sparse import speed


@pytest.fixture(autouse=True)
def fresh(monkeypatch: pytest.MonkeyPatch) -> None:
    """No measurement from another test leaks in, and none leaks out."""
    monkeypatch.setattr(speed, "_observed", {})


def test_speed_priors_then_measurements() -> None:
    prior = speed.gflops("train", "swinir-light", "cpu")
    assert prior == speed.priors()["cpu"]["train"]["swinir-light"]
    assert speed.gflops("dense", "no-such-arch", "cpu") == speed.priors()["cpu"]["dense"]["default"]
    speed.observe("train", "swinir-light", "cpu", flops=30e9, seconds=1.0)
    assert speed.gflops("train", "swinir-light", "cpu") == 30.0
    speed.observe("train", "swinir-light", "cpu", flops=10e9, seconds=1.0)
    assert speed.gflops("train", "swinir-light", "cpu") == 20.0  # follows the machine
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
