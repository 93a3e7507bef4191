"""benchmarks/step_ops.py: counts operator calls exactly, and a step's count does not grow with the batch."""

from __future__ import annotations

import torch
from common import load_benchmark


def test_count_ops_counts_each_operator_call() -> None:
    count_ops = load_benchmark("step_ops").count_ops
    a, b = torch.ones(3), torch.ones(3)
    assert count_ops(lambda: a + b) == 1
    assert count_ops(lambda: (a * b).sum()) == 2


def test_a_step_makes_as_many_calls_at_batch_2_as_at_4() -> None:
    """What the docs rely on: at a small batch the calls, not the pixels, set an eager GPU step's pace."""
    step_ops = load_benchmark("step_ops").step_ops
    one, two = step_ops("swinir-light", 2, 2, 8), step_ops("swinir-light", 2, 4, 8)
    assert one == two
    assert 0 < one[0] < one[1]
