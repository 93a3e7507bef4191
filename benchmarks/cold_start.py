"""A new process's first upscale, sparse against ``--dense``, and the app's estimates against what it takes.

    python benchmarks/cold_start.py --data-dir ../shared/data --reps 3

Part 1: ``python -m iss upscale MODEL PHOTO`` (default: SwinIR-light x4 ISS-P r0.95 on a 384x303 LR photo,
the centre of DIV2K's 0004x4.png), each run a new process, sparse (this machine's kept timings removed
first, as on a machine that never ran it; the compiled kernel is built once before) and ``--dense``
alternating, ``--reps`` times each. Prints the median wall time of each, whole command included.

Part 2: the Compare tab's cases a newcomer tries first, each in a new process: ``compare.estimate`` (what the
tab shows before running) against the seconds ``compare.compare`` then takes: Urban100 img_012 at x4 in HR
mode, and the LR photo upscaled x4 in LR mode, both with bicubic and the x4 r0.95 cell's methods.

Both print the CPU model, its threads and the load average with the table (Markdown); ``--out FILE`` also
writes the rows as JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PHOTO = Path("div2k") / "DIV2K_train_LR_bicubic" / "X4" / "0004x4.png"
URBAN = Path("benchmarks") / "Urban100" / "HR" / "img_012.png"
MODEL = "swinir-light_x4_iss-p_r0.95"

CASE = """
import json, sys, time
from iss.ui import compare
path, mode, scale, methods = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4].split(",")
mode = compare.MODE_HR if mode == "hr" else compare.MODE_LR
arch = "swinir-light"
estimate = compare.estimate(path, arch, scale, 0.95, methods, mode)
start = time.perf_counter()
compare.compare(path, arch, scale, 0.95, methods, mode)
print(json.dumps({"estimate": sum(estimate.seconds.values()), "actual": time.perf_counter() - start}))
"""


def cpu_model() -> str:
    """The CPU's model name (``/proc/cpuinfo``), else the platform's processor string."""
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
        return next(line.split(":", 1)[1].strip() for line in lines if line.startswith("model name"))
    except (OSError, StopIteration):
        return platform.processor() or platform.machine()


def crop_photo(source: Path, size: tuple[int, int], out: Path) -> Path:
    """The centre ``size`` (width, height) of ``source``, saved as PNG at ``out``."""
    from PIL import Image

    image = Image.open(source).convert("RGB")
    w, h = size
    x0, y0 = (image.width - w) // 2, (image.height - h) // 2
    image.crop((x0, y0, x0 + w, y0 + h)).save(out)
    return out


def upscale_seconds(model: str, photo: Path, dense: bool, env: dict[str, str], work: Path) -> float:
    """Wall seconds of one ``python -m iss upscale`` in a new process (import, load and upscale), writing
    into a new folder under ``work``."""
    out = Path(tempfile.mkdtemp(dir=work))  # a new folder: upscale skips results that exist
    command = [sys.executable, "-m", "iss", "upscale", model, str(photo), "-o", str(out)]
    start = time.perf_counter()
    subprocess.run([*command, *(["--dense"] if dense else [])], cwd=ROOT, env=env, check=True,
                   capture_output=True, timeout=1800)  # fmt: skip
    return time.perf_counter() - start


def cold_start(model: str, photo: Path, reps: int, env: dict[str, str], work: Path) -> dict[str, list[float]]:
    """Seconds per run of sparse (no kept timings) and dense, alternating, after one untimed warm-up that
    builds the compiled kernel into the cache."""
    upscale_seconds(model, photo, False, env, work)
    times: dict[str, list[float]] = {"sparse": [], "dense": []}
    for rep in range(reps):
        for mode in ("sparse", "dense") if rep % 2 == 0 else ("dense", "sparse"):
            shutil.rmtree(Path(env["ISS_CACHE_DIR"]) / "sparse", ignore_errors=True)
            times[mode].append(upscale_seconds(model, photo, mode == "dense", env, work))
    return times


def estimate_case(path: Path, mode: str, scale: int, methods: list[str], env: dict[str, str]) -> dict:
    """``compare.estimate`` and the seconds ``compare.compare`` took, in a new process."""
    argv = [sys.executable, "-c", CASE, str(path), mode, str(scale), ",".join(methods)]
    done = subprocess.run(argv, cwd=ROOT, env=env, check=True, capture_output=True, text=True, timeout=1800)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", default=str(ROOT.parent / "shared" / "data"))
    parser.add_argument("--model", default=MODEL)
    parser.add_argument("--size", default="384x303", help="the LR photo's WIDTHxHEIGHT (centre crop)")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--methods", default="bicubic,iss-p,iht", help="Compare's methods, comma-separated")
    parser.add_argument("--skip-compare", action="store_true", help="part 1 only")
    parser.add_argument("--out", default=None, help="also write the rows as JSON here")
    args = parser.parse_args(argv)
    data = Path(args.data_dir)
    size = tuple(int(v) for v in args.size.lower().split("x"))
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        env = {**os.environ, "ISS_CACHE_DIR": str(work / "cache"), "HF_HUB_OFFLINE": "1"}
        photo = crop_photo(data / PHOTO, size, work / f"photo_{size[0]}x{size[1]}.png")
        times = cold_start(args.model, photo, args.reps, env, work)
        cases = {}
        if not args.skip_compare:
            methods = args.methods.split(",")
            cases["Urban100 img_012, x4, HR mode"] = estimate_case(data / URBAN, "hr", 4, methods, env)
            cases[f"{size[0]}x{size[1]} LR photo, x4, LR mode"] = estimate_case(photo, "lr", 4, methods, env)
    load = ", ".join(f"{v:.2f}" for v in os.getloadavg())
    print(f"{cpu_model()}, {os.cpu_count()} threads, load average {load} (1, 5, 15 min)\n")
    print(f"| `python -m iss upscale {args.model}` on a {args.size} photo, new process | median | runs |")
    print("|---|---|---|")
    for mode, seconds in times.items():
        runs = ", ".join(f"{s:.2f}" for s in seconds)
        print(f"| {mode} | {statistics.median(seconds):.2f} s | {runs} |")
    if cases:
        print(f"\n| Compare ({args.methods}), new process | estimate | taken | ratio |")
        print("|---|---|---|---|")
        for name, case in cases.items():
            ratio = case["actual"] / case["estimate"] if case["estimate"] > 0 else float("inf")
            print(f"| {name} | {case['estimate']:.1f} s | {case['actual']:.1f} s | {ratio:.2f}x |")
    if args.out:
        rows = {"cpu": cpu_model(), "load": os.getloadavg(), "upscale": times, "compare": cases}
        Path(args.out).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
