"""End-to-end CPU time and peak memory of dense vs ``iss.sparsify`` inference for EDSR-L and SwinIR-light.

Every Conv2d/Linear of a randomly initialised model gets a random mask with exactly ``ceil(ratio * n)``
zeros (the ``scratch`` pruner of ``iss.pruning``). Speed depends on how many zeros there are and where, not
on the trained values, so random masks stand in for trained checkpoints; a trained mask is not uniformly
random (some rows or taps denser than others), which can move the figures a little either way. The dense
baseline is the unpruned model with the stock kernels (oneDNN/MKL do not skip zeros: its time does not depend
on the ratio).

Timing: per (arch, threads) the dense model and the sparse models run in a fresh random order each
repetition (interleaved, so load from other users of the machine hits all alike); medians are reported.
Per-layer-type times come from one extra hooked run. Peak memory (VmHWM of one inference, max RSS of the
whole process) is measured in a fresh subprocess per model. On a shared machine run it with
``OMP_WAIT_POLICY=PASSIVE`` (recorded in the results): spinning OpenMP threads of many processes otherwise
starve each other, for dense and sparse alike. Example (quick)::

    OMP_WAIT_POLICY=PASSIVE python benchmarks/sparse_inference.py --size 48 --reps 2 --out /tmp/quick
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import json
import os
import random
import resource
import statistics
import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path

import torch
from torch import nn

import iss.archs
import iss.checkpoint
import iss.pruning
from iss.sparse import SETUP_CALLS, SparseConv2d, SparseLinear, kernels, layer_modes, sparsify
from iss.sparse.fused import FusedSwinBlock
from iss.train.loop import cpu_signature

ARCHS = ("edsr-l", "swinir-light")
RATIOS = (0.9, 0.95, 0.99)
LAYER_TYPES = {
    nn.Conv2d: "conv",
    SparseConv2d: "conv",
    nn.Linear: "linear",
    SparseLinear: "linear",
    FusedSwinBlock: "swin",  # a whole fused Swin block (its Linears, attention, norms) in one C pass
}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--archs", nargs="+", default=list(ARCHS), choices=iss.archs.list_archs())
    p.add_argument("--scale", type=int, default=4)
    p.add_argument("--ratios", nargs="+", type=float, default=list(RATIOS))
    p.add_argument("--threads", nargs="+", type=int, default=[1, 2])
    p.add_argument("--size", type=int, default=128, help="LR input height and width")
    p.add_argument("--reps", type=int, default=3, help="timed repetitions per model (after a warm-up)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--min-speedup", type=float, default=1.0,
                   help="iss.sparsify's crossover (0: every layer sparse, no first-call timing)")  # fmt: skip
    p.add_argument("--no-memory", action="store_true", help="skip the peak-memory subprocesses")
    p.add_argument("--memory-reps", type=int, default=3, help="processes per peak-memory figure (median)")
    p.add_argument("--checkpoint", type=Path, help="time this pruned checkpoint (trained mask) instead")
    p.add_argument("--out", type=Path, default=Path("benchmarks/results/sparse_inference"),
                   help="writes OUT.md and OUT.json")  # fmt: skip
    p.add_argument(
        "--memory-probe", nargs=4, metavar=("ARCH", "RATIO", "MODE", "THREADS"), help=argparse.SUPPRESS
    )
    return p.parse_args(argv)


def build(arch: str, scale: int, ratio: float, seed: int, **overrides) -> nn.Module:
    """Random-init ``arch`` (constructor ``overrides``) with random per-layer masks of ``ratio`` (0: dense),
    in eval mode."""
    torch.manual_seed(seed)
    model = iss.archs.build(arch, scale, **overrides)
    if ratio > 0:
        iss.pruning.build("scratch", model, ratio, seed=seed)
    return model.eval()


def timed(model: nn.Module, x: torch.Tensor) -> float:
    """Wall seconds of one inference."""
    with torch.inference_mode():
        t0 = time.perf_counter()
        model(x)
        return time.perf_counter() - t0


def layer_type_times(model: nn.Module, x: torch.Tensor) -> dict[str, float]:
    """Seconds spent in conv and linear layers and fused Swin blocks (forward hooks; a block that fell back
    to its layers counts in them) and in everything else, for one run."""
    spent: dict[str, float] = defaultdict(float)
    starts: dict[int, float] = {}
    handles = []
    for module in model.modules():
        kind = LAYER_TYPES.get(type(module))
        if kind is None:
            continue

        def pre(m: nn.Module, _args: object) -> None:
            starts[id(m)] = time.perf_counter()

        def post(m: nn.Module, _args: object, _out: object, kind: str = kind) -> None:
            if getattr(m, "mode", "") != "layers":  # a Swin block running its layers: they count themselves
                spent[kind] += time.perf_counter() - starts[id(m)]

        handles += [module.register_forward_pre_hook(pre), module.register_forward_hook(post)]
    try:
        total = timed(model, x)
    finally:
        for h in handles:
            h.remove()
    inside = spent["conv"] + spent["linear"] + spent["swin"]
    return {"conv": spent["conv"], "linear": spent["linear"], "swin": spent["swin"], "other": total - inside}


def peak_rss_mib() -> float:
    """Max resident set size of this process so far, MiB (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def reset_peak_rss() -> bool:
    """Reset the kernel's high-water mark (VmHWM) so the next reading covers only what follows."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
        return True
    except OSError:
        return False


def vm_hwm_mib() -> float:
    """VmHWM (peak RSS since the last reset) of this process, MiB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def release_free_heap() -> None:
    """Return glibc's free heap memory to the system (``malloc_trim``), so RSS counts live memory only."""
    with contextlib.suppress(OSError, AttributeError):  # not glibc: RSS also counts its free memory
        ctypes.CDLL("libc.so.6").malloc_trim(0)


def memory_probe(args: argparse.Namespace, arch: str, ratio: float, mode: str, threads: int) -> dict:
    """Peak memory of one inference (after a warm-up/calibration call) in this fresh process."""
    torch.set_num_threads(threads)
    model = build(arch, args.scale, ratio, args.seed)
    if mode == "sparse":
        sparse = sparsify(model, threads=threads, min_speedup=args.min_speedup)
        del model
        model = sparse
    x = torch.rand(1, 3, args.size, args.size)
    for _ in range(SETUP_CALLS):  # warm-up; the sparse model decides dense/sparse per layer here
        timed(model, x)
    process_peak = vm_hwm_mib()  # building (dense first, also for sparse), converting, warm-up
    release_free_heap()  # else what glibc kept from the warm-up's garbage counts, varying run to run
    if not reset_peak_rss():
        return {"inference_peak_mib": float("nan"), "process_peak_mib": peak_rss_mib()}
    timed(model, x)
    inference_peak = vm_hwm_mib()
    return {"inference_peak_mib": inference_peak, "process_peak_mib": max(process_peak, inference_peak)}


def run_memory(args: argparse.Namespace, arch: str, ratio: float, mode: str, threads: int) -> dict:
    """Median of ``--memory-reps`` :func:`memory_probe` runs, each in a fresh subprocess (RSS high-water
    marks cannot be shared between models)."""
    cmd = [sys.executable, __file__, "--memory-probe", arch, str(ratio), mode, str(threads),
           "--min-speedup", str(args.min_speedup),
           "--scale", str(args.scale), "--size", str(args.size), "--seed", str(args.seed)]  # fmt: skip
    # glibc: tensors of 1 MiB and more are mmap'd and unmapped when freed, so RSS follows live memory instead
    # of the allocator's adaptive threshold (which made the figure vary by ~100 MiB from process to process).
    env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": str(1 << 20)}
    probes = []
    for _ in range(args.memory_reps):
        out = subprocess.run(cmd, check=True, capture_output=True, text=True, env=env).stdout
        probes.append(json.loads(out.strip().splitlines()[-1]))
    return {key: statistics.median(p[key] for p in probes) for key in probes[0]}


def model_source(args: argparse.Namespace, arch: str) -> Callable[[float], nn.Module]:
    """ratio -> model: random masks on ``arch``, or the ``--checkpoint`` model (its own trained mask)."""
    if args.checkpoint is not None:
        return lambda _ratio: iss.checkpoint.load(args.checkpoint)[0].eval()
    return lambda ratio: build(arch, args.scale, ratio, args.seed)


def bench_arch(args: argparse.Namespace, arch: str, threads: int) -> list[dict]:
    """Interleaved dense vs sparse (every ratio) timings for one arch and thread count."""
    torch.set_num_threads(threads)
    x = torch.rand(1, 3, args.size, args.size)
    make = model_source(args, arch)
    models: dict[str, nn.Module] = {
        "dense": make(0.0)
    }  # a checkpoint's dense baseline: same weights, stock kernels
    info: dict[str, dict] = {}
    for ratio in args.ratios:
        masked = make(ratio)
        sparse = sparsify(masked, threads=threads, min_speedup=args.min_speedup)
        with torch.inference_mode():
            t0 = time.perf_counter()
            out = sparse(x)  # first call: per-layer crossover timing
            calibration = time.perf_counter() - t0
            for _ in range(SETUP_CALLS - 1):  # where torch's own ops run (ForwardThreads)
                sparse(x)
            err = (out - masked(x)).abs().max().item()
        modes = list(layer_modes(sparse).values())
        info[str(ratio)] = dict(
            calibration_s=calibration,
            max_abs_err=err,
            layers=len(modes),
            sparse_layers=sum(mode in ("sparse", "fused") for mode in modes),  # layers, and fused Swin blocks
        )
        models[str(ratio)] = sparse
        del masked
    timed(models["dense"], x)  # warm-up
    times: dict[str, list[float]] = defaultdict(list)
    rng = random.Random(args.seed)
    for _ in range(args.reps):
        order = list(models)
        rng.shuffle(order)
        for name in order:
            times[name].append(timed(models[name], x) * 1e3)
    breakdown = {name: layer_type_times(model, x) for name, model in models.items()}
    rows = []
    for ratio in args.ratios:
        dense, sparse = times["dense"], times[str(ratio)]
        row = dict(
            arch=arch, scale=args.scale, size=args.size, threads=threads, ratio=ratio,
            dense_ms=statistics.median(dense), sparse_ms=statistics.median(sparse),
            speedup=statistics.median(dense) / statistics.median(sparse),
            speedup_min=min(dense) / min(sparse),
            dense_times_ms=dense, sparse_times_ms=sparse,
            dense_breakdown_ms={k: v * 1e3 for k, v in breakdown["dense"].items()},
            sparse_breakdown_ms={k: v * 1e3 for k, v in breakdown[str(ratio)].items()},
            **info[str(ratio)],
        )  # fmt: skip
        rows.append(row)
        summary = f"dense {row['dense_ms']:.0f} ms, sparse {row['sparse_ms']:.0f} ms, {row['speedup']:.2f}x"
        print(f"{arch} t={threads} r={ratio}: {summary} ({row['sparse_layers']}/{row['layers']} sparse)")
    return rows


def markdown(rows: list[dict], memory: list[dict], args: argparse.Namespace, env: dict) -> str:
    """Result tables (speed with per-layer-type breakdown, memory) as Markdown."""
    lines = [
        f"# Sparse inference: dense vs `iss.sparsify`, x{args.scale}, LR {args.size}x{args.size}",
        "",
        f"torch {env['torch']}, {env['cpu']}, sparse kernels: {env['kernels']}, "
        f"`iss.sparsify(min_speedup={args.min_speedup:g})`, OMP_WAIT_POLICY={env['omp_wait_policy']}, "
        "load average "
        f"{env['load_before']} before / {env['load_after']} after (shared machine). {args.reps} interleaved "
        "repetitions; speedup = median dense / median sparse (min-based in brackets). Random per-layer masks "
        "with exactly `ceil(ratio * n)` zeros (the scratch pruner) on a random-init model. "
        "conv / linear / swin / other = ms inside Conv2d, Linear, fused Swin blocks (`iss.sparse.fused`) and "
        "everything else (one extra hooked run each).",
        "",
        "| arch | threads | ratio | dense ms | sparse ms | speedup | sparse layers (fused blocks count 1) "
        "| dense conv / linear / other | sparse conv / linear / swin / other | max abs err | first call s |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        d, s = r["dense_breakdown_ms"], r["sparse_breakdown_ms"]
        lines.append(
            f"| {r['arch']} | {r['threads']} | {r['ratio']} | {r['dense_ms']:.0f} | {r['sparse_ms']:.0f} "
            f"| **{r['speedup']:.2f}x** ({r['speedup_min']:.2f}x) | {r['sparse_layers']}/{r['layers']} "
            f"| {d['conv']:.0f} / {d['linear']:.0f} / {d['other']:.0f} "
            f"| {s['conv']:.0f} / {s['linear']:.0f} / {s['swin']:.0f} / {s['other']:.0f} "
            f"| {r['max_abs_err']:.1e} | {r['calibration_s']:.1f} |"
        )
    if memory:
        lines += [
            "",
            f"Peak memory, median of {args.memory_reps} fresh processes per model (glibc's mmap threshold "
            "fixed at 1 MiB, so RSS follows live memory): inference = VmHWM over one call after the warm-up "
            "and a `malloc_trim` (weights + activations), process = max RSS including building the dense "
            "model first and the warm-up.",
            "",
            "| arch | threads | ratio | mode | inference peak MiB | process peak MiB |",
            "|---|---|---|---|---|---|",
        ]
        lines += [
            f"| {m['arch']} | {m['threads']} | {m['ratio']} | {m['mode']} | {m['inference_peak_mib']:.0f} "
            f"| {m['process_peak_mib']:.0f} |"
            for m in memory
        ]
    return "\n".join(lines) + "\n"


def platform_cpu() -> str:
    """CPU model, family (AMD 25: Zen 3/4, 26: Zen 5), vector extensions and core count, for the header."""
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        return "unknown CPU"
    family = next((ln.split(":", 1)[1].strip() for ln in lines if ln.startswith("cpu family")), "?")
    cores = sum(ln.startswith("processor") for ln in lines)
    return f"{cpu_signature()}, family {family}, x{cores}"


def load_average() -> str:
    """1-minute load average, formatted."""
    return f"{os.getloadavg()[0]:.1f}"


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.memory_probe:
        arch, ratio, mode, threads = args.memory_probe
        probe = memory_probe(args, arch, float(ratio), mode, int(threads))
        print(json.dumps(probe))
        return 0
    if args.checkpoint is not None:  # one model, its own ratio and scale; label rows with the file name
        meta = iss.checkpoint.load(args.checkpoint)[1]
        args.archs, args.ratios, args.scale = (
            [f"{args.checkpoint.stem} (trained)"],
            [meta["ratio"]],
            meta["scale"],
        )
        args.no_memory = True
    env = dict(torch=torch.__version__, cpu=platform_cpu(), load_before=load_average(),
               omp_wait_policy=os.environ.get("OMP_WAIT_POLICY", "unset"),
               kernels="C" if kernels.load() is not None else "pure PyTorch (MKL)")  # fmt: skip
    memory = []  # first, while this process is small: a child's max RSS starts from its parent's at fork
    if not args.no_memory:
        threads = max(args.threads)
        for arch in args.archs:
            for ratio, mode in [(0.0, "dense"), *((r, "sparse") for r in args.ratios)]:
                m = run_memory(args, arch, ratio, mode, threads)
                memory.append(dict(arch=arch, threads=threads, ratio=ratio, mode=mode, **m))
                print(f"memory {arch} {mode} r={ratio}: {m}", flush=True)
    rows = [row for arch in args.archs for threads in args.threads for row in bench_arch(args, arch, threads)]
    env["load_after"] = load_average()
    text = markdown(rows, memory, args, env)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.with_suffix(".md").write_text(text)
    payload = {"args": {k: str(v) for k, v in vars(args).items()}, "env": env, "rows": rows, "memory": memory}
    args.out.with_suffix(".json").write_text(json.dumps(payload, indent=1))
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
