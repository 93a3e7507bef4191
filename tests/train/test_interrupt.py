"""iss.train.interrupt: a stop asked for mid-step ends the step within a layer, before any update."""

from __future__ import annotations

import pytest
import torch
from common import TINY, TINY_ARCHS

from iss import archs
from iss.train.interrupt import Interrupted, interruptible
from iss.ui import analysis


class Flag:
    """A stop flag that turns true at its ``limit``-th question (None: never), counting the questions."""

    def __init__(self, limit: int | None = None) -> None:
        self.limit, self.asked = limit, 0

    def is_set(self) -> bool:
        self.asked += 1
        return self.limit is not None and self.asked >= self.limit


@pytest.mark.parametrize("during", ["forward", "backward"])
def test_a_stop_mid_step_raises_before_the_update_and_leaves_no_hooks(during: str) -> None:
    torch.manual_seed(0)
    model = archs.build("edsr-l", 2, **TINY_ARCHS["edsr-l"])
    before = {k: v.clone() for k, v in model.state_dict().items()}
    optimizer = torch.optim.Adam(model.parameters())
    x = torch.rand(1, 3, 8, 8)
    modules = len(list(model.modules()))
    flag = Flag(modules // 2 if during == "forward" else modules + 2)  # forward hooks come first
    with pytest.raises(Interrupted), interruptible([model], flag.is_set):
        model(x).abs().mean().backward()
        optimizer.step()
    assert flag.asked == flag.limit  # raised at once
    assert all(torch.equal(v, before[k]) for k, v in model.state_dict().items())
    always = Flag(0)
    model(x).abs().mean().backward()  # the hooks are gone
    assert always.asked == 0


def test_stop_ends_a_live_run_within_its_step() -> None:
    def live(flag: Flag):
        options = dict(arch_kwargs=TINY, update_seconds=0.0, device="cpu", start=analysis.RANDOM_INIT)
        return list(analysis.train_live("swinir-light", 2, 0.9, 0.95, 3, 2, 8, 2, stop=flag, **options))

    counting = Flag()
    assert len(live(counting)) == 3
    per_iteration = counting.asked // 3
    updates = live(Flag(per_iteration + per_iteration // 2))  # mid-way through the second step
    status = updates[-1][-1]
    assert "**Stopped at iteration 1** (1 done; you pressed Stop)" in status
    assert len(updates) == 2
