"""Train a sparse SR network from random initialisation with one pruning method (``python -m iss train``).

The loop follows the official ISS-P code (see the project notes on Jiamian-Wang/Iterative-Soft-Shrinkage-SR):
Adam (0.9, 0.99), L1 loss, a constant learning rate during the pruning stage (the first ``prune_iters`` = K_p
iterations), then MultiStep halving with milestones counted from the start of fine-tuning; the same optimizer
(and its Adam moments) continues from pruning into fine-tuning.

Determinism: the model is built and the pruner created right after seeding torch/numpy/python with ``seed``,
so every method starts from the same initial weights. The training batches are a pure function of
``(seed, rank, iteration)`` (see ``_IterationBatches``): every method sees the same patches in the same
order, and a resumed run sees exactly the batches an uninterrupted one would. ``state.pt`` holds everything
else that changes (model, Adam state, pruner state, RNG states, iteration), so on CPU a resumed run equals
an uninterrupted one bit for bit.

The run is described by ``iss.train.config.TrainConfig`` (fields, presets, the pruner's options).
"""

from __future__ import annotations

import bisect
import contextlib
import dataclasses
import json
import math
import os
import platform
import random
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from itertools import pairwise
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from .config import TrainConfig, pruner_options


class NonFiniteLossError(FloatingPointError):
    """The loss became NaN/inf: training stops, the weights are left as after the last good step."""


class Trainer:
    """One optimisation step at a time (forward, L1, backward, pruner hooks, Adam, LR schedule).

    ``model`` may be a DistributedDataParallel/compiled wrapper; ``pruner`` works on the raw module's weights.
    With the official ``step`` schedule the LR is ``config.lr`` during the pruning stage and
    ``config.lr * gamma ** k`` in fine-tuning, where ``k`` counts the milestones at or below the number of
    fine-tuning steps done (officially the scheduler is not stepped while pruning). The ``cosine`` schedule
    (for short budgets) warms up linearly over ``warmup`` steps, then follows a cosine to 0 at ``iters``,
    across both stages. Adam is the fused kernel (CPU and CUDA).
    """

    def __init__(self, model: nn.Module, pruner: Any, config: TrainConfig) -> None:
        self.model = model
        self.pruner = pruner
        self.config = config
        fused = next(model.parameters()).device.type in ("cpu", "cuda")  # CPU steps 1.1x faster than foreach
        self.optimizer = torch.optim.Adam(model.parameters(), lr=config.lr, betas=config.betas, fused=fused)
        self.finetune_steps = 0
        self.amp = bool(config.amp)
        self.channels_last = False  # set by ``train`` for convnets on CUDA: inputs follow the weights' layout
        self.last_loss: torch.Tensor | None = None

    @property
    def lr(self) -> float:
        """The learning rate the next step uses."""
        config = self.config
        if config.schedule == "cosine":
            done = self.pruner.iteration
            if done < config.warmup:
                return config.lr * (done + 1) / config.warmup
            progress = (done - config.warmup) / max(config.iters - config.warmup, 1)
            return config.lr * 0.5 * (1.0 + math.cos(math.pi * min(progress, 1.0)))
        return config.lr * config.gamma ** bisect.bisect_right(config.milestones, self.finetune_steps)

    def step(self, lr: torch.Tensor, hr: torch.Tensor, *, check: bool = True) -> torch.Tensor:
        """One training step; returns the L1 loss as a 0-dim tensor.

        With ``check`` the loss is read back first and a NaN/inf raises ``NonFiniteLossError`` before any
        update; without it nothing waits for the device, so a GPU can run ahead (``train`` checks every
        ``log_every`` steps and before every save).
        """
        self.model.train()
        for group in self.optimizer.param_groups:
            group["lr"] = self.lr
        self.optimizer.zero_grad(set_to_none=True)
        if self.channels_last:
            lr = lr.contiguous(memory_format=torch.channels_last)
        with torch.autocast(lr.device.type, dtype=torch.bfloat16, enabled=self.amp):
            sr = self.model(lr)
        loss = F.l1_loss(sr.float(), hr)
        if check:
            check_loss(loss, self.pruner.iteration + 1)
        loss.backward()
        finetuning = self.pruner.stage == "finetune"
        self.pruner.before_step()
        self.optimizer.step()
        self.pruner.step()
        self.finetune_steps += finetuning
        self.last_loss = loss.detach()
        return self.last_loss

    def state_dict(self) -> dict[str, Any]:
        return {"optimizer": self.optimizer.state_dict(), "finetune_steps": self.finetune_steps}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.optimizer.load_state_dict(state["optimizer"])
        self.finetune_steps = int(state["finetune_steps"])


def check_loss(loss: torch.Tensor, iteration: int) -> float:
    """The loss as a float (waits for the device); ``NonFiniteLossError`` if it is NaN/inf."""
    value = loss.item()
    if not math.isfinite(value):
        raise NonFiniteLossError(
            f"loss is {value} at iteration {iteration}; stopping (weights left as after the last saved "
            "state). Try a lower --lr or --no-amp."
        )
    return value


@dataclass
class TrainEvent:
    """What ``train`` yields after every iteration.

    ``loss`` and ``stats`` are read back only on checked iterations (every one on the CPU; every
    ``log_every``-th, before saves and at the end on CUDA, so the GPU never waits), else None; ``val_psnr``
    only when it validated at this iteration. ``trainer`` gives the pruner, the optimizer and the loss tensor
    of the step (``trainer.last_loss``) for consumers that record more.
    """

    iteration: int
    loss: float | None
    lr: float
    stage: str
    stats: Any = None  # the pruner's StepStats for this iteration
    val_psnr: float | None = None
    elapsed: float = 0.0  # seconds of training in this process
    checkpoint: Path | None = None  # set on the last event: the final sparse checkpoint
    saved: bool = False  # state.pt was written at this iteration
    trainer: Trainer | None = None
    model: nn.Module | None = None  # the model itself (``trainer.model`` may be a compiled/DDP wrapper)


class _IterationBatches(torch.utils.data.Sampler):
    """Patch indices for iterations ``start+1 .. end``: iteration ``t`` of rank ``r`` takes the ``batch``
    consecutive indices from ``((t - 1) * world + r) * batch``. ``TrainPatches`` draws item ``i`` as a pure
    function of ``(seed, i)``, so batches depend only on ``(seed, rank, iteration)`` and no patch repeats."""

    def __init__(self, batch: int, rank: int, world: int, start: int, end: int) -> None:
        self.batch, self.rank, self.world, self.start, self.end = batch, rank, world, start, end

    def __len__(self) -> int:
        return self.end - self.start

    def __iter__(self) -> Iterator[list[int]]:
        for iteration in range(self.start + 1, self.end + 1):
            first = ((iteration - 1) * self.world + self.rank) * self.batch
            yield list(range(first, first + self.batch))


@contextlib.contextmanager
def _isolated_rng(seed: int) -> Iterator[None]:
    """Seed torch (CPU), numpy and python's RNGs for the block and restore their previous states after it."""
    np_state, py_state = np.random.get_state(), random.getstate()
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        np.random.seed(seed % 2**32)
        random.seed(seed)
        try:
            yield
        finally:
            np.random.set_state(np_state)
            random.setstate(py_state)


def _rng_state() -> dict[str, Any]:
    """torch/numpy/python RNG states as tensors and plain types (loadable with weights_only=True)."""
    kind, keys, pos, has_gauss, gauss = np.random.get_state()
    state = {
        "torch": torch.get_rng_state(),
        "numpy": [kind, torch.from_numpy(keys.astype(np.int64)), int(pos), int(has_gauss), float(gauss)],
        "python": list(random.getstate()),
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def _set_rng_state(state: dict[str, Any]) -> None:
    torch.set_rng_state(state["torch"])
    kind, keys, pos, has_gauss, gauss = state["numpy"]
    np.random.set_state((kind, keys.numpy().astype(np.uint32), pos, has_gauss, gauss))
    version, internal, gauss_next = state["python"]
    random.setstate((version, tuple(internal), gauss_next))
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def _seed_everything(seed: int) -> None:
    torch.manual_seed(seed)
    np.random.seed(seed % 2**32)
    random.seed(seed)


@dataclass
class _Dist:
    """Process-group facts (a single process is rank 0 of 1)."""

    rank: int = 0
    world: int = 1
    local_rank: int = 0

    @property
    def main(self) -> bool:
        return self.rank == 0


def _init_distributed(device_type: str) -> _Dist:
    """Join the torchrun process group when WORLD_SIZE > 1 (gloo on CPU, nccl on CUDA)."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world <= 1:
        return _Dist()
    import torch.distributed as dist

    if not dist.is_initialized():
        dist.init_process_group("nccl" if device_type == "cuda" else "gloo")
    return _Dist(dist.get_rank(), dist.get_world_size(), int(os.environ.get("LOCAL_RANK", "0")))


def _resolve_device(config: TrainConfig, ddp: _Dist) -> torch.device:
    if config.device == "auto":
        return torch.device(f"cuda:{ddp.local_rank}" if torch.cuda.is_available() else "cpu")
    device = torch.device(config.device)
    if device.type == "cuda" and ddp.world > 1:
        device = torch.device("cuda", ddp.local_rank)
    return device


def mask_checksum(masks: dict[str, torch.Tensor]) -> int:
    """A 62-bit checksum of all masks (layer names, shapes and bits), cheap enough to compare across ranks."""
    import hashlib

    digest = hashlib.sha256()
    for name in sorted(masks):
        mask = masks[name].detach().bool().cpu().reshape(-1).numpy()
        digest.update(name.encode())
        digest.update(np.packbits(mask).tobytes())
    return int.from_bytes(digest.digest()[:8], "little") >> 2


def _check_masks_agree(masks: dict[str, torch.Tensor], device: torch.device) -> int:
    """The masks' checksum, equal on every rank; raises if any rank's masks differ (selection must agree)."""
    import torch.distributed as dist

    value = torch.tensor([mask_checksum(masks)], dtype=torch.int64, device=device)
    low, high = value.clone(), value.clone()
    dist.all_reduce(low, op=dist.ReduceOp.MIN)
    dist.all_reduce(high, op=dist.ReduceOp.MAX)
    if int(low) != int(high):
        raise RuntimeError("ranks hold different pruning masks; the pruner's selection is not deterministic")
    return int(low)


def _data_label(folders: tuple[str, ...]) -> str:
    """``T91+BSD200+DIV2K_train_HR(2)``: folder names, with the image count when a folder is small."""
    parts = []
    for folder in folders:
        count = sum(
            1 for p in Path(folder).iterdir() if p.suffix.lower() in (".png", ".jpg", ".jpeg", ".bmp")
        )
        parts.append(Path(folder).name + (f"({count})" if count < 10 else ""))
    return "+".join(parts)


def _validate(model: nn.Module, samples: list, scale: int, device: torch.device) -> float:
    """Mean Y-channel PSNR (crop = scale) over the validation samples, through ``iss.infer.upscale_array``."""
    from iss.data.metrics import psnr_y
    from iss.infer import upscale_array

    model.eval()
    with _isolated_rng(0), torch.no_grad():
        scores = [psnr_y(upscale_array(model, s.lr, device=device), s.hr, crop_border=scale) for s in samples]
    return float(np.mean(scores))


def _stats_summary(stats: Any) -> dict[str, Any]:
    """The whole-model telemetry numbers of a StepStats (per-layer dicts are too big for every log line)."""
    if stats is None:
        return {}
    kept = getattr(stats, "kept", {}) or {}
    summary = {
        "flips_permille_total": getattr(stats, "flips_permille_total", None),
        "distance_first_permille": getattr(stats, "distance_first_permille", None),
        "distance_window_permille": getattr(stats, "distance_window_permille", None),
    }
    if kept:
        summary["kept_mean"] = float(np.mean([float(v) for v in kept.values()]))
    return {k: v for k, v in summary.items() if v is not None}


def _atomic_torch_save(obj: Any, path: Path) -> None:
    tmp = path.with_name(path.name + ".tmp")
    torch.save(obj, tmp)
    os.replace(tmp, path)


def train(
    config: TrainConfig, *, resume: bool = False, stop: Callable[[], bool] | None = None
) -> Iterator[TrainEvent]:
    """Run ``config`` and yield a ``TrainEvent`` per iteration; writes log.jsonl, state.pt, model.safetensors.

    With ``resume`` and an existing ``out/state.pt`` it continues from there exactly. Without ``resume`` an
    ``out`` that already holds a state is refused, so a finished run is never overwritten by accident.
    ``stop`` is asked before every iteration (e.g. has a deadline passed, was SIGTERM received): once it
    says yes, the run saves its state and returns early, logging ``paused``; resuming continues exactly.
    Resuming a state saved at the last iteration writes ``model.safetensors`` from it if a kill cut that
    off (one event, whose ``checkpoint`` is set), and does nothing if it exists.
    """
    from iss import archs, pruning

    if not config.train_data:
        raise ValueError("no training data: pass --train-data DIR[,DIR...]")
    for folder in config.train_data:
        if not Path(folder).is_dir():
            raise FileNotFoundError(f"training data folder {folder} does not exist")
    out = Path(config.out) if config.out else None
    state_path = out / "state.pt" if out else None
    if state_path and state_path.exists() and not resume:
        raise ValueError(f"{state_path} exists: pass --resume to continue that run, or choose another --out")
    if config.threads:
        torch.set_num_threads(config.threads)
    cuda = config.device.startswith("cuda") or (config.device == "auto" and torch.cuda.is_available())
    ddp = _init_distributed("cuda" if cuda else "cpu")
    device = _resolve_device(config, ddp)
    config = dataclasses.replace(config, amp=device.type == "cuda" if config.amp is None else config.amp)
    speeds = None
    if config.pick_mode and device.type == "cpu":
        speeds = mode_speeds(config, stop=stop)
        if speeds is None:  # asked to stop while measuring (CAT-R's probes take minutes): nothing to keep
            return
        config = dataclasses.replace(config, **fastest_mode(speeds))

    _seed_everything(config.seed)
    model = archs.build(config.arch, config.scale, **config.arch_kwargs)
    channels_last = device.type == "cuda" and getattr(model, "prefers_channels_last", False)
    model.to(device, memory_format=torch.channels_last if channels_last else torch.preserve_format)
    pruner = pruning.build(config.method, model, config.ratio, **pruner_options(config))
    trainer = Trainer(_wrap(model, config, ddp, device), pruner, config)
    trainer.channels_last = channels_last
    start = (
        _restore(state_path, config, model, trainer, pruner, ddp) if state_path and state_path.exists() else 0
    )
    val_samples = _validation_samples(config) if config.val_data and ddp.main else []
    if start >= config.iters:  # its last state saved: write the checkpoint a kill may have cut off
        yield from _finish(out, model, trainer, pruner, config, start, val_samples, ddp, device)
        return
    batches = _batches(config, ddp, device, start)
    log = None
    if out and ddp.main:
        out.mkdir(parents=True, exist_ok=True)
        _truncate_log(out / "log.jsonl", start)
        log = (out / "log.jsonl").open("a")
        record = {"event": "resume" if start else "start", "iteration": start, "config": config.to_dict()}
        _log(log, record | ({"mode_speeds": speeds} if speeds else {}))
    began = time.perf_counter()
    iteration = start
    try:
        for lr, hr in batches:
            if stop is not None and stop():
                break
            iteration += 1
            last = iteration == config.iters
            saving = state_path is not None and (iteration % config.save_every == 0 or last)
            logging = iteration % config.log_every == 0 or last
            checked = device.type == "cpu" or logging or saving
            learning_rate = trainer.lr
            loss = trainer.step(lr, hr, check=checked)
            if ddp.world > 1 and (iteration % config.mask_check_every == 0 or last):
                checksum = _check_masks_agree(pruner.masks, device)
                if log and last:
                    _log(log, {"event": "masks_agree", "ranks": ddp.world, "checksum": checksum,
                               "iteration": iteration})  # fmt: skip
            event = TrainEvent(
                iteration, loss.item() if checked else None, learning_rate, pruner.stage,
                pruner.stats if logging else None, trainer=trainer, model=model,
            )  # fmt: skip
            if val_samples and (iteration % config.val_every == 0 or last):
                event.val_psnr = _validate(model, val_samples, config.scale, device)
            event.elapsed = time.perf_counter() - began
            if log and (logging or event.val_psnr is not None):
                _log(log, _event_record(event))
            if saving:
                _save_state(state_path, model, trainer, pruner, config, iteration, ddp)
                event.saved = True
            if last and out and ddp.main:
                event.checkpoint = _save_checkpoint(out, model, pruner, config, iteration, event.val_psnr)
            if last and ddp.world > 1:
                torch.distributed.barrier()  # no rank leaves (and tears down the group) while rank 0 saves
            yield event
        else:
            return
        # Asked to stop: keep everything up to this iteration (its loss checked first) and return.
        if trainer.last_loss is not None and iteration > start:
            check_loss(trainer.last_loss, iteration)
        if state_path and iteration > start:
            _save_state(state_path, model, trainer, pruner, config, iteration, ddp)
        if log:
            _log(log, {"event": "paused", "iteration": iteration, "elapsed": time.perf_counter() - began})
    except NonFiniteLossError as e:
        if log:
            _log(log, {"event": "stopped", "iteration": iteration, "reason": str(e)})
        raise
    finally:
        if log:
            log.close()


# ------------------------------------------------------------------------------------- picking the fast path

MODES = ((False, False), (True, False), (False, True), (True, True))  # (bf16 autocast, torch.compile)
MIN_GAIN = 1.1  # bf16 or compile must be this much faster than eager fp32 (the official path) to be taken
QUIET_CORES = 0.25  # a probe is cached only if other work took at most this much of its threads' cores


def precision(config: TrainConfig) -> str:
    """``eager fp32``, ``compiled bf16``...: how a run computes (master weights and Adam stay fp32)."""
    return f"{'compiled' if config.compile else 'eager'} {'bf16' if config.amp else 'fp32'}"


def mode_speeds(
    config: TrainConfig, seconds: float = 4.0, stop: Callable[[], bool] | None = None
) -> dict[str, float] | None:
    """Training steps per second of each of ``MODES`` for this run's backbone, scale, batch and LR patch on
    this CPU, measured once per CPU, torch version, shape and thread count (cached in ``cache_dir()``):
    the CPUs this project trains on differ from day to day (bf16 pays on AVX512_BF16/AMX, not on AVX2).
    The pruner runs in fp32 outside autocast and compilation, the same in every mode, so the other methods
    of a group reuse the first one's speeds (CAT-R's compiled probes take minutes). Each mode's speed is the
    best of two probes, three other probes apart, so that a burst of other work (the factory's other cell
    compiling, say) cannot make a mode look slow for every run of this shape. Probes during which other work
    took cores this run's threads wanted serve this run but are not cached: one such probe picked fp32 where
    bf16 is 1.7x faster (a cell beside another, each on a core of its own, is not contended). ``None`` if
    ``stop()`` says yes before a probe (nothing is cached then)."""
    from iss.data import cache_dir

    path = cache_dir() / "train_modes.json"
    known = json.loads(path.read_text()) if path.is_file() else {}
    shape = [config.arch, config.arch_kwargs, config.scale, config.batch, config.patch]
    key = json.dumps([cpu_signature(), torch.__version__, torch.get_num_threads(), *shape])
    if key not in known:
        found: dict[str, float] = {}
        others = 0.0
        for amp, compiled in MODES * 2:
            if stop is not None and stop():
                return None
            mode = dataclasses.replace(config, amp=amp, compile=compiled)
            rate, busy = _steps_per_second(mode, seconds)
            found[precision(mode)] = max(round(rate, 3), found.get(precision(mode), 0.0))
            others = max(others, busy)
        if others > len(_usable_cores()) - torch.get_num_threads() + QUIET_CORES:
            return found  # other work took cores this run's threads wanted
        known = json.loads(path.read_text()) if path.is_file() else {}  # another run may have written
        known[key] = found
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(known, indent=1))
        os.replace(tmp, path)
    return known[key]


def fastest_mode(speeds: dict[str, float]) -> dict[str, bool]:
    """``amp`` and ``compile`` of the fastest mode, eager fp32 unless another gains ``MIN_GAIN``."""
    best = max(speeds, key=speeds.__getitem__)
    if speeds[best] < MIN_GAIN * speeds["eager fp32"]:
        best = "eager fp32"
    return {"amp": best.endswith("bf16"), "compile": best.startswith("compiled")}


def _steps_per_second(config: TrainConfig, seconds: float) -> tuple[float, float]:
    """Steps per second of ``config``'s model and pruner on random patches, after three untimed steps
    (which include compiling), and how many of our cores other work kept busy meanwhile; the global RNG is
    left as it was. Each probe starts and leaves an empty compile cache: other models' entries count against
    its recompile limit, past which it runs eagerly."""
    from iss import archs, pruning

    torch._dynamo.reset()
    with torch.random.fork_rng(devices=[]), contextlib.ExitStack() as cleanup:
        cleanup.callback(torch._dynamo.reset)
        model = archs.build(config.arch, config.scale, **config.arch_kwargs)
        pruner = pruning.build(config.method, model, config.ratio, **pruner_options(config))
        trainer = Trainer(torch.compile(model) if config.compile else model, pruner, config)
        lr = torch.rand(config.batch, 3, config.patch, config.patch)
        hr = torch.rand(config.batch, 3, config.patch * config.scale, config.patch * config.scale)
        for _ in range(3):
            trainer.step(lr, hr)
        steps, began, busy, own = 0, time.perf_counter(), _busy_cpu_seconds(), time.process_time()
        while steps < 3 or time.perf_counter() - began < seconds:
            trainer.step(lr, hr)
            steps += 1
        elapsed = time.perf_counter() - began
        others = _busy_cpu_seconds() - busy - (time.process_time() - own)
        return steps / elapsed, max(0.0, others) / elapsed


def _usable_cores() -> set[int]:
    """The cores this process may run on."""
    return os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else set(range(os.cpu_count() or 1))


def _busy_cpu_seconds() -> float:
    """CPU seconds the cores this process may run on have spent busy since boot, by anyone (``/proc/stat``;
    0 where there is none, so that elsewhere every probe looks quiet)."""
    stat = Path("/proc/stat")
    if not stat.is_file():
        return 0.0
    usable, ticks = _usable_cores(), 0
    for line in stat.read_text().splitlines():
        name, *fields = line.split()
        if name[3:].isdigit() and name.startswith("cpu") and int(name[3:]) in usable:
            user, nice, system, _idle, _iowait, irq, softirq = map(int, fields[:7])
            ticks += user + nice + system + irq + softirq
    return ticks / os.sysconf("SC_CLK_TCK")


def cpu_signature() -> str:
    """The CPU model and the vector extensions that decide which mode is fastest."""
    cpuinfo = Path("/proc/cpuinfo")
    lines = cpuinfo.read_text().splitlines() if cpuinfo.is_file() else []
    fields = {k.strip(): v.strip() for k, v in (line.split(":", 1) for line in lines if ":" in line)}
    model = fields.get("model name", platform.processor() or "cpu")  # the last CPU's lines: all alike
    flags = set(fields.get("flags", "").split())
    wanted = ("avx2", "avx512f", "avx512_bf16", "amx_bf16", "amx_tile")
    return " ".join([model, *(flag for flag in wanted if flag in flags)])


def _truncate_log(path: Path, iteration: int) -> None:
    """Drop log records after ``iteration`` (a killed run logged past its last saved state), and a last line
    cut short by the kill."""
    if not path.is_file():
        return
    lines = path.read_text().splitlines(keepends=True)
    whole = lines[:-1] if lines and not lines[-1].endswith("\n") else lines
    kept = [line for line in whole if json.loads(line).get("iteration", 0) <= iteration]
    if len(kept) < len(lines):
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text("".join(kept))
        os.replace(tmp, path)


def _wrap(model: nn.Module, config: TrainConfig, ddp: _Dist, device: torch.device) -> nn.Module:
    """The module the trainer calls: DistributedDataParallel under torchrun, compiled with ``--compile``."""
    net = model
    if ddp.world > 1:
        net = nn.parallel.DistributedDataParallel(
            model, device_ids=[device.index] if device.type == "cuda" else None
        )
    return torch.compile(net) if config.compile else net


def _restore(
    path: Path, config: TrainConfig, model: nn.Module, trainer: Trainer, pruner: Any, ddp: _Dist
) -> int:
    """Load a ``state.pt`` (tensors and plain types only) into the run; returns its iteration."""
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)  # RNG states must stay CPU tensors
        saved = state["config"]
    except Exception as e:  # a truncated or foreign file: torch raises many types
        reason = f"{type(e).__name__}: {str(e).splitlines()[0][:120] if str(e) else ''}"
        raise ValueError(
            f"cannot resume: {path} is not a readable training state ({reason}); delete it to start over"
        ) from None
    _check_same_run(config, saved, path)
    model.load_state_dict(state["model"])
    trainer.load_state_dict(state["trainer"])
    pruner.load_state_dict(state["pruner"])
    rng = state["rng"]
    _set_rng_state(rng[ddp.rank] if ddp.rank < len(rng) else rng[0])
    return int(state["iteration"])


def _batches(
    config: TrainConfig, ddp: _Dist, device: torch.device, start: int
) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """``TrainPatches`` batches for iterations ``start+1 .. iters`` of this rank (``_IterationBatches``), on
    ``device``: cut there from images kept on it (``DevicePatches``, CUDA) or by a DataLoader (CPU)."""
    from iss.data import DevicePatches, TrainPatches

    length = config.iters * ddp.world * config.batch
    dataset = TrainPatches(config.train_data, config.scale, config.patch, length=length, seed=config.seed)
    sampler = _IterationBatches(config.batch, ddp.rank, ddp.world, start, config.iters)
    on_device = device.type == "cuda" if config.data_on_device is None else config.data_on_device
    if on_device:
        patches = DevicePatches(dataset, device)
        return (patches.batch(indices) for indices in sampler)
    loader = torch.utils.data.DataLoader(
        dataset, batch_sampler=sampler, num_workers=config.workers, pin_memory=device.type == "cuda",
        generator=torch.Generator().manual_seed(config.seed),  # keeps the global RNG untouched (exact resume)
    )  # fmt: skip
    return ((lr.to(device, non_blocking=True), hr.to(device, non_blocking=True)) for lr, hr in loader)


def _validation_samples(config: TrainConfig) -> list:
    """The (LR, HR) samples of the ``val_data`` benchmark folder (e.g. ``.../benchmarks/Set5``)."""
    from iss.data import BenchmarkSet

    folder = Path(config.val_data)
    if not folder.is_dir():
        raise FileNotFoundError(f"validation set folder {folder} does not exist")
    return list(BenchmarkSet(folder.parent, folder.name, config.scale))


def _folder_names(folders: Any) -> list[str]:
    """Training folders by name: a run may go on where they live elsewhere (say, a GPU machine's packed copy
    of the same images, the training state brought back to the CPU)."""
    return [Path(folder).name for folder in folders]


def _check_same_run(config: TrainConfig, saved: dict[str, Any], path: Path) -> None:
    """Refuse to resume a state written by a different configuration (only iters/logging may change)."""
    free = {
        *(("amp", "compile") if config.pick_mode else ()),  # measured again on the machine it resumes on
        "iters",
        "val_every",
        "save_every",
        "log_every",
        "out",
        "workers",
        "threads",
        "val_data",
        "device",
        "data_on_device",
        "checkpoint_dtype",
    }
    current = {**config.to_dict(), "train_data": _folder_names(config.train_data)}
    saved = {**saved, "train_data": _folder_names(saved.get("train_data", ()))}
    changed = sorted(k for k in current if k not in free and current[k] != saved.get(k))
    if changed:
        details = ", ".join(f"{k}: {saved.get(k)!r} -> {current[k]!r}" for k in changed)
        raise ValueError(f"cannot resume {path}: the configuration changed ({details})")


def _save_state(
    path: Path,
    model: nn.Module,
    trainer: Trainer,
    pruner: Any,
    config: TrainConfig,
    iteration: int,
    ddp: _Dist,
) -> None:
    """Write the resumable state atomically (rank 0; RNG states of every rank)."""
    rng = [_rng_state()]
    if ddp.world > 1:
        import torch.distributed as dist

        rng = [None] * ddp.world
        dist.all_gather_object(rng, _rng_state())
    if not ddp.main:
        return
    state = {
        "iteration": iteration,
        "config": config.to_dict(),
        "model": model.state_dict(),
        "trainer": trainer.state_dict(),
        "pruner": pruner.state_dict(),
        "rng": rng,
    }
    _atomic_torch_save(state, path)


def _finish(
    out: Path | None,
    model: nn.Module,
    trainer: Trainer,
    pruner: Any,
    config: TrainConfig,
    iteration: int,
    val_samples: list,
    ddp: _Dist,
    device: torch.device,
) -> Iterator[TrainEvent]:
    """A resumed run whose state is at its last iteration: the final checkpoint written from that state, as
    the uninterrupted run wrote it, unless it exists (then nothing happens). A state past ``iters`` is an
    error naming both."""
    if iteration > config.iters:
        raise ValueError(
            f"cannot resume: the state is at iteration {iteration:,}, past --iters {config.iters:,}; "
            "pass --iters of at least that to train on"
        )
    if out is None or (out / "model.safetensors").is_file():
        return
    event = TrainEvent(iteration, None, trainer.lr, pruner.stage, trainer=trainer, model=model)
    if ddp.main:
        event.val_psnr = _validate(model, val_samples, config.scale, device) if val_samples else None
        event.checkpoint = _save_checkpoint(out, model, pruner, config, iteration, event.val_psnr)
    if ddp.world > 1:
        torch.distributed.barrier()
    yield event


def _save_checkpoint(
    out: Path, model: nn.Module, pruner: Any, config: TrainConfig, iteration: int, val_psnr: float | None
) -> Path:
    """The final sparse checkpoint ``out/model.safetensors`` (hard masks once fine-tuning has begun)."""
    from iss import checkpoint

    meta = {
        "arch": config.arch, "arch_kwargs": config.arch_kwargs, "scale": config.scale,
        "method": config.method, "ratio": config.ratio, "alpha": getattr(pruner, "alpha", config.alpha),
        "iterations": iteration,
        "data": _data_label(config.train_data),
        "metrics": {"val_psnr": val_psnr} if val_psnr is not None else {},
        "budget": {"iterations": iteration, "prune_iters": pruner.prune_iters, "batch": config.batch,
                   "patch": config.patch, "seed": config.seed,
                   "precision": _precision_history(out / "log.jsonl", config)},
    }  # fmt: skip
    masks = pruner.masks if pruner.stage == "finetune" else None
    return checkpoint.save(model, out / "model.safetensors", meta, masks, dtype=config.checkpoint_dtype)


def _precision_history(log: Path, config: TrainConfig) -> str:
    """``compiled bf16``, or ``eager bf16 to 19,931, then compiled bf16`` for a run resumed in another mode
    (on another CPU, or after its pick was measured again): from the log's start and resume records."""
    changes: list[tuple[int, str]] = []
    for line in log.read_text().splitlines() if log.is_file() else []:
        record = json.loads(line)
        if record.get("event") in ("start", "resume"):
            run = record["config"]
            mode = precision(dataclasses.replace(config, amp=run["amp"], compile=run["compile"]))
            if not changes or changes[-1][1] != mode:
                changes.append((record["iteration"], mode))
    if not changes:
        return precision(config)
    ends = [f"{mode} to {until:,}" for (_, mode), (until, _) in pairwise(changes)]
    return ", then ".join([*ends, changes[-1][1]])


def _event_record(event: TrainEvent) -> dict[str, Any]:
    record = {"iteration": event.iteration, "loss": event.loss, "lr": event.lr, "stage": event.stage}
    if event.val_psnr is not None:
        record["val_psnr"] = event.val_psnr
    record["elapsed"] = round(event.elapsed, 3)
    record.update(_stats_summary(event.stats))
    return record


def _log(file: Any, record: dict[str, Any]) -> None:
    file.write(json.dumps(record) + "\n")
    file.flush()
