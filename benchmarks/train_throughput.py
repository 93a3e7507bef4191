"""Training throughput of the zoo's backbones: eager fp32 against the fast path, and what the pruner and
the data cost inside a step. The zoo plan's budgets are set from these figures (``python -m iss zoo budget``).

* ``eager``: fp32, ``torch.optim.Adam`` (foreach), patches cut by a DataLoader on the CPU and copied over.
* ``fast``: what ``iss.train`` does for the zoo plan on CUDA: bf16 autocast, ``torch.compile``,
  channels-last for convnets; on every device patches cut there from uint8 images kept there
  (``iss.data.DevicePatches``) and no host synchronisation inside a step. On the CPU it is eager fp32.
* ``eager-fp32``, ``eager-bf16``, ``compiled-fp32``, ``compiled-bf16``: the four modes ``iss.train
  --pick-mode`` times and chooses from on a CPU (bf16 autocast and/or ``torch.compile``; fp32 master weights
  and Adam), with the ``fast`` data path.

Every mode but ``eager`` steps ``iss.train``'s Adam, the fused kernel; ``--adam foreach`` gives them the
multi-tensor one instead (what ``iss.train`` used on CPUs before: run both to compare).

Each mode runs ``--warmup`` steps (compilation happens there and is reported), then ``--steps`` timed steps
of ISS-P in its pruning stage (the costliest stage: selection every step). The pruner's and the data's shares
are measured by running the same steps again without the pruner hooks, and with one batch reused:
``share = 1 - t_without / t_with``. ``--concurrency 1,2,4`` also runs that many processes of the first
backbone's ``--concurrency-mode`` (default ``fast``) at once on one device and reports their total throughput
(several cells of the zoo plan can then train at once: ``zoo train --jobs``).

    python benchmarks/train_throughput.py --json benchmarks/results/train_throughput_cuda.json   # on a GPU
    python benchmarks/train_throughput.py --tiny                                              # quick, CPU
    python benchmarks/train_throughput.py --threads 1 --concurrency 1,2 --concurrency-mode compiled-bf16 \
        --modes eager-fp32,eager-bf16,compiled-fp32,compiled-bf16 \
        --json benchmarks/results/train_modes_cpu.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import torch

from iss import archs, pruning
from iss.data import DevicePatches, TrainPatches
from iss.train import Trainer
from iss.train.config import TrainConfig
from iss.train.loop import cpu_signature

ROOT = Path(__file__).resolve().parents[1]
TINY = {
    "swinir-light": {"embed_dim": 12, "depths": [2, 2], "num_heads": [2, 2]},
    "edsr-l": {"num_feat": 16, "num_block": 2},
    "cat-r": {
        "embed_dim": 96,
        "depth": [2],
        "num_heads": [2],
        "split_size_0": [4],
        "split_size_1": [16],
        "mlp_ratio": 1.0,
    },
}


MODES = ("eager", "fast", "eager-fp32", "eager-bf16", "compiled-fp32", "compiled-bf16")


class _NoPruner:
    """The pruner contract with nothing done: what a step costs without pruning."""

    stage, iteration = "prune", 0

    def before_step(self) -> None:
        pass

    def step(self) -> None:
        pass


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--archs", default="swinir-light,edsr-l,cat-r")
    p.add_argument("--scale", type=int, default=4)
    p.add_argument(
        "--configs", help="batch x LR patch, e.g. 32x64,16x48 (default: that on CUDA, 4x16 on CPU)"
    )
    p.add_argument("--modes", default="eager,fast", help=f"comma-separated, of {', '.join(MODES)}")
    p.add_argument("--steps", type=int, help="timed steps per measurement (default 30 CUDA, 3 CPU)")
    p.add_argument("--warmup", type=int, help="untimed steps first (default 10 CUDA, 1 CPU)")
    p.add_argument("--concurrency", default="", help="e.g. 1,2,4: processes training at once")
    p.add_argument("--concurrency-mode", default="fast", choices=MODES, help="their mode")
    p.add_argument("--seconds", type=float, default=30, help="timed seconds of each concurrent process")
    p.add_argument("--threads", type=int, help="torch CPU threads (default: torch's)")
    p.add_argument("--tiny", action="store_true", help="tiny models, 2x8 patches: checks the script quickly")
    p.add_argument("--data", type=Path, default=ROOT.parent / "shared" / "data" / "train" / "T91")
    p.add_argument("--adam", default="fused", choices=("fused", "foreach"), help="Adam of the fast modes")
    p.add_argument("--json", type=Path, help="write the results here")
    p.add_argument("--worker", help=argparse.SUPPRESS)  # JSON job of one concurrent process
    args = p.parse_args(argv)
    cuda = args.device.startswith("cuda")
    args.configs = args.configs or ("2x8" if args.tiny else "32x64,16x48" if cuda else "4x16")
    args.steps = args.steps or (30 if cuda else 2 if args.tiny else 3)
    args.warmup = args.warmup if args.warmup is not None else (10 if cuda else 1)
    return args


def build(
    arch: str,
    scale: int,
    batch: int,
    patch: int,
    mode: str,
    device: torch.device,
    tiny: bool,
    data: Path,
    adam: str = "fused",
) -> tuple[Trainer, Any]:
    """A Trainer with ISS-P (r=0.95, pruning stage) and its batch source, set up as ``mode`` says."""
    if mode not in MODES:
        raise ValueError(f"unknown mode {mode!r}: one of {', '.join(MODES)}")
    fast = mode != "eager"
    gpu_fast = mode == "fast" and device.type == "cuda"
    amp, compiled = gpu_fast or mode.endswith("bf16"), gpu_fast or mode.startswith("compiled")
    torch.manual_seed(0)
    model = archs.build(arch, scale, **(TINY[arch] if tiny else {}))
    channels_last = gpu_fast and getattr(model, "prefers_channels_last", False)
    model.to(device, memory_format=torch.channels_last if channels_last else torch.preserve_format)
    pruner = pruning.build("iss-p", model, 0.95, prune_iters=10**9)
    net = torch.compile(model) if compiled else model
    trainer = Trainer(net, pruner, TrainConfig(arch=arch, scale=scale, amp=amp))
    if not fast or adam == "foreach":  # the multi-tensor optimizer, not Trainer's fused one
        trainer.optimizer = torch.optim.Adam(model.parameters(), lr=2e-4, betas=(0.9, 0.99), foreach=True)
    trainer.channels_last = channels_last
    patches = TrainPatches(data, scale, patch, length=10**7, seed=0)
    if fast:
        bank = DevicePatches(patches, device)
        batches = (bank.batch(range(i * batch, (i + 1) * batch)) for i in range(10**6))
    else:
        loader = torch.utils.data.DataLoader(patches, batch_size=batch)
        batches = ((lr.to(device), hr.to(device)) for lr, hr in loader)
    return trainer, batches


def seconds_per_step(trainer: Trainer, batches: Any, steps: int, device: torch.device, reuse: bool) -> float:
    """Wall time of ``steps`` steps (the device drained before and after), per step."""
    batch = next(batches)
    _sync(device)
    began = time.perf_counter()
    for _ in range(steps):
        trainer.step(*(batch if reuse else next(batches)), check=False)
    _sync(device)
    return (time.perf_counter() - began) / steps


def measure(args: argparse.Namespace, arch: str, batch: int, patch: int, mode: str) -> dict[str, Any]:
    """Steps/s of one mode and configuration, with the pruner's and the data's shares of a step."""
    device = torch.device(args.device)
    trainer, batches = build(arch, args.scale, batch, patch, mode, device, args.tiny, args.data, args.adam)
    began = time.perf_counter()
    seconds_per_step(trainer, batches, args.warmup, device, reuse=False)
    warmup = time.perf_counter() - began
    pruner = trainer.pruner
    full, without_pruner, without_data = [], [], []
    for _ in range(3):  # interleaved, medians
        full.append(seconds_per_step(trainer, batches, args.steps, device, reuse=False))
        trainer.pruner = _NoPruner()
        without_pruner.append(seconds_per_step(trainer, batches, args.steps, device, reuse=False))
        trainer.pruner = pruner
        without_data.append(seconds_per_step(trainer, batches, args.steps, device, reuse=True))
    step = statistics.median(full)
    return {
        "arch": arch,
        "scale": args.scale,
        "batch": batch,
        "patch": patch,
        "mode": mode,
        "jobs": 1,
        "device": _device_name(device),
        "steps_per_second": 1 / step,
        "images_per_second": batch / step,
        "step_ms": 1000 * step,
        "pruner_share": 1 - statistics.median(without_pruner) / step,
        "data_share": 1 - statistics.median(without_data) / step,
        "warmup_seconds": warmup,
        "peak_memory_gb": torch.cuda.max_memory_allocated(device) / 2**30 if device.type == "cuda" else None,
    }


def concurrent(args: argparse.Namespace, arch: str, batch: int, patch: int, jobs: int) -> dict[str, Any]:
    """Total throughput of ``jobs`` processes training at once on the same device, in
    ``--concurrency-mode``: each warms up (and compiles), says so, and all start timing together."""
    job = {"arch": arch, "batch": batch, "patch": patch, "mode": args.concurrency_mode}
    command = [
        sys.executable,
        __file__,
        "--device",
        args.device,
        "--scale",
        str(args.scale),
        "--warmup",
        str(args.warmup),
        "--seconds",
        str(args.seconds),
        "--data",
        str(args.data),
        "--adam",
        args.adam,
        "--worker",
        json.dumps(job),
    ] + (["--tiny"] if args.tiny else [])
    if args.threads:
        command += ["--threads", str(args.threads)]
    processes = [
        subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        for _ in range(jobs)
    ]
    for p in processes:
        if p.stdout.readline().strip() != "ready":
            raise RuntimeError(f"a concurrent worker failed before starting (exit {p.wait()})")
    for p in processes:
        p.stdin.write("go\n")
        p.stdin.flush()
    rates = [json.loads(p.communicate()[0].splitlines()[-1])["steps_per_second"] for p in processes]
    return {
        "arch": arch,
        "scale": args.scale,
        "batch": batch,
        "patch": patch,
        "mode": args.concurrency_mode,
        "jobs": jobs,
        "device": _device_name(torch.device(args.device)),
        "steps_per_second": statistics.mean(rates),
        "images_per_second": batch * sum(rates),
        "total_steps_per_second": sum(rates),
    }


def worker(args: argparse.Namespace) -> None:
    """One concurrent process: warm up, say ``ready``, wait for ``go``, train ``--seconds``, print it/s."""
    job = json.loads(args.worker)
    device = torch.device(args.device)
    shape = job["arch"], args.scale, job["batch"], job["patch"], job["mode"]
    trainer, batches = build(*shape, device, args.tiny, args.data, args.adam)
    seconds_per_step(trainer, batches, args.warmup, device, reuse=False)
    print("ready", flush=True)
    sys.stdin.readline()
    steps, began = 0, time.perf_counter()
    while time.perf_counter() - began < args.seconds:
        seconds_per_step(trainer, batches, 5, device, reuse=False)
        steps += 5
    print(json.dumps({"steps_per_second": steps / (time.perf_counter() - began)}))


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _device_name(device: torch.device) -> str:
    from iss.zoo.factory import device_name

    return device_name(str(device))


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.worker:
        worker(args)
        return 0
    configs = [tuple(int(v) for v in c.split("x")) for c in args.configs.split(",")]
    runs = [(arch, batch, patch, mode) for arch in args.archs.split(",") for batch, patch in configs
            for mode in args.modes.split(",")]  # fmt: skip
    rows = []
    for arch, batch, patch, mode in runs:
        rows.append(measure(args, arch, batch, patch, mode))
        _report(args, rows)
    for jobs in [int(j) for j in args.concurrency.split(",") if j]:
        rows.append(concurrent(args, args.archs.split(",")[0], *configs[0], jobs))
        _report(args, rows)
    return 0


def _report(args: argparse.Namespace, rows: list[dict[str, Any]]) -> None:
    """Print the newest row; rewrite the JSON with every row so far (a run cut short keeps its results)."""
    print(_line(rows[-1]), flush=True)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        result = {"command": " ".join(sys.argv), "cpu": cpu_signature(), "torch": torch.__version__,
                  "adam": args.adam}  # fmt: skip
        result["rows"] = rows
        args.json.write_text(json.dumps(result, indent=1) + "\n")


def _line(row: dict[str, Any]) -> str:
    """One result as a readable line."""
    text = (
        f"{row['arch']:<12} {row['batch']}x{row['patch']:<3} {row['mode']:<13} jobs {row['jobs']}: "
        f"{row['steps_per_second']:7.2f} it/s per process, {row['images_per_second']:8.1f} img/s"
    )
    if "pruner_share" in row:
        text += (
            f", pruner {100 * row['pruner_share']:.1f}%, data {100 * row['data_share']:.1f}%, "
            f"warm-up {row['warmup_seconds']:.0f} s"
        )
    return text


if __name__ == "__main__":
    raise SystemExit(main())
