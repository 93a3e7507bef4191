"""Record a long ISS-P vs IHT run for the app's Analysis tab (recorded runs, states to start live runs from).

Both runs start from the same random init and see the same batches (the app's own ``build_live_run`` and
``training_batches``), with telemetry every iteration. The series are rewritten every ``--flush-every``
iterations and resumable states of both runs are saved at ``--states`` iterations, so the recording is usable
whenever it is stopped (``--max-seconds``, Ctrl-C or SIGTERM). Example (CPU, in the background)::

    nice -n 10 python benchmarks/record_analysis.py --data-dir ../shared/data --max-seconds 6000 \\
        --out assets/recordings/swinir-light_x2_r0.95_cpu
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import time
from pathlib import Path

import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file

from iss.ui import analysis
from iss.ui.recording import RUNS, load_recording, save_recording, save_state


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, required=True, help="recording folder (run.json, series.npz, states)")
    p.add_argument("--arch", default="swinir-light")
    p.add_argument("--scale", type=int, default=2)
    p.add_argument("--ratio", type=float, default=0.95)
    p.add_argument("--alpha", type=float, default=0.95)
    p.add_argument("--iterations", type=int, default=100_000, help="upper bound (--max-seconds ends it)")
    p.add_argument("--prune-iters", type=int, default=100_000, help="K_p (beyond the run: all pruning)")
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--patch", type=int, default=16, help="LR patch size")
    p.add_argument("--lr", type=float, default=2e-4)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--data-dir", default=None, help="folder holding train/T91 and train/BSD200")
    p.add_argument("--states", default="500,2000,4000", help="iterations at which to save resumable states")
    p.add_argument("--flush-every", type=int, default=100)
    p.add_argument("--validate-every", type=int, default=100)
    p.add_argument("--max-seconds", type=float, default=float("inf"))
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--layers", default="all", help="'all' prunable layers, or a comma-separated list")
    p.add_argument("--arch-kwargs", type=json.loads, default={}, help="JSON overrides (tiny test models)")
    p.add_argument("--rewrite", action="store_true", help="no training: re-save --out in the current format")
    p.add_argument(
        "--keep-states", default=None, help="with --rewrite: iterations whose states stay ('last' ok)"
    )
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.rewrite:
        rewrite(args.out, args.keep_states)
        return 0
    if args.threads:
        torch.set_num_threads(args.threads)
    layers = None if args.layers == "all" else args.layers.split(",")
    run = analysis.build_live_run(
        args.arch, args.scale, args.ratio, args.alpha, args.prune_iters, layers, seed=args.seed, lr=args.lr,
        arch_kwargs=args.arch_kwargs, all_layers=layers is None,
    )  # fmt: skip
    batches = analysis.training_batches(
        args.scale, args.patch, args.batch, args.data_dir, args.seed, analysis.RECORDING_SETS
    )
    pair = analysis.validation_pair(args.scale)
    states_at = sorted({int(s) for s in args.states.split(",") if s})
    config = {
        **{
            k: v for k, v in vars(args).items() if k not in ("out", "states", "layers", "threads", "data_dir")
        },
        "device": "cpu",
        "data": [p.name for p in analysis.training_folders(args.data_dir, analysis.RECORDING_SETS)],
        "command": "python benchmarks/record_analysis.py " + " ".join(sys.argv[1:] if argv is None else argv),
        "states": [],
    }
    stop = {"now": False}
    signal.signal(signal.SIGTERM, lambda *_: stop.update(now=True))
    started = time.perf_counter()
    done = 0
    try:
        for done in range(1, args.iterations + 1):
            lr, hr = next(batches)
            for name in RUNS:
                run.traces[name].commit(done, run.trainers[name].step(lr, hr))
            if done % args.validate_every == 0 or done == 1:
                for name in RUNS:
                    run.traces[name].val_iterations.append(done)
                    run.traces[name].val_psnr.append(analysis.validate(run.models[name], pair, args.scale))
            if done in states_at:
                _save_state(args.out, run, done, config)
            if done % args.flush_every == 0:
                _flush(args.out, run, config, done, started)
            if stop["now"] or time.perf_counter() - started > args.max_seconds:
                break
    except KeyboardInterrupt:
        pass
    if done and done not in states_at:
        _save_state(args.out, run, done, config)
    _flush(args.out, run, config, done, started)
    print(f"recorded {done} iterations of both runs in {time.perf_counter() - started:.0f} s -> {args.out}")
    return 0


def rewrite(out: Path, keep_states: str | None) -> None:
    """Re-save a recording's series in the current format; with ``keep_states`` drop the other state files."""
    config, traces = load_recording(out)
    if keep_states is not None:
        last = config["states"][-1]["iteration"] if config["states"] else None
        wanted = {last if s == "last" else int(s) for s in keep_states.split(",") if s}
        for state in config["states"]:
            if state["iteration"] not in wanted:
                (out / state["file"]).unlink(missing_ok=True)
        config["states"] = [s for s in config["states"] if s["iteration"] in wanted]
    for state in config["states"]:
        _add_threshold_hints(out / state["file"])
    save_recording(out, config, traces)
    kept = [s["iteration"] for s in config["states"]]
    print(f"rewrote {out}: {config['iterations_done']} iterations, states kept at {kept}")


def _add_threshold_hints(path: Path) -> None:
    """Upgrade a state saved before pruner states held threshold hints (``tau``) with empty hints, which the
    pruner recomputes on its next step (an empty ``tau`` is what a pruner without a hint saves)."""
    tensors = load_file(str(path))
    with safe_open(str(path), framework="pt") as f:
        metadata = f.metadata()
    pruners = json.loads(metadata["pruner"])
    for run, skeleton in pruners.items():
        entries = dict(skeleton["__dict__"])
        if "tau" in entries:
            continue
        hints = []
        for i in range(len(entries["kept"]["__list__"])):
            key = f"{run}.pruner.tau/{i}/"
            tensors[key] = torch.empty(0)
            hints.append({"__tensor__": key})
        skeleton["__dict__"].append(["tau", {"__list__": hints}])
    save_file(tensors, str(path), metadata={**metadata, "pruner": json.dumps(pruners)})


def _save_state(out: Path, run: analysis.LiveRun, iteration: int, config: dict) -> None:
    """Resumable weights (fp16), pruner and Adam states of both runs at ``iteration``."""
    out.mkdir(parents=True, exist_ok=True)
    name = f"state_{iteration}.safetensors"
    keys = ("arch", "scale", "ratio", "alpha", "prune_iters", "arch_kwargs")
    meta = {"iteration": iteration, **{k: config[k] for k in keys}}
    optimizers = {r: run.trainers[r].optimizer.state_dict() for r in RUNS}
    save_state(out / name, run.models, run.pruners, meta, optimizers)
    config["states"].append({"iteration": iteration, "file": name})


def _flush(out: Path, run: analysis.LiveRun, config: dict, done: int, started: float) -> None:
    """Rewrite the series and run.json (so a stopped recording is complete up to ``done``)."""
    seconds = time.perf_counter() - started
    timing = {"seconds": round(seconds, 1), "seconds_per_iteration": seconds / max(done, 1)}
    save_recording(out, {**config, **timing}, run.traces)
    losses = [run.traces[r].loss[-1] for r in RUNS]
    print(json.dumps({"iteration": done, "seconds": round(seconds), "loss": losses}), flush=True)


if __name__ == "__main__":
    raise SystemExit(main())
