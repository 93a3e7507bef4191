"""CPU inference with and without transparent huge pages for torch's large tensors (``THP_MEM_ALLOC_ENABLE``).

glibc serves every allocation over 32 MiB with a fresh ``mmap`` and unmaps it when freed, so each large
activation of a big image (EDSR-L x2 on a 512x384 LR: 200 MB per feature map) is page-faulted in 4 KiB at a
time, on every layer. ``THP_MEM_ALLOC_ENABLE=1``, read by torch's CPU allocator once per process, aligns
such tensors to 2 MiB and asks for huge pages (``madvise``), 512 times fewer faults. The setting must be in
the environment before torch allocates, so every measurement runs in its own process; the two settings
alternate in a fresh random order each repetition, and medians are reported. Each probe builds the model
(a zoo checkpoint where one exists, else random masks of the ratio), runs one untimed inference (sparse
kernels time themselves on it), then one timed. Example::

    python benchmarks/huge_pages.py --out benchmarks/results/huge_pages_zen5.json
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path

CASES = (  # arch, scale, LR width x height, how it runs
    "edsr-l:2:256x192:sparse",
    "edsr-l:2:256x192:dense",
    "swinir-light:2:256x192:sparse",
    "cat-r:2:160x120:sparse",
)
ROOT = Path(__file__).resolve().parents[1]
CHECKPOINTS = {("edsr-l", 2): "edsr-l_x2_iss-p_r0.95", ("swinir-light", 2): "swinir-light_x2_iss-p_r0.95"}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--cases", nargs="+", default=list(CASES), help="arch:scale:WxH:sparse|dense")
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--out", type=Path, help="write the results as JSON here")
    p.add_argument("--probe", help=argparse.SUPPRESS)  # one case, in this process
    return p.parse_args(argv)


def probe(case: str, threads: int) -> dict:
    """Seconds of one inference of ``case`` after an untimed one, and the process's peak RSS."""
    import torch

    import iss
    from iss.train.loop import cpu_signature

    arch, scale, size, mode = case.split(":")
    torch.set_num_threads(threads)
    name = CHECKPOINTS.get((arch, int(scale)))
    if name is not None:
        model = iss.checkpoint.load(ROOT / "checkpoints" / f"{name}.safetensors")[0].eval()
    else:
        torch.manual_seed(0)
        model = iss.archs.build(arch, int(scale)).eval()
        iss.pruning.build("scratch", model, 0.95, seed=0)
    if mode == "sparse":
        model = iss.sparsify(model, exact=True)
    width, height = map(int, size.split("x"))
    x = torch.rand(1, 3, height, width, generator=torch.Generator().manual_seed(0))
    with torch.inference_mode():
        model(x)
        began = time.perf_counter()
        model(x)
        seconds = time.perf_counter() - began
    status = Path("/proc/self/status").read_text().splitlines()
    peak_kib = int(next(line for line in status if line.startswith("VmHWM")).split()[1])
    return {
        "seconds": seconds,
        "peak_mib": peak_kib / 1024,
        "cpu": cpu_signature(),
        "weights": name or "random",
    }


def run_probe(case: str, threads: int, huge: bool) -> dict:
    env = {**os.environ, "THP_MEM_ALLOC_ENABLE": "1" if huge else "0", "OMP_NUM_THREADS": str(threads)}
    cmd = [sys.executable, __file__, "--probe", case, "--threads", str(threads)]
    out = subprocess.run(cmd, env=env, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.probe:
        print(json.dumps(probe(args.probe, args.threads)))
        return
    thp = Path("/sys/kernel/mm/transparent_hugepage/enabled")
    runs: dict[tuple[str, bool], list[dict]] = {(c, h): [] for c in args.cases for h in (False, True)}
    order = list(runs)
    for _ in range(args.reps):
        random.shuffle(order)
        for case, huge in order:
            runs[case, huge].append(run_probe(case, args.threads, huge))
    rows = []
    for case in args.cases:
        off, on = (statistics.median(r["seconds"] for r in runs[case, h]) for h in (False, True))
        peaks = [statistics.median(r["peak_mib"] for r in runs[case, h]) for h in (False, True)]
        rows.append({"case": case, "weights": runs[case, True][0]["weights"], "seconds_4k_pages": off,
                     "seconds_huge_pages": on, "speedup": off / on, "peak_mib_4k": peaks[0],
                     "peak_mib_huge": peaks[1]})  # fmt: skip
        print(
            f"{case:30}{off:7.2f} s -> {on:7.2f} s x{off / on:.2f}  peak {peaks[0]:.0f} -> {peaks[1]:.0f} MiB"
        )
    given = argv if argv is not None else sys.argv[1:]
    result = {
        "command": " ".join(["python", "benchmarks/huge_pages.py", *given]),
        "cpu": runs[order[0]][0]["cpu"],
        "transparent_hugepage": thp.read_text().strip() if thp.exists() else "unknown",
        "threads": args.threads,
        "reps": args.reps,
        "rows": rows,
    }
    if args.out:
        args.out.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
