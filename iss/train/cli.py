"""``python -m iss train``: the training loop's command line (flags -> ``TrainConfig``, a tqdm bar)."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from .config import PRESETS, TrainConfig
from .loop import NonFiniteLossError, train


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Arguments of ``python -m iss train``."""
    parser.add_argument("--arch", default="swinir-light")
    parser.add_argument("--scale", type=int, default=4)
    parser.add_argument("--method", default="iss-p")
    parser.add_argument("--ratio", type=float, default=0.95)
    parser.add_argument("--alpha", type=float, help="ISS-P shrink factor (default 0.95)")
    parser.add_argument(
        "--preset", choices=sorted(PRESETS), help="schedule defaults; explicit flags override them"
    )
    parser.add_argument("--iters", type=int, help="total iterations (pruning + fine-tuning)")
    parser.add_argument("--prune-iters", type=int, help="K_p: iterations of the pruning stage")
    parser.add_argument("--batch", type=int)
    parser.add_argument("--patch", type=int, help="LR patch size")
    parser.add_argument("--lr", type=float)
    parser.add_argument("--milestones", help="comma-separated fine-tuning iterations at which the LR halves")
    parser.add_argument(
        "--schedule", choices=("step", "cosine"), help="LR schedule: official step halvings or cosine"
    )
    parser.add_argument("--warmup", type=int, help="cosine: linear warm-up iterations")
    parser.add_argument("--train-data", required=True, help="training image folder(s), comma-separated")
    parser.add_argument("--val-data", help="a benchmark set folder for periodic validation, e.g. .../Set5")
    parser.add_argument("--val-every", type=int)
    parser.add_argument("--save-every", type=int)
    parser.add_argument("--log-every", type=int)
    parser.add_argument("--out", required=True, help="run folder: log.jsonl, state.pt, model.safetensors")
    parser.add_argument("--resume", action="store_true", help="continue the run in --out from its state.pt")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--device", default="auto")
    parser.add_argument(
        "--amp", action=argparse.BooleanOptionalAction, default=None, help="bf16 (CUDA default)"
    )
    parser.add_argument("--compile", action="store_true", help="torch.compile the model")
    parser.add_argument(
        "--pick-mode", action="store_true",
        help="CPU: measure eager/compiled x fp32/bf16 at this batch and patch, train with the fastest",
    )  # fmt: skip
    parser.add_argument("--workers", type=int, default=0, help="DataLoader worker processes")
    parser.add_argument("--threads", type=int, help="torch CPU threads")
    parser.add_argument(
        "--arch-kwargs", default="{}", help="JSON of iss.archs.build overrides (tiny configs)"
    )
    parser.add_argument("--pruner-options", default="{}", help="JSON of extra iss.pruning.build options")
    parser.add_argument("--mask-check-every", type=int, help="torchrun: compare mask checksums every N its")
    parser.add_argument("--no-progress", action="store_true", help="no tqdm bar")


def config_from_args(args: argparse.Namespace) -> TrainConfig:
    """The TrainConfig for parsed ``train`` arguments (preset first, explicit flags on top)."""
    fields = {
        "arch": args.arch, "scale": args.scale, "method": args.method, "ratio": args.ratio,
        "alpha": args.alpha, "iters": args.iters, "prune_iters": args.prune_iters, "batch": args.batch,
        "patch": args.patch, "lr": args.lr, "val_every": args.val_every, "save_every": args.save_every,
        "log_every": args.log_every, "mask_check_every": args.mask_check_every,
        "out": args.out, "seed": args.seed, "device": args.device, "amp": args.amp, "compile": args.compile,
        "workers": args.workers, "threads": args.threads, "val_data": args.val_data,
        "schedule": args.schedule, "warmup": args.warmup, "pick_mode": args.pick_mode,
        "train_data": tuple(d for d in args.train_data.split(",") if d),
        "arch_kwargs": _json_arg(args.arch_kwargs, "--arch-kwargs"),
        "pruner_options": _json_arg(args.pruner_options, "--pruner-options"),
    }  # fmt: skip
    if args.milestones is not None:
        fields["milestones"] = tuple(int(m) for m in args.milestones.split(",") if m)
    explicit = {k: v for k, v in fields.items() if v is not None or k in ("alpha", "amp", "val_data")}
    if args.preset:
        return TrainConfig.from_preset(args.preset, **explicit)
    return TrainConfig(**explicit)


def _json_arg(text: str, flag: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as e:
        raise ValueError(f"{flag} is not valid JSON: {e}") from None
    if not isinstance(value, dict):
        raise ValueError(f"{flag} must be a JSON object, e.g. '{{\"embed_dim\": 12}}'")
    return value


def run(args: argparse.Namespace) -> int:
    """``python -m iss train``: train with a tqdm bar; final checkpoint in ``--out/model.safetensors``.

    SIGTERM (single process) ends the run after its current iteration with its state saved and one line
    saying where (exit status 143); ``--resume`` goes on from there, or writes the checkpoint if only that
    was missing."""
    config = config_from_args(args)
    try:
        with _sigterm_stops() as terminated:
            last = _train_with_bar(config, args, terminated)
    except NonFiniteLossError as e:
        print(f"error: {e}", file=sys.stderr)
        return 3
    finally:
        if int(os.environ.get("WORLD_SIZE", "1")) > 1:
            import torch.distributed as dist

            if dist.is_initialized():
                dist.destroy_process_group()
    if terminated.is_set() and (last is None or last.checkpoint is None):
        print(f"stopped by SIGTERM: {_kept(config, last)}", file=sys.stderr)
        return 128 + signal.SIGTERM
    if last is None and args.resume and config.out:
        done = Path(config.out) / "model.safetensors"
        print(f"nothing to train: {done} is already written", file=sys.stderr)
    return 0


def _train_with_bar(config: TrainConfig, args: argparse.Namespace, terminated: threading.Event) -> Any:
    """Train ``config`` until done or ``terminated``, under a tqdm bar; the last event (None: none)."""
    from tqdm import tqdm

    main = int(os.environ.get("RANK", "0")) == 0
    bar = tqdm(
        total=config.iters, disable=args.no_progress or not main, desc=f"{config.method} {config.arch}"
    )
    val = loss = last = None
    with bar:
        for last in train(config, resume=args.resume, stop=terminated.is_set):
            if bar.n == 0:
                bar.update(last.iteration - 1)
            bar.update(1)
            val = last.val_psnr if last.val_psnr is not None else val
            loss = last.loss if last.loss is not None else loss
            postfix = {"loss": f"{loss:.4f}" if loss is not None else "-", "stage": last.stage}
            if val is not None:
                postfix["psnr"] = f"{val:.2f}"
            bar.set_postfix(postfix, refresh=False)
            if last.checkpoint is not None:
                bar.write(f"saved {last.checkpoint}")
    return last


@contextlib.contextmanager
def _sigterm_stops() -> Iterator[threading.Event]:
    """An event SIGTERM sets while the run trains (a stopped container or job), so that the run saves its
    state and ends; the previous handler afterwards. Only a single process's main thread listens (the
    ranks of a torchrun group would stop at different iterations)."""
    terminated = threading.Event()
    single = int(os.environ.get("WORLD_SIZE", "1")) == 1
    if not single or threading.current_thread() is not threading.main_thread():
        yield terminated
        return
    previous = signal.signal(signal.SIGTERM, lambda signum, frame: terminated.set())
    try:
        yield terminated
    finally:
        signal.signal(signal.SIGTERM, previous)


def _kept(config: TrainConfig, last: Any) -> str:
    """Where the run's state is now, and how to go on (one line)."""
    state = Path(config.out) / "state.pt" if config.out else None
    if state is None:
        return "no --out, nothing saved"
    if last is None and not state.is_file():
        return "before its first iteration, nothing saved"
    done = f"iteration {last.iteration:,}" if last is not None else "its last saved iteration"
    return f"state at {done} saved in {state}; continue with --resume"
