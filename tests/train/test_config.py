"""TrainConfig: field checks that name the field, and the paper/CPU presets."""

import pytest

from iss.train.config import TrainConfig


def test_config_validation_names_the_field() -> None:
    with pytest.raises(ValueError, match="prune_iters=50"):
        TrainConfig(iters=10, prune_iters=50)
    with pytest.raises(ValueError, match=r"ratio=1\.5"):
        TrainConfig(ratio=1.5)
    with pytest.raises(KeyError, match="unknown preset"):
        TrainConfig.from_preset("nope")


def test_presets() -> None:
    paper = TrainConfig.from_preset("paper", method="iss-p")
    assert (paper.batch, paper.patch, paper.lr, paper.betas) == (32, 64, 2e-4, (0.9, 0.99))
    assert paper.prune_iters == 100_020 and paper.iters == 300_020
    assert TrainConfig.from_preset("paper", arch="edsr-l").lr == 1e-4
    assert TrainConfig.from_preset("paper", method="l1").prune_iters == 0
    short = TrainConfig.from_preset("cpu-short", iters=400)
    assert (short.batch, short.patch, short.iters, short.prune_iters) == (4, 24, 400, 200)
    assert short.milestones == (100, 160, 180, 190)
    tiny = TrainConfig.from_preset("cpu-tiny")
    assert tiny.iters == 200 and tiny.prune_iters == 100 and tiny.milestones == (50, 80, 90, 95)
