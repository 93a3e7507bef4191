"""benchmarks/pruner_real_steps.py: the steps it times from a run's saved state are the run's own steps."""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import torch
from common import TINY_SWINIR, load_benchmark

from iss.train import TrainConfig, train


def test_steps_from_a_saved_state_train_bit_for_bit_as_the_run(
    tmp_path: Path, data_dir: Path, capsys
) -> None:
    """Resumed from the state saved at iteration 3, its 3 steps (pruning, then fine-tuning, with the
    telemetry recorded) end on the weights and masks the uninterrupted run ended on."""
    config = TrainConfig(
        arch="swinir-light", scale=2, method="iss-p", ratio=0.5, iters=6, prune_iters=4, batch=2, patch=8,
        train_data=(str(data_dir / "train" / "a"),), out=str(tmp_path / "run"), save_every=3, threads=1,
        arch_kwargs=TINY_SWINIR,
    )  # fmt: skip
    threads = torch.get_num_threads()
    try:
        for event in train(config):
            if event.iteration == 3:
                shutil.copy(tmp_path / "run" / "state.pt", tmp_path / "state3.pt")
        digest = hashlib.sha256()
        for tensor in [*event.model.state_dict().values(), *event.trainer.pruner.masks.values()]:
            digest.update(tensor.contiguous().numpy().tobytes())
        steps = load_benchmark("pruner_real_steps").main
        assert steps([str(tmp_path / "state3.pt"), "--steps", "3", "--telemetry"]) == 0
    finally:
        torch.set_num_threads(threads)
    line = capsys.readouterr().out.strip().splitlines()[-1]
    assert line.startswith("swinir-light x2 iss-p from iteration 3, 3 steps after 0, eager fp32, 1 thread(s)")
    assert "telemetry" in line and line.endswith(f"weights+masks sha256 {digest.hexdigest()[:16]}")
