"""``python -m iss train`` as a container stops it and a careless user resumes it: SIGTERM saves the state
and says where; ``--resume`` finishes a run killed between its last state and its checkpoint."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from common import ROOT, TINY_SWINIR
from PIL import Image

from iss import checkpoint


def _command(tmp_path: Path, iters: int, *extra: str) -> list[str]:
    folder = tmp_path / "train"
    if not folder.is_dir():
        folder.mkdir(parents=True)
        rng = np.random.default_rng(0)
        for i in range(3):
            Image.fromarray(rng.integers(0, 256, (40, 48, 3), dtype=np.uint8)).save(folder / f"{i}.png")
    return [
        sys.executable, "-m", "iss", "train", "--arch", "swinir-light", "--scale", "2", "--method", "iht",
        "--ratio", "0.5", "--iters", str(iters), "--prune-iters", "3", "--batch", "2", "--patch", "8",
        "--milestones", "2", "--save-every", "3", "--log-every", "1", "--threads", "1", "--no-progress",
        "--train-data", str(folder), "--out", str(tmp_path / "run"), "--arch-kwargs", json.dumps(TINY_SWINIR),
        *extra,
    ]  # fmt: skip


def _run(command: list[str], tmp_path: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "ISS_CACHE_DIR": str(tmp_path / "cache")}
    return subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)


def test_resume_writes_the_checkpoint_a_kill_cut_off(tmp_path: Path) -> None:
    assert _run(_command(tmp_path, 6), tmp_path).returncode == 0
    model = tmp_path / "run" / "model.safetensors"
    whole = checkpoint.load(model)[0].state_dict()
    model.unlink()  # killed after its last state.pt, before the checkpoint
    resumed = _run(_command(tmp_path, 6, "--resume"), tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    assert f"saved {model}" in resumed.stdout + resumed.stderr
    for name, tensor in checkpoint.load(model)[0].state_dict().items():
        assert torch.equal(tensor, whole[name]), name  # the checkpoint the uninterrupted run wrote

    again = _run(_command(tmp_path, 6, "--resume"), tmp_path)
    assert again.returncode == 0
    assert again.stderr.strip().splitlines() == [f"nothing to train: {model} is already written"]
    past = _run(_command(tmp_path, 4, "--resume"), tmp_path)
    assert past.returncode == 2
    assert past.stderr.strip().splitlines() == [
        "error: cannot resume: the state is at iteration 6, past --iters 4; pass --iters of at least that "
        "to train on"
    ]


def test_sigterm_saves_the_state_and_says_where(tmp_path: Path) -> None:
    env = {**os.environ, "ISS_CACHE_DIR": str(tmp_path / "cache")}
    command = _command(tmp_path, 100_000)
    process = subprocess.Popen(
        command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    log = tmp_path / "run" / "log.jsonl"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and process.poll() is None:
        if log.is_file() and sum("loss" in line for line in log.read_text().splitlines()) >= 4:
            break
        time.sleep(0.2)
    process.send_signal(signal.SIGTERM)  # between two saves (every 3 iterations), mid-run
    try:
        stderr = process.communicate(timeout=60)[1]
    except subprocess.TimeoutExpired:
        process.kill()
        pytest.fail("SIGTERM did not end the run within 60 s")
    assert process.returncode == 128 + signal.SIGTERM, stderr
    state = tmp_path / "run" / "state.pt"
    line = stderr.strip().splitlines()[-1]
    saved = torch.load(state, weights_only=True)["iteration"]
    assert (
        line == f"stopped by SIGTERM: state at iteration {saved:,} saved in {state}; continue with --resume"
    )
    logged = [json.loads(r) for r in log.read_text().splitlines()]
    assert logged[-1]["event"] == "paused" and logged[-1]["iteration"] == saved

    finished = _run(_command(tmp_path, saved + 2, "--resume"), tmp_path)  # only --iters may change
    assert finished.returncode == 0, finished.stderr
    assert (tmp_path / "run" / "model.safetensors").is_file()
