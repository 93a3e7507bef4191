"""Trainer: LR schedule, exact resume, NaN stop, checkpoint output, two-process torchrun."""

from __future__ import annotations

import dataclasses
import itertools
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import time
import types
from pathlib import Path

import numpy as np
import pytest
import torch
from common import TINY_ARCHS, TINY_SWINIR, NoHostSync
from PIL import Image
from torch import nn

from iss.train import NonFiniteLossError, Trainer
from iss.train import cli as train_cli
from iss.train import loop as train_mod
from iss.train.config import TrainConfig


class _StandInPruner:
    """IHT-like stand-in for the Pruner contract (used only while iss.pruning is not there)."""

    def __init__(self, model: nn.Module, ratio: float, prune_iters: int = 0, **options) -> None:
        self.layers = {f"{n}.weight": m.weight for n, m in model.named_modules() if isinstance(m, nn.Conv2d)}
        self.ratio, self.prune_iters, self.iteration, self.callbacks = ratio, prune_iters, 0, []
        self.masks = {n: self._select(w) for n, w in self.layers.items()}

    @property
    def stage(self) -> str:
        return "prune" if self.iteration < self.prune_iters else "finetune"

    def _select(self, w: torch.Tensor) -> torch.Tensor:
        k = math.ceil(self.ratio * w.numel())
        return w.detach().abs() > w.detach().abs().flatten().kthvalue(k).values

    def before_step(self) -> None:
        pass

    @torch.no_grad()
    def step(self) -> None:
        self.iteration += 1
        for name, w in self.layers.items():
            if self.iteration <= self.prune_iters:
                self.masks[name] = self._select(w)
            w.mul_(self.masks[name])
        for fn in self.callbacks:
            fn(types.SimpleNamespace(iteration=self.iteration, flips_permille_total=0.0, kept={}))

    def add_callback(self, fn) -> None:
        self.callbacks.append(fn)

    def state_dict(self) -> dict:
        return {"iteration": self.iteration, "masks": dict(self.masks)}

    def load_state_dict(self, state: dict) -> None:
        self.iteration, self.masks = state["iteration"], dict(state["masks"])


@pytest.fixture
def tiny_run(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> dict:
    """A private LR cache; the tiny SwinIR's arch kwargs."""
    monkeypatch.setenv("ISS_CACHE_DIR", str(tmp_path / "cache"))
    return TINY_SWINIR


def _config(tmp_path: Path, arch_kwargs: dict, **overrides) -> TrainConfig:
    folder = tmp_path / "train"
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    for i in range(3):
        Image.fromarray(rng.integers(0, 256, (40, 48, 3), dtype=np.uint8)).save(folder / f"{i}.png")
    fields = dict(
        arch="swinir-light", scale=2, method="iht", ratio=0.5, iters=6, prune_iters=3, batch=2, patch=8,
        train_data=(str(folder),), out=str(tmp_path / "run"), save_every=3, log_every=1, threads=1,
        arch_kwargs=arch_kwargs, milestones=(2,),
    )  # fmt: skip
    return TrainConfig(**{**fields, **overrides})


def test_lr_constant_while_pruning_then_halves_from_finetune_start() -> None:
    model = nn.Conv2d(3, 3, 1)
    pruner = _StandInPruner(model, 0.5, prune_iters=3)
    trainer = Trainer(model, pruner, TrainConfig(iters=10, prune_iters=3, lr=1e-3, milestones=(2, 4)))
    lrs = []
    for _ in range(8):
        lrs.append(trainer.lr)
        trainer.step(torch.rand(1, 3, 4, 4), torch.rand(1, 3, 4, 4))
    assert lrs == [1e-3] * 5 + [5e-4] * 2 + [2.5e-4]


def test_cosine_schedule_warms_up_then_decays_to_zero_across_both_stages() -> None:
    model = nn.Conv2d(3, 3, 1)
    pruner = _StandInPruner(model, 0.5, prune_iters=3)
    config = TrainConfig(iters=10, prune_iters=3, lr=1e-3, schedule="cosine", warmup=2)
    trainer = Trainer(model, pruner, config)
    lrs = []
    for _ in range(10):
        lrs.append(trainer.lr)
        trainer.step(torch.rand(1, 3, 4, 4), torch.rand(1, 3, 4, 4))
    assert lrs[:3] == pytest.approx([5e-4, 1e-3, 1e-3])  # linear warm-up, then the peak
    assert lrs[6] == pytest.approx(0.5e-3)  # half-way through the cosine (iteration 6 of 2..10)
    assert all(a > b for a, b in itertools.pairwise(lrs[2:])) and lrs[-1] < 0.05e-3
    with pytest.raises(ValueError, match="schedule"):
        TrainConfig(schedule="linear")


def test_adam_is_the_fused_kernel_on_the_cpu_and_steps_like_the_multi_tensor_one() -> None:
    """Fused Adam makes CPU training steps about 1.1x faster (docs/training.md); it must be the same Adam."""
    torch.manual_seed(0)
    model = nn.Conv2d(3, 3, 3)
    reference = torch.optim.Adam([p.detach().clone().requires_grad_() for p in model.parameters()],
                                 lr=1e-3, betas=(0.9, 0.99), foreach=True)  # fmt: skip
    config = TrainConfig(iters=5, prune_iters=1, lr=1e-3)
    trainer = Trainer(model, _StandInPruner(model, 0.5, prune_iters=1), config)
    assert trainer.optimizer.defaults["fused"]
    for _ in range(3):
        for ours, theirs in zip(model.parameters(), reference.param_groups[0]["params"], strict=True):
            ours.grad = torch.randn_like(ours)
            theirs.grad = ours.grad.clone()
        trainer.optimizer.step()
        reference.step()
    for ours, theirs in zip(model.parameters(), reference.param_groups[0]["params"], strict=True):
        torch.testing.assert_close(ours, theirs, rtol=1e-6, atol=1e-7)


def test_step_runs_hooks_in_contract_order() -> None:
    model = nn.Conv2d(3, 3, 1)
    calls = []

    class Spy(_StandInPruner):
        def before_step(self) -> None:
            calls.append(("before", model.weight.grad is not None))

        def step(self) -> None:
            calls.append(("step", None))
            super().step()

    trainer = Trainer(model, Spy(model, 0.5, prune_iters=1), TrainConfig(iters=2, prune_iters=1))
    loss = trainer.step(torch.rand(1, 3, 4, 4), torch.rand(1, 3, 4, 4))
    assert calls == [("before", True), ("step", None)] and loss > 0


def test_nan_loss_stops_before_any_update() -> None:
    model = nn.Conv2d(3, 3, 1)
    trainer = Trainer(model, _StandInPruner(model, 0.5, prune_iters=1), TrainConfig(iters=2, prune_iters=1))
    before = model.weight.detach().clone()
    with pytest.raises(NonFiniteLossError, match=r"loss is nan"):
        trainer.step(torch.full((1, 3, 4, 4), float("nan")), torch.rand(1, 3, 4, 4))
    assert torch.equal(model.weight, before)


def test_batches_depend_only_on_rank_and_iteration() -> None:
    a = list(train_mod._IterationBatches(4, rank=0, world=2, start=0, end=3))
    assert a == [[0, 1, 2, 3], [8, 9, 10, 11], [16, 17, 18, 19]]
    assert list(train_mod._IterationBatches(4, rank=0, world=2, start=1, end=3)) == a[1:]
    assert list(train_mod._IterationBatches(4, rank=1, world=2, start=0, end=1)) == [[4, 5, 6, 7]]


def _final_state(out: Path) -> dict:
    return torch.load(out / "state.pt", weights_only=True)


def test_resume_equals_uninterrupted_run_bit_for_bit(tiny_run: dict, tmp_path: Path) -> None:
    straight = _config(tmp_path / "a", tiny_run)
    events = list(train_mod.train(straight))
    assert [e.iteration for e in events] == list(range(1, 7))
    assert [e.stage for e in events] == ["prune"] * 2 + ["finetune"] * 4

    killed = _config(tmp_path / "b", tiny_run)
    for event in train_mod.train(killed):
        if event.iteration == 4:  # state.pt was written at iteration 3; iteration 4 is lost as in a kill
            break
    assert _final_state(Path(killed.out))["iteration"] == 3
    log = Path(killed.out) / "log.jsonl"
    with log.open("a") as f:
        f.write('{"iteration": 4, "loss": 0.0')  # the kill cut the last record short
    with pytest.raises(ValueError, match="--resume"):
        next(train_mod.train(killed))
    resumed = list(train_mod.train(killed, resume=True))
    assert [e.iteration for e in resumed] == [4, 5, 6]
    assert all(isinstance(json.loads(line), dict) for line in log.read_text().splitlines())
    assert [e.loss for e in resumed] == [e.loss for e in events[3:]]

    a, b = _final_state(Path(straight.out)), _final_state(Path(killed.out))
    assert a["model"].keys() == b["model"].keys()
    for name in a["model"]:
        assert torch.equal(a["model"][name], b["model"][name]), name
    _assert_identical(a["pruner"], b["pruner"])
    _assert_identical(a["trainer"], b["trainer"])


def _assert_identical(a: object, b: object) -> None:
    """Nested dicts/lists of tensors and plain values are equal, tensors bit for bit."""
    if isinstance(a, torch.Tensor):
        assert isinstance(b, torch.Tensor) and a.dtype == b.dtype and torch.equal(a, b)
    elif isinstance(a, dict):
        assert a.keys() == b.keys()
        for key in a:
            _assert_identical(a[key], b[key])
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b)
        for x, y in zip(a, b, strict=True):
            _assert_identical(x, y)
    else:
        assert a == b


def test_a_stopped_run_pauses_and_resume_continues_exactly(tiny_run: dict, tmp_path: Path) -> None:
    """A run told to stop between two saves keeps its exact state; resuming finishes it as if it had never
    stopped, and the log holds every iteration once."""
    straight = _config(tmp_path / "a", tiny_run)
    list(train_mod.train(straight))

    paused = _config(tmp_path / "b", tiny_run)
    asked = iter(range(1000))
    events = list(train_mod.train(paused, stop=lambda: next(asked) >= 2))  # yes before iteration 3
    assert [e.iteration for e in events] == [1, 2]
    assert _final_state(Path(paused.out))["iteration"] == 2  # saved on pause, between saves (every 3)
    assert [e.iteration for e in train_mod.train(paused, resume=True)] == [3, 4, 5, 6]

    a, b = _final_state(Path(straight.out)), _final_state(Path(paused.out))
    _assert_identical(a["model"], b["model"])
    _assert_identical(a["pruner"], b["pruner"])
    _assert_identical(a["trainer"], b["trainer"])
    records = [json.loads(line) for line in (Path(paused.out) / "log.jsonl").read_text().splitlines()]
    assert [r["event"] for r in records if "event" in r] == ["start", "paused", "resume"]
    logged = [r["iteration"] for r in records if "loss" in r]
    assert logged == [1, 2, 3, 4, 5, 6]


def test_resume_after_a_kill_drops_log_lines_past_the_saved_state(tiny_run: dict, tmp_path: Path) -> None:
    config = _config(tmp_path, tiny_run)
    for event in train_mod.train(config):
        if event.iteration == 5:  # logged 4 and 5, saved at 3: a kill here loses 4 and 5
            break
    list(train_mod.train(config, resume=True))
    records = [json.loads(line) for line in (Path(config.out) / "log.jsonl").read_text().splitlines()]
    assert [r["iteration"] for r in records if "loss" in r] == [1, 2, 3, 4, 5, 6]


def test_batches_cut_on_the_device_equal_the_dataloader(tiny_run: dict, tmp_path: Path) -> None:
    config = _config(tmp_path, tiny_run, iters=4)
    single = train_mod._Dist()
    loader = list(train_mod._batches(config, single, torch.device("cpu"), 1))
    on_device = dataclasses.replace(config, data_on_device=True)
    gathered = list(train_mod._batches(on_device, single, torch.device("cpu"), 1))
    assert len(loader) == len(gathered) == 3
    for (a, b), (c, d) in zip(loader, gathered, strict=True):
        assert torch.equal(a, c) and torch.equal(b, d)


def test_channels_last_convnet_trains_prunes_and_saves(tmp_path: Path) -> None:
    """What ``train`` does for EDSR on CUDA, on the CPU: channels-last weights and inputs give the same
    steps as the default layout, the pruner's masks hold, and the checkpoint loads back equal."""
    from iss import archs, checkpoint, pruning

    config = TrainConfig(arch="edsr-l", scale=2, method="iss-p", ratio=0.5, iters=4, prune_iters=2)
    runs = []
    for layout in (torch.contiguous_format, torch.channels_last):
        torch.manual_seed(0)
        model = archs.build("edsr-l", 2, num_feat=8, num_block=2).to(memory_format=layout)
        pruner = pruning.build("iss-p", model, 0.5, prune_iters=2)
        trainer = Trainer(model, pruner, config)
        trainer.channels_last = layout == torch.channels_last
        torch.manual_seed(1)
        for _ in range(4):
            trainer.step(torch.rand(2, 3, 8, 8), torch.rand(2, 3, 16, 16))
        runs.append((model, pruner))
    (dense, dense_pruner), (nhwc, nhwc_pruner) = runs
    assert nhwc.body[0].conv1.weight.is_contiguous(memory_format=torch.channels_last)
    for name, mask in dense_pruner.masks.items():
        assert torch.equal(mask, nhwc_pruner.masks[name]), name
    for a, b in zip(dense.parameters(), nhwc.parameters(), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6)
    path = checkpoint.save(nhwc, tmp_path / "m.safetensors", {"arch": "edsr-l", "scale": 2,
                           "arch_kwargs": {"num_feat": 8, "num_block": 2}}, nhwc_pruner.masks)  # fmt: skip
    loaded, _ = checkpoint.load(path)
    for a, b in zip(loaded.parameters(), nhwc.parameters(), strict=True):
        assert torch.equal(a, b)


@pytest.mark.parametrize("arch", ["swinir-light", "edsr-l", "cat-r"])
def test_a_gpu_style_step_never_waits_for_the_device(arch: str) -> None:
    """What ``train`` runs on CUDA between two checks: forward, L1, backward, the sync-free pruner, fused
    Adam and the telemetry recorder, with no call that reads device data on the host (CPU stand-in for
    ``torch.cuda.set_sync_debug_mode("error")``)."""
    from iss import archs, pruning

    model = archs.build(arch, 2, **TINY_ARCHS[arch])
    pruner = pruning.build("iss-p", model, 0.9, prune_iters=3, sync_free=True)
    recorder = pruning.TelemetryRecorder(pruner)
    trainer = Trainer(model, pruner, TrainConfig(iters=6, prune_iters=3))
    trainer.optimizer = torch.optim.Adam(model.parameters(), lr=2e-4, fused=True)  # as on CUDA
    lr, hr = torch.rand(2, 3, 16, 16), torch.rand(2, 3, 32, 32)
    trainer.step(lr, hr, check=False)  # optimizer state made
    with NoHostSync():
        for _ in range(4):  # through the freeze at K_p = 3
            recorder.record(trainer.step(lr, hr, check=False))
    assert pruner.stage == "finetune" and len(recorder.flush()) == 4


def test_resume_refuses_a_changed_config(tiny_run: dict, tmp_path: Path) -> None:
    config = _config(tmp_path, tiny_run, iters=3)
    list(train_mod.train(config))
    with pytest.raises(ValueError, match="ratio"):
        next(train_mod.train(dataclasses.replace(config, ratio=0.7, iters=6), resume=True))


def test_resume_follows_the_training_folders_by_name(tiny_run: dict, tmp_path: Path) -> None:
    """A state trained on a packed copy of the images (a GPU round's) goes on from the same folder elsewhere,
    but not from a differently named one."""
    config = _config(tmp_path, tiny_run, iters=3)
    list(train_mod.train(config))
    moved = tmp_path / "elsewhere" / "train"
    shutil.copytree(config.train_data[0], moved)
    moved_config = dataclasses.replace(config, iters=4, train_data=(str(moved),))
    assert [e.iteration for e in train_mod.train(moved_config, resume=True)] == [4]
    renamed = shutil.copytree(moved, tmp_path / "other")
    with pytest.raises(ValueError, match="train_data"):
        next(train_mod.train(dataclasses.replace(config, iters=5, train_data=(str(renamed),)), resume=True))


@pytest.mark.parametrize("damage", ["truncated", "foreign"])
def test_resume_from_a_damaged_state_is_one_line(tiny_run: dict, tmp_path: Path, damage: str) -> None:
    """``--resume`` from a truncated or foreign ``state.pt`` says so in one line (exit 2)."""
    config = _config(tmp_path, tiny_run, iters=3)
    list(train_mod.train(config))
    state = Path(config.out) / "state.pt"
    if damage == "truncated":
        state.write_bytes(state.read_bytes()[:200])
    else:
        torch.save({"weights": torch.zeros(2)}, state)
    with pytest.raises(ValueError, match=r"cannot resume: .*state\.pt is not a readable training state"):
        next(train_mod.train(dataclasses.replace(config, iters=6), resume=True))


def test_train_writes_log_and_sparse_checkpoint(tiny_run: dict, tmp_path: Path) -> None:
    from iss import checkpoint

    config = _config(tmp_path, tiny_run)
    events = list(train_mod.train(config))
    path = events[-1].checkpoint
    assert path == Path(config.out) / "model.safetensors"
    records = [json.loads(line) for line in (Path(config.out) / "log.jsonl").read_text().splitlines()]
    assert records[0]["event"] == "start" and records[-1]["iteration"] == 6
    assert all(np.isfinite(r["loss"]) for r in records[1:])
    meta = checkpoint.read_meta(path)
    assert meta["method"] == "iht" and meta["iterations"] == 6 and meta["budget"]["prune_iters"] == 3
    model, _ = checkpoint.load(path)
    trained = _final_state(Path(config.out))["model"]
    for name, tensor in model.state_dict().items():
        assert torch.equal(tensor, trained[name]), name
    for module in model.modules():
        if isinstance(module, (nn.Conv2d, nn.Linear)):
            assert int((module.weight == 0).sum()) >= math.ceil(config.ratio * module.weight.numel())


def test_nan_during_train_keeps_last_good_state(tiny_run: dict, tmp_path: Path, monkeypatch) -> None:
    config = _config(tmp_path, tiny_run)
    real_step = Trainer.step

    def poisoned(self, lr, hr, **options):
        if self.pruner.iteration == 4:
            lr = lr * float("nan")
        return real_step(self, lr, hr, **options)

    monkeypatch.setattr(Trainer, "step", poisoned)
    with pytest.raises(NonFiniteLossError):
        list(train_mod.train(config))
    assert _final_state(Path(config.out))["iteration"] == 3
    last = json.loads((Path(config.out) / "log.jsonl").read_text().splitlines()[-1])
    assert last["event"] == "stopped" and "nan" in last["reason"]


@pytest.mark.slow
def test_torchrun_two_processes_gloo(tmp_path: Path) -> None:
    """``torchrun --nproc_per_node 2`` on CPU (gloo): trains, and both ranks end with identical masks."""
    config = _config(tmp_path, TINY_SWINIR)
    env = {**os.environ, "ISS_CACHE_DIR": str(tmp_path / "cache"), "OMP_NUM_THREADS": "1"}
    command = [
        sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
        "-m", "iss", "train", "--arch", "swinir-light", "--scale", "2", "--method", "iss-p", "--ratio", "0.5",
        "--iters", "4", "--prune-iters", "2", "--batch", "2", "--patch", "8", "--train-data",
        config.train_data[0], "--out", config.out, "--arch-kwargs", json.dumps(TINY_SWINIR), "--threads", "1",
        "--mask-check-every", "1", "--no-progress",
    ]  # fmt: skip
    process = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               start_new_session=True)  # fmt: skip
    try:
        _, stderr = process.communicate(timeout=300)
    finally:
        if process.poll() is None:  # a hung run: end the launcher and its workers, not just the launcher
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    assert process.returncode == 0, stderr[-3000:]
    records = [json.loads(line) for line in (Path(config.out) / "log.jsonl").read_text().splitlines()]
    agree = [r for r in records if r.get("event") == "masks_agree"]
    assert agree and agree[-1]["ranks"] == 2 and agree[-1]["iteration"] == 4
    assert (Path(config.out) / "model.safetensors").is_file()
    assert [r.get("event") for r in records].count("start") == 1  # only rank 0 logs


def test_cli_preset_then_explicit_flags() -> None:
    import argparse

    parser = argparse.ArgumentParser()
    train_cli.add_arguments(parser)
    args = parser.parse_args(
        ["--preset", "cpu-short", "--iters", "400", "--batch", "2", "--train-data", "a,b", "--out", "o",
         "--arch-kwargs", '{"embed_dim": 12}', "--milestones", ""]
    )  # fmt: skip
    config = train_cli.config_from_args(args)
    assert (config.iters, config.prune_iters, config.batch, config.patch) == (400, 200, 2, 24)
    assert (
        config.train_data == ("a", "b")
        and config.arch_kwargs == {"embed_dim": 12}
        and config.milestones == ()
    )
    with pytest.raises(ValueError, match="--arch-kwargs"):
        train_cli.config_from_args(
            parser.parse_args(["--train-data", "a", "--out", "o", "--arch-kwargs", "[1]"])
        )


def test_cli_train_command(tiny_run: dict, tmp_path: Path) -> None:
    from iss.cli import main

    config = _config(tmp_path, tiny_run)
    argv = [
        "train", "--arch", "swinir-light", "--scale", "2", "--method", "iss-p", "--ratio", "0.5",
        "--iters", "2", "--prune-iters", "1", "--batch", "2", "--patch", "8",
        "--train-data", config.train_data[0], "--out", config.out, "--arch-kwargs", json.dumps(tiny_run),
        "--threads", "1", "--no-progress",
    ]  # fmt: skip
    assert main(argv) == 0
    assert (Path(config.out) / "model.safetensors").is_file()
    assert main(argv) == 2  # an existing run is not overwritten without --resume


@pytest.mark.slow
def test_periodic_validation_on_set5(tiny_run: dict, benchmarks: Path, tmp_path: Path) -> None:
    set5 = str(benchmarks / "Set5")
    config = _config(tmp_path, tiny_run, iters=2, prune_iters=1, val_every=2, val_data=set5)
    events = list(train_mod.train(config))
    assert events[0].val_psnr is None and 5.0 < events[1].val_psnr < 40.0
    last = json.loads((Path(config.out) / "log.jsonl").read_text().splitlines()[-1])
    assert last["val_psnr"] == events[1].val_psnr


def test_fastest_mode_takes_bf16_or_compile_only_where_they_pay() -> None:
    speeds = {"eager fp32": 6.0, "eager bf16": 9.0, "compiled fp32": 6.5, "compiled bf16": 12.0}
    assert train_mod.fastest_mode(speeds) == {"amp": True, "compile": True}
    assert train_mod.fastest_mode(speeds | {"compiled bf16": 6.4, "eager bf16": 6.5}) == {
        "amp": False, "compile": False,
    }  # fmt: skip
    assert train_mod.fastest_mode(speeds | {"compiled bf16": 7.0}) == {"amp": True, "compile": False}


def test_mode_speeds_are_measured_once_per_machine_and_shape(
    tiny_run: dict, tmp_path: Path, monkeypatch
) -> None:
    monkeypatch.setenv("ISS_CACHE_DIR", str(tmp_path / "cache"))
    calls = []

    def measure(config: TrainConfig, seconds: float) -> tuple[float, float]:
        calls.append(train_mod.precision(config))
        if calls[-1] == "compiled bf16" and calls.count("compiled bf16") == 1:
            return 5.0, 0.1  # another job was compiling beside this probe (a burst: quiet on average)
        return {"eager fp32": 6.0, "eager bf16": 9.0, "compiled bf16": 11.0}.get(calls[-1], 5.0), 0.0

    monkeypatch.setattr(train_mod, "_steps_per_second", measure)
    config = _config(tmp_path, tiny_run)
    speeds = train_mod.mode_speeds(config)
    order = ["eager fp32", "eager bf16", "compiled fp32", "compiled bf16"]
    assert calls == order + order  # each mode's second probe three others after its first
    assert speeds == {"eager fp32": 6.0, "eager bf16": 9.0, "compiled fp32": 5.0, "compiled bf16": 11.0}
    assert train_mod.fastest_mode(speeds) == {"amp": True, "compile": True}  # not fooled by the burst
    assert train_mod.mode_speeds(config) == speeds and len(calls) == 8  # cached
    assert train_mod.mode_speeds(dataclasses.replace(config, method="l1")) == speeds and len(calls) == 8
    train_mod.mode_speeds(dataclasses.replace(config, batch=3))
    assert len(calls) == 16  # another shape is measured again
    assert (
        "AMD" in train_mod.cpu_signature()
        or "Intel" in train_mod.cpu_signature()
        or train_mod.cpu_signature()
    )


def test_a_run_stopped_while_measuring_its_modes_ends_at_once(
    tiny_run: dict, tmp_path: Path, monkeypatch
) -> None:
    """SIGTERM during the probes (minutes for CAT-R) stops the run before the next probe, caching nothing."""
    monkeypatch.setenv("ISS_CACHE_DIR", str(tmp_path / "cache"))
    calls = []
    monkeypatch.setattr(train_mod, "_steps_per_second", lambda config, seconds: calls.append(1) or (5.0, 0.0))
    config = _config(tmp_path, tiny_run, pick_mode=True, iters=3)
    assert list(train_mod.train(config, stop=lambda: len(calls) == 2)) == []
    assert len(calls) == 2 and not (Path(config.out) / "state.pt").exists()
    assert not (tmp_path / "cache" / "train_modes.json").exists()
    assert train_mod.mode_speeds(config)["eager fp32"] == 5.0
    assert len(calls) == 10  # measured in full next time


def test_probes_taken_beside_other_work_pick_this_run_s_mode_but_are_not_cached(
    tiny_run: dict, tmp_path: Path, monkeypatch
) -> None:
    """A probe beside another training once picked fp32 where bf16 was 1.7x faster, for every later run."""
    monkeypatch.setenv("ISS_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(train_mod, "_usable_cores", lambda: {0, 1})
    monkeypatch.setattr(torch, "get_num_threads", lambda: 2)
    busy = {"eager fp32": (4.0, 0.0), "eager bf16": (3.0, 0.9), "compiled fp32": (2.0, 0.0)}
    calls = []

    def measure(config: TrainConfig, seconds: float) -> tuple[float, float]:
        calls.append(train_mod.precision(config))
        return busy.get(calls[-1], (2.0, 0.0))

    monkeypatch.setattr(train_mod, "_steps_per_second", measure)
    config = _config(tmp_path, tiny_run)
    assert train_mod.fastest_mode(train_mod.mode_speeds(config)) == {"amp": False, "compile": False}
    assert not (tmp_path / "cache" / "train_modes.json").exists() and len(calls) == 8
    busy = {"eager fp32": (4.0, 0.0), "eager bf16": (7.0, 0.0)}  # the machine is quiet again
    assert train_mod.fastest_mode(train_mod.mode_speeds(config)) == {"amp": True, "compile": False}
    assert train_mod.mode_speeds(config)["eager bf16"] == 7.0 and len(calls) == 16  # measured, then cached
    monkeypatch.setattr(torch, "get_num_threads", lambda: 1)
    busy = {"eager fp32": (4.0, 0.0), "eager bf16": (7.0, 1.0)}  # one thread beside one on the other core
    train_mod.mode_speeds(dataclasses.replace(config, batch=3))
    assert train_mod.mode_speeds(dataclasses.replace(config, batch=3)) and len(calls) == 24  # cached


def test_a_real_probe_times_steps_and_leaves_the_rng_alone(tiny_run: dict, tmp_path: Path) -> None:
    config = _config(tmp_path, tiny_run)
    torch.manual_seed(7)
    expected = torch.rand(3)
    torch.manual_seed(7)
    rate, _ = train_mod._steps_per_second(dataclasses.replace(config, amp=True), seconds=0.05)
    assert rate > 0
    assert torch.equal(torch.rand(3), expected)


def test_a_real_probe_sees_another_process_busy_on_its_cores(tiny_run: dict, tmp_path: Path) -> None:
    if not Path("/proc/stat").is_file():
        pytest.skip("needs /proc/stat")
    spin = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        time.sleep(0.3)
        _, others = train_mod._steps_per_second(_config(tmp_path, tiny_run), seconds=1.0)
    finally:
        spin.kill()
        spin.wait()
    assert others > 0.5  # cores' worth of CPU time, not counting the probe's own


def test_pick_mode_trains_with_the_fastest_and_records_it(
    tiny_run: dict, tmp_path: Path, monkeypatch
) -> None:
    from iss import checkpoint

    speeds = {"eager fp32": 6.0, "eager bf16": 9.0, "compiled fp32": 6.1, "compiled bf16": 8.0}
    monkeypatch.setattr(train_mod, "mode_speeds", lambda config, stop: speeds)
    config = _config(tmp_path, tiny_run, pick_mode=True, iters=3)
    events = list(train_mod.train(config))
    start = json.loads((Path(config.out) / "log.jsonl").read_text().splitlines()[0])
    assert start["config"]["amp"] is True and start["config"]["compile"] is False
    assert start["mode_speeds"] == speeds
    assert checkpoint.read_meta(events[-1].checkpoint)["budget"]["precision"] == "eager bf16"
    monkeypatch.setattr(train_mod, "mode_speeds", lambda config, stop: speeds | {"eager bf16": 1.0})
    resumed = list(train_mod.train(dataclasses.replace(config, iters=5), resume=True))  # another machine
    assert resumed[-1].iteration == 5
    budget = checkpoint.read_meta(resumed[-1].checkpoint)["budget"]
    assert budget["precision"] == "eager bf16 to 3, then compiled bf16"  # the budget says how it was trained
