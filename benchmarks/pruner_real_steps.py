"""The pruner's share of real training steps: resume a run's ``state.pt`` (its weights, Adam moments, pruner
and batch stream) and time ``--steps`` steps and the ``pruner.step()`` inside them.

How much the exact per-layer selection costs depends on how many weights cross the threshold each step,
which random-init benchmarks (``pruning_overhead.py``) understate: in EDSR-L's real training, most of its
64 body convs change their selection every step. The last line hashes the weights and masks after the
steps: two versions of the code that print the same hash train bit for bit alike. ``--code`` times another
checkout's ``iss`` (e.g. a ``git worktree`` of an older commit) on the same state. Run it from where the run
ran (its training-data paths are relative; the zoo factory's are ``../shared/data/...``)::

    python benchmarks/pruner_real_steps.py ../zoo-runs/cpu2/edsr-l_x2_iss-p_r0.95/state.pt --steps 8
    python benchmarks/pruner_real_steps.py STATE --steps 8 --code /tmp/old-checkout
    python benchmarks/pruner_real_steps.py ../zoo-runs/cpu2/swinir-light_x2_iht_r0.95/state.pt \
        --warmup 30 --steps 300 --telemetry

A run that was compiled (``--pick-mode`` chose it) is compiled here too; ``--warmup`` steps, untimed, take
the compilation.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import os
import sys
import tempfile
import time
import types
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("state", type=Path, help="a training run's state.pt")
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--warmup", type=int, default=0, help="untimed steps first (compiled runs compile)")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument(
        "--telemetry",
        action="store_true",
        help="record the Analysis tab's series too (TrainRecorder)",
    )
    p.add_argument("--code", type=Path, default=ROOT, help="the checkout whose iss is timed")
    args = p.parse_args(argv)
    sys.path.insert(0, str(args.code))
    import torch

    from iss import archs, pruning
    from iss.train import TrainConfig
    from iss.train.config import pruner_options
    from iss.train.loop import Trainer, _batches, _Dist, _restore, precision
    from iss.train.recording import TrainRecorder

    torch.set_num_threads(args.threads)
    saved = torch.load(args.state, map_location="cpu", weights_only=True)["config"]
    config = TrainConfig(**{k: tuple(v) if isinstance(v, list) else v for k, v in saved.items()})
    config = dataclasses.replace(config, out=None, val_data=None)  # amp as the run picked it
    model = archs.build(config.arch, config.scale, **config.arch_kwargs)
    pruner = pruning.build(config.method, model, config.ratio, **pruner_options(config))
    trainer = Trainer(torch.compile(model) if config.compile else model, pruner, config)  # as the run ran
    start = _restore(args.state, config, model, trainer, pruner, _Dist())
    batches = iter(_batches(config, _Dist(), torch.device("cpu"), start))

    pruner_seconds, step = 0.0, pruner.step

    def timed_step() -> None:
        nonlocal pruner_seconds
        began = time.perf_counter()
        step()
        pruner_seconds += time.perf_counter() - began

    for _, (lr, hr) in zip(range(args.warmup), batches, strict=False):
        trainer.step(lr, hr)
    pruner.step = timed_step
    scratch = tempfile.mkdtemp()  # where a recorder would write (it writes only when a run saves)
    recorder = TrainRecorder(scratch, config.method, {"scale": config.scale}) if args.telemetry else None
    telemetry_seconds = 0.0
    began = time.perf_counter()
    first = start + args.warmup + 1
    for iteration, (lr, hr) in zip(range(first, first + args.steps), batches, strict=False):
        loss = trainer.step(lr, hr)
        if recorder is not None:  # fed as the factory feeds it on a CPU, where every loss is read
            recorded = time.perf_counter()
            event = types.SimpleNamespace(
                iteration=iteration, loss=float(loss), model=model, trainer=trainer, saved=False
            )
            recorder.observe(event)
            telemetry_seconds += time.perf_counter() - recorded
    seconds = time.perf_counter() - began
    os.rmdir(scratch)
    digest = hashlib.sha256()
    for tensor in [*model.state_dict().values(), *pruner.masks.values()]:
        digest.update(tensor.contiguous().numpy().tobytes())
    print(
        f"{config.arch} x{config.scale} {config.method} from iteration {start}, "
        f"{args.steps} steps after {args.warmup}, {precision(config)}, {args.threads} thread(s), "
        f"{args.code}: "
        f"{1000 * seconds / args.steps:.0f} ms/step, pruner {1000 * pruner_seconds / args.steps:.0f} ms "
        f"({100 * pruner_seconds / seconds:.0f}%), "
        + (f"telemetry {1000 * telemetry_seconds / args.steps:.1f} ms, " if recorder is not None else "")
        + f"weights+masks sha256 {digest.hexdigest()[:16]}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
