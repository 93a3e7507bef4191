"""CPU inference time of ``iss.sparsify`` against the engines a user would pick instead, in one run.

For each arch, pruning ratio and thread count, the same masked model (random per-layer masks with exactly
``ceil(ratio * n)`` zeros: the ``scratch`` pruner, as in ``sparse_inference.py``) runs on:

* ``pytorch``: PyTorch eager, stock (dense) kernels;
* ``iss``: ``iss.sparsify(model)``, the default path (fused blocks and C kernels where available; conv
  inputs as IEEE halves on AVX-512 CPUs);
* ``iss-exact``: ``iss.sparsify(model, exact=True)``, every input in float32;
* ``onnxruntime``, ``openvino``: the model exported to ONNX (opset 17, fixed input size), dense engines;
* ``deepsparse``: Neural Magic's sparsity-aware engine on the same ONNX file. It is deprecated and pins old
  ``onnx``/``numpy``, so it runs in its own interpreter (``--deepsparse-python``, a virtual environment with
  ``pip install deepsparse==1.8.0``), driven by ``deepsparse_worker.py``.

The engines of one case run in a fresh random order each repetition (interleaved, so load from other users of
the machine hits all alike), each after a 0.1 s pause (so threads the engine before left spinning are asleep:
every engine at its default settings, as alone in a process); medians are reported. Every engine's output is
checked against PyTorch's (max abs error; a wrong output is reported, not timed as a win). Engines that are
not installed, or that fail to compile a model, are listed as such. Peak memory of PyTorch dense and ``iss``
comes from ``sparse_inference.py``'s fresh-process probes. Baseline engines: ``pip install -e ".[bench]"``.

Full run (the README's table)::

    python benchmarks/engines.py --deepsparse-python /path/to/venv/bin/python

``--quick`` runs reduced models (EDSR-L with 4 blocks of 64 channels, SwinIR-light and CAT-R with 2 groups
of 2 blocks) on a 32x32 input, one ratio and one thread, with the engines that are installed: well under a
minute.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from sparse_inference import build, load_average, platform_cpu, run_memory
from torch import nn

from iss.sparse import SETUP_CALLS, kernels, sparse_path, sparsify

ENGINES = ("pytorch", "iss", "iss-exact", "onnxruntime", "openvino", "deepsparse")
DENSE_ENGINES = ("pytorch", "onnxruntime", "openvino")
QUICK_ARCHS = {
    "edsr-l": dict(num_feat=64, num_block=4),
    "swinir-light": dict(depths=(2, 2), num_heads=(6, 6)),
    "cat-r": dict(depth=(2, 2), num_heads=(6, 6), split_size_0=(4, 4), split_size_1=(16, 16)),
}
WORKER = Path(__file__).with_name("deepsparse_worker.py")
# Idle pause before each timed run: threads the engine before left spin-waiting for more work (libgomp's and
# ONNX Runtime's defaults) go to sleep instead of competing with the next engine, as in a user's process that
# runs only one of them.
SETTLE_S = 0.1


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--archs", nargs="+", default=["edsr-l", "swinir-light"], choices=list(QUICK_ARCHS))
    p.add_argument("--scale", type=int, default=4)
    p.add_argument("--ratios", nargs="+", type=float, default=[0.9, 0.95, 0.99])
    p.add_argument("--threads", nargs="+", type=int, default=[1, 2])
    p.add_argument("--size", type=int, default=128, help="LR input height and width")
    p.add_argument("--reps", type=int, default=5, help="timed repetitions per engine (after a warm-up)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--engines", nargs="+", default=list(ENGINES), choices=ENGINES)
    p.add_argument("--deepsparse-python", type=Path,
                   help="python of a deepsparse environment (default: this one, if it has it)")  # fmt: skip
    p.add_argument("--no-memory", action="store_true", help="skip the peak-memory subprocesses")
    p.add_argument("--memory-reps", type=int, default=3, help="processes per peak-memory figure (median)")
    p.add_argument("--quick", action="store_true", help="reduced models, 32x32, ratio 0.95, 1 thread, 2 reps")
    p.add_argument("--out", type=Path, default=Path("benchmarks/results/engines"),
                   help="writes OUT.md and OUT.json")  # fmt: skip
    args = p.parse_args(argv)
    if args.quick:
        args.size, args.ratios, args.threads, args.reps, args.no_memory = 32, [0.95], [1], 2, True
    return args


# --------------------------------------------------------------------------------------------------- engines


@dataclass
class Engine:
    """One engine ready to run the case's input: ``run()`` returns the output as a numpy array."""

    run: Callable[[], np.ndarray]
    setup_s: float  # export/compile/calibration time, for the record
    path: str = ""  # what ran, when the engine has choices (iss: fused / C / PyTorch kernels)
    close: Callable[[], None] = lambda: None
    seconds: Callable[[], float] | None = None  # the engine's own timing of the last run, if it has one


def missing(name: str, args: argparse.Namespace) -> str | None:
    """Why engine ``name`` cannot run here (None: it can)."""
    modules = {"onnxruntime": "onnxruntime", "openvino": "openvino"}
    if name in modules and importlib.util.find_spec(modules[name]) is None:
        return "not installed (pip install -e '.[bench]')"
    if name in ("onnxruntime", "openvino", "deepsparse") and importlib.util.find_spec("onnx") is None:
        return "needs onnx for the export (pip install -e '.[bench]')"
    if name == "deepsparse" and deepsparse_python(args) is None:
        return "not installed (needs Python <= 3.11; see --deepsparse-python)"
    return None


def deepsparse_python(args: argparse.Namespace) -> str | None:
    """The interpreter that has deepsparse: ``--deepsparse-python``, else this one if it has it."""
    if args.deepsparse_python is not None:
        return str(args.deepsparse_python) if args.deepsparse_python.exists() else None
    return sys.executable if importlib.util.find_spec("deepsparse") is not None else None


def pytorch_engine(model: nn.Module, x: torch.Tensor) -> Engine:
    def run() -> np.ndarray:
        with torch.inference_mode():
            return model(x).numpy()

    return Engine(run, 0.0)


def iss_engine(model: nn.Module, x: torch.Tensor, threads: int, exact: bool) -> Engine:
    start = time.perf_counter()
    fast = sparsify(model, threads=threads, exact=exact)
    with torch.inference_mode():
        for _ in range(SETUP_CALLS):  # per-layer / per-block crossover timing, then where torch's ops run
            fast(x)
    setup = time.perf_counter() - start

    def run() -> np.ndarray:
        with torch.inference_mode():
            return fast(x).numpy()

    return Engine(run, setup, path=sparse_path(fast))


def export_onnx(model: nn.Module, x: torch.Tensor, path: Path) -> float:
    """Export ``model`` for the fixed input ``x`` (TorchScript exporter, opset 17); returns seconds."""
    start = time.perf_counter()
    with warnings_silenced():
        torch.onnx.export(model, (x,), str(path), opset_version=17, dynamo=False, input_names=["x"])
    return time.perf_counter() - start


@contextlib.contextmanager
def warnings_silenced() -> Iterator[None]:
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


def onnxruntime_engine(path: Path, x: np.ndarray, threads: int) -> Engine:
    import onnxruntime as ort

    start = time.perf_counter()
    options = ort.SessionOptions()
    options.intra_op_num_threads, options.inter_op_num_threads = threads, 1
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    session.run(None, {"x": x})
    return Engine(lambda: session.run(None, {"x": x})[0], time.perf_counter() - start)


def openvino_engine(path: Path, x: np.ndarray, threads: int) -> Engine:
    import openvino as ov

    start = time.perf_counter()
    config = {"INFERENCE_NUM_THREADS": threads, "PERFORMANCE_HINT": "LATENCY", "NUM_STREAMS": 1}
    compiled = ov.Core().compile_model(str(path), "CPU", config)
    request = compiled.create_infer_request()

    def run() -> np.ndarray:
        return request.infer({0: x})[0].copy()

    run()
    return Engine(run, time.perf_counter() - start)


def deepsparse_engine(path: Path, x: np.ndarray, threads: int, python: str, workdir: Path) -> Engine:
    """DeepSparse in a worker process (see ``deepsparse_worker.py``); timed by the worker itself."""
    start = time.perf_counter()
    proc = subprocess.Popen(
        [python, str(WORKER), str(path), "--threads", str(threads)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    np.save(workdir / "x.npy", x)
    last = {"seconds": float("nan")}

    def ask(output: bool) -> dict:
        request = {"input": str(workdir / "x.npy"), "output": str(workdir / "y.npy") if output else ""}
        proc.stdin.write(json.dumps(request) + "\n")
        proc.stdin.flush()
        return reply(proc)

    def run() -> np.ndarray:
        last.update(ask(output=True))
        return np.load(workdir / "y.npy")

    def close() -> None:
        proc.stdin.close()
        proc.wait(timeout=60)

    reply(proc)  # {"ready": ...}, or raises with the worker's error
    run()
    return Engine(run, time.perf_counter() - start, close=close, seconds=lambda: last["seconds"])


def reply(proc: subprocess.Popen) -> dict:
    """The worker's next answer; RuntimeError with its message if it failed or died."""
    line = proc.stdout.readline()
    if not line:
        status, errors = proc.wait(), proc.stderr.read().strip().splitlines() or [""]
        cause = next((e for e in errors if e.lower().startswith(("assert", "error", "fatal"))), errors[-1])
        raise RuntimeError(f"worker exited with status {status}: {cause.strip()[:200]}")
    answer = json.loads(line)
    if "error" in answer:
        proc.wait()
        raise RuntimeError(answer["error"])
    return answer


# ------------------------------------------------------------------------------------------------------ cases


@dataclass
class Case:
    """Times and checks of all engines on one (arch, ratio, threads)."""

    arch: str
    ratio: float
    threads: int
    times_ms: dict[str, list[float]] = field(default_factory=dict)
    max_abs_err: dict[str, float] = field(default_factory=dict)
    setup_s: dict[str, float] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)  # engine -> reason
    iss_path: str = ""

    def median(self, engine: str) -> float:
        return statistics.median(self.times_ms[engine])


def make_engine(name: str, model: nn.Module, x: torch.Tensor, threads: int, onnx: Callable[[], Path],
                args: argparse.Namespace, workdir: Path) -> Engine:  # fmt: skip
    if name == "pytorch":
        return pytorch_engine(model, x)
    if name in ("iss", "iss-exact"):
        return iss_engine(model, x, threads, exact=name == "iss-exact")
    if name == "onnxruntime":
        return onnxruntime_engine(onnx(), x.numpy(), threads)
    if name == "openvino":
        return openvino_engine(onnx(), x.numpy(), threads)
    return deepsparse_engine(onnx(), x.numpy(), threads, deepsparse_python(args), workdir)


def bench_case(args: argparse.Namespace, arch: str, ratio: float, threads: int, workdir: Path) -> Case:
    """Build every engine for one masked model, check its output, then time them interleaved."""
    torch.set_num_threads(threads)
    overrides = QUICK_ARCHS[arch] if args.quick else {}
    model = build(arch, args.scale, ratio, args.seed, **overrides)
    x = torch.rand(1, 3, args.size, args.size, generator=torch.Generator().manual_seed(args.seed))
    with torch.inference_mode():
        expected = model(x).numpy()
    case = Case(arch, ratio, threads)
    onnx_path = workdir / f"{arch}.onnx"

    def onnx() -> Path:
        if not onnx_path.exists():
            case.setup_s["onnx export"] = export_onnx(model, x, onnx_path)
        return onnx_path

    engines: dict[str, Engine] = {}
    for name in args.engines:
        reason = missing(name, args)
        if reason is None:
            try:
                engines[name] = make_engine(name, model, x, threads, onnx, args, workdir)
            except Exception as e:  # an engine that cannot compile this model is a result, not a crash
                reason = "fails: " + f"{type(e).__name__}: {e}".splitlines()[0][:200]
        if reason is not None:
            case.skipped[name] = reason
            print(f"  {arch} r={ratio} t={threads}: {name} skipped ({reason})", flush=True)
    case.iss_path = engines["iss"].path if "iss" in engines else ""
    try:
        for name, engine in engines.items():
            case.setup_s[name] = engine.setup_s
            case.max_abs_err[name] = float(np.abs(engine.run() - expected).max())
            case.times_ms[name] = []
        rng = random.Random(args.seed)
        for _ in range(args.reps):
            order = list(engines)
            rng.shuffle(order)
            for name in order:
                engine = engines[name]
                time.sleep(SETTLE_S)
                start = time.perf_counter()
                engine.run()
                wall = time.perf_counter() - start
                case.times_ms[name].append(1e3 * (engine.seconds() if engine.seconds else wall))
    finally:
        for engine in engines.values():
            engine.close()
        onnx_path.unlink(missing_ok=True)
    summary = ", ".join(f"{n} {case.median(n):.0f} ms (err {case.max_abs_err[n]:.1e})" for n in case.times_ms)
    print(f"{arch} r={ratio} t={threads}: {summary}", flush=True)
    return case


# ---------------------------------------------------------------------------------------------------- report


def fastest_dense(case: Case) -> str | None:
    """The dense engine with the lowest median time in this case."""
    dense = [n for n in DENSE_ENGINES if n in case.times_ms]
    return min(dense, key=case.median) if dense else None


def markdown(cases: list[Case], memory: list[dict], args: argparse.Namespace, env: dict) -> str:
    """The results as Markdown: one row per case, times and errors per engine, iss's speedups."""
    names = [n for n in args.engines if any(n in c.times_ms or n in c.skipped for c in cases)]
    models = "reduced models (--quick: " + str(QUICK_ARCHS) + ")" if args.quick else "full models"
    lines = [
        f"# CPU inference engines vs `iss.sparsify`, x{args.scale}, LR {args.size}x{args.size}, {models}",
        "",
        f"torch {env['torch']}, {env['cpu']}, {env['versions']}, OMP_WAIT_POLICY={env['omp_wait_policy']}, "
        f"load average {env['load_before']} before / {env['load_after']} after. {args.reps} interleaved "
        "repetitions per case; median ms (error = max abs difference from PyTorch's output). Random "
        "per-layer masks (scratch pruner) on a random-init model. `iss` path: "
        + ", ".join(sorted({c.iss_path for c in cases if c.iss_path})),
        "",
        "| arch | threads | ratio | " + " | ".join(names) + " | iss vs fastest dense | iss vs deepsparse |",
        "|---|---|---|" + "---|" * len(names) + "---|---|",
    ]
    for c in cases:
        cells = []
        for n in names:
            if n in c.times_ms:
                cells.append(f"{c.median(n):.0f} ({c.max_abs_err[n]:.0e})")
            else:
                cells.append(c.skipped.get(n, "").split(":")[0] or "-")
        best = fastest_dense(c)
        vs_dense = (
            f"**{c.median(best) / c.median('iss'):.2f}x** ({best})" if best and "iss" in c.times_ms else ""
        )
        vs_ds = (
            f"{c.median('deepsparse') / c.median('iss'):.2f}x"
            if "iss" in c.times_ms and "deepsparse" in c.times_ms
            else ""
        )
        lines.append(
            f"| {c.arch} | {c.threads} | {c.ratio} | " + " | ".join(cells) + f" | {vs_dense} | {vs_ds} |"
        )
    reasons = sorted({f"{n}: {r}" for c in cases for n, r in c.skipped.items()})
    if reasons:
        lines += ["", "Not timed: " + "; ".join(reasons) + "."]
    if memory:
        lines += [
            "",
            f"Peak memory of one inference (VmHWM after a warm-up, median of {args.memory_reps} fresh "
            "processes, `sparse_inference.py`'s probe):",
            "",
            "| arch | threads | ratio | pytorch MiB | iss MiB |",
            "|---|---|---|---|---|",
        ]
        for m in memory:
            cells = [m["arch"], m["threads"], m["ratio"], f"{m['dense_mib']:.0f}", f"{m['sparse_mib']:.0f}"]
            lines.append("| " + " | ".join(map(str, cells)) + " |")
    return "\n".join(lines) + "\n"


def versions() -> str:
    """Installed versions of the baseline engines (the deepsparse one comes from its own interpreter)."""
    found = []
    for module in ("onnxruntime", "openvino"):
        if importlib.util.find_spec(module) is not None:
            found.append(f"{module} {__import__(module).__version__}")
    return ", ".join(found) or "no ONNX engines"


def measure_memory(args: argparse.Namespace) -> list[dict]:
    """Peak memory of PyTorch dense and ``iss`` per arch and ratio, at the largest thread count."""
    rows, threads = [], max(args.threads)
    probe = argparse.Namespace(min_speedup=1.0, scale=args.scale, size=args.size, seed=args.seed,
                               memory_reps=args.memory_reps)  # fmt: skip
    for arch in args.archs:
        dense = run_memory(probe, arch, 0.0, "dense", threads)["inference_peak_mib"]
        for ratio in args.ratios:
            sparse = run_memory(probe, arch, ratio, "sparse", threads)["inference_peak_mib"]
            rows.append(dict(arch=arch, threads=threads, ratio=ratio, dense_mib=dense, sparse_mib=sparse))
            print(f"memory {arch} r={ratio}: dense {dense:.0f} MiB, iss {sparse:.0f} MiB", flush=True)
    return rows


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    env = dict(torch=torch.__version__, cpu=platform_cpu(), load_before=load_average(), versions=versions(),
               omp_wait_policy=os.environ.get("OMP_WAIT_POLICY", "unset"),
               kernels="C" if kernels.load() is not None else "pure PyTorch (MKL)")  # fmt: skip
    memory = [] if args.no_memory else measure_memory(args)  # first: a child's max RSS starts from ours
    workdir = Path(tempfile.mkdtemp(prefix="iss-engines-"))
    try:
        cases = [
            bench_case(args, arch, ratio, threads, workdir)
            for arch in args.archs
            for threads in args.threads
            for ratio in args.ratios
        ]
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    env["load_after"] = load_average()
    text = markdown(cases, memory, args, env)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.with_suffix(".md").write_text(text)
    payload = {"args": {k: str(v) for k, v in vars(args).items()}, "env": env, "memory": memory,
               "cases": [vars(c) for c in cases]}  # fmt: skip
    args.out.with_suffix(".json").write_text(json.dumps(payload, indent=1))
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
