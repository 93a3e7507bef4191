"""A new pruning method written against the documented extension points, and the shared options object."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from test_pruning import RATIO, sr_step, tiny_edsr

import iss.pruning as pruning
from iss.pruning import PruneOptions, Pruner


class HalfShrink(Pruner):
    """A method in a few lines: re-select every step, halve the unimportant weights, freeze after 6 steps."""

    method = "half-shrink"

    def __init__(self, model: torch.nn.Module, ratio: float, options: PruneOptions | None = None) -> None:
        super().__init__(model, ratio, options, prune_iters=6)

    def prune_step(self) -> None:
        self.reselect()
        self.shrink(0.5)


def test_a_subclass_overriding_prune_step_runs_like_the_built_in_method_it_restates():
    runs = []
    for make in (
        lambda m: HalfShrink(m, RATIO, PruneOptions(window=4, exclude=["head.*"])),
        lambda m: pruning.build("iss-p", m, RATIO, alpha=0.5, prune_iters=6, window=4, exclude=["head.*"]),
    ):
        model = tiny_edsr()
        pruner = make(model)
        opt = torch.optim.Adam(model.parameters(), 1e-2)
        for i in range(10):
            sr_step(model, opt, pruner, seed=i)
        runs.append((model, pruner))
    (mine, ours), (theirs, built) = runs
    assert ours.stage == built.stage == "finetune"
    assert ours.layer_names == built.layer_names
    assert not any(name.startswith("head.") for name in ours.layer_names)
    for (name, a), b in zip(mine.state_dict().items(), theirs.state_dict().values(), strict=True):
        assert torch.equal(a, b), name


def test_build_hands_the_shared_options_to_the_method_as_one_object():
    pruner = pruning.build("srp", tiny_edsr(), RATIO, prune_iters=12, nm="3:4", window=7, sync_free=True)
    assert pruner.nm == (3, 4)
    assert pruner.sync_free
    shared = {f.name for f in dataclasses.fields(PruneOptions)}
    assert shared == {"include", "exclude", "nm", "window", "sync_free"}
    for method in pruning.list_methods():
        assert shared <= set(pruning.options(method)), method
    with pytest.raises(ValueError, match="unknown option"):
        pruning.build("l1", tiny_edsr(), RATIO, windw=3)
