"""CPU training recipes at equal CPU time: Set5 PSNR learning curves of one cell.

Each recipe trains the same cell (SwinIR-light x4 ISS-P r0.95 by default: same seed, so the same initial
weights and batches) for the iterations that one idle core runs in ``--minutes`` at the recipe's measured
speed (``iss.train.mode_speeds``, measured on this CPU at batch 4, LR patch 16, one thread, before any
training starts; kept in ``<work>/budgets.json``). Set5 is validated twelve
times per run, so every recipe is scored at the same CPU minutes. Runs are resumable (``--resume``).

    python benchmarks/recipe_curves.py run --work ../zoo-runs/recipes --minutes 48   # one process per recipe
    python benchmarks/recipe_curves.py report --work ../zoo-runs/recipes \\
        --json benchmarks/results/recipe_curves_swinir-light_x4.json

``cell`` reports the curve of a zoo cell the plan validates (its ``curves``; EDSR-L x2 ISS-P r0.95 in the CPU
plan), at the nominal idle CPU minutes of the mode it picked (its measured speed, pruner selection not
included) and at the minutes it really trained (wall time, whatever else shared the CPU)::

    python benchmarks/recipe_curves.py cell --work ../zoo-runs/cpu2/edsr-l_x2_iss-p_r0.95 \\
        --json benchmarks/results/recipe_curve_edsr-l_x2.json

The recipes: ``today`` (the zoo's: eager fp32, LR 2e-4 constant while pruning then halved at 80% and 90%),
``fast`` (the same on the fastest precision and compilation this CPU has), ``fast-cosine`` (that, with a 2.5x
peak LR, 1,000 warm-up steps and a cosine to 0 over both stages). K_p is half the budget in every recipe.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from iss.train import TrainConfig  # noqa: E402
from iss.train.loop import cpu_signature, mode_speeds  # noqa: E402

VALIDATIONS = 12
RECIPES = {  # name: (mode, extra train flags)
    "A_today": ("eager fp32", ["--lr", "2e-4"]),
    "B_fast": ("compiled bf16", ["--lr", "2e-4"]),
    "C_fast_cosine5e-4": ("compiled bf16", ["--lr", "5e-4", "--schedule", "cosine", "--warmup", "1000"]),
}


def cell(args: argparse.Namespace) -> TrainConfig:
    """The trained cell, as ``mode_speeds`` measures it."""
    return TrainConfig(arch=args.arch, scale=args.scale, method="iss-p", ratio=args.ratio, batch=4, patch=16)


def budgets(args: argparse.Namespace) -> dict[str, int]:
    """Iterations per recipe: ``--minutes`` of one idle core at the recipe's measured steps/s (measured
    once, before any training starts, and kept in ``<work>/budgets.json`` with the CPU)."""
    path = Path(args.work) / "budgets.json"
    if not path.is_file():
        torch.set_num_threads(1)  # as each recipe trains (--threads 1)
        speeds = mode_speeds(cell(args))
        iters = {name: int(args.minutes * 60 * speeds[m]) // 1000 * 1000 for name, (m, _) in RECIPES.items()}
        path.parent.mkdir(parents=True, exist_ok=True)
        budget = {"cpu": cpu_signature(), "minutes": args.minutes, "speeds": speeds, "iters": iters}
        path.write_text(json.dumps(budget, indent=1) + "\n")
    return json.loads(path.read_text())["iters"]


def command(args: argparse.Namespace, name: str, iters: int) -> list[str]:
    """The ``python -m iss train`` command of one recipe."""
    mode, extra = RECIPES[name]
    data = Path(args.data_dir)
    milestones = f"{int(iters * 0.3)},{int(iters * 0.4)}"  # 80% and 90% of the run, counted from K_p
    return [
        sys.executable, "-m", "iss", "train", "--arch", args.arch, "--scale", str(args.scale),
        "--method", "iss-p", "--ratio", str(args.ratio), "--batch", "4", "--patch", "16", "--seed", "0",
        "--threads", "1", "--no-progress", "--save-every", "1000", "--log-every", "100",
        "--train-data", f"{data}/train/T91,{data}/train/BSD200,{data}/div2k/DIV2K_train_HR",
        "--val-data", f"{data}/benchmarks/Set5", "--val-every", str(iters // VALIDATIONS),
        "--iters", str(iters), "--prune-iters", str(iters // 2), "--milestones", milestones,
        "--amp" if "bf16" in mode else "--no-amp", *(["--compile"] if "compiled" in mode else []),
        *extra, "--out", str(Path(args.work) / name),
    ]  # fmt: skip


def run(args: argparse.Namespace) -> int:
    """Start every recipe as its own niced process and wait for all."""
    iters = budgets(args)
    procs = []
    for name in RECIPES:
        resume = ["--resume"] if (Path(args.work) / name / "state.pt").exists() else []
        procs.append(
            subprocess.Popen(["nice", "-n", "19", *command(args, name, iters[name]), *resume], cwd=ROOT)
        )
    return max(p.wait() for p in procs)


def curve(folder: Path) -> tuple[dict, list[dict]]:
    """A run's config and its validation points."""
    records = [json.loads(line) for line in (folder / "log.jsonl").read_text().splitlines()]
    config = next(r["config"] for r in records if r.get("event") == "start")
    return config, [r for r in records if "val_psnr" in r]


def report(args: argparse.Namespace) -> int:
    """Set5 PSNR of every recipe at the same idle CPU minutes, as markdown and JSON."""
    budget = json.loads((Path(args.work) / "budgets.json").read_text())
    result = {**budget, "recipes": {}}
    for name, (mode, extra) in RECIPES.items():
        folder = Path(args.work) / name
        if not (folder / "log.jsonl").is_file():
            continue
        config, points = curve(folder)
        result["recipes"][name] = {
            "mode": mode, "flags": extra, "iters": config["iters"], "lr": config["lr"],
            "schedule": config.get("schedule", "step"),
            "curve": [{"iteration": p["iteration"], "set5_psnr": round(p["val_psnr"], 3),
                       "idle_minutes": round(p["iteration"] / budget["speeds"][mode] / 60, 1)}
                      for p in points],
        }  # fmt: skip
    names = list(result["recipes"])
    lines = ["| idle CPU minutes (nominal) | " + " | ".join(names) + " |", "|---|" + "---|" * len(names)]
    for i in range(VALIDATIONS):  # the i-th validation of every run: the same share of its budget
        row = [r["curve"][i] if i < len(r["curve"]) else None for r in result["recipes"].values()]
        scores = " | ".join(f"{p['set5_psnr']:.2f}" if p else "" for p in row)
        lines.append(f"| {budget['minutes'] * (i + 1) / VALIDATIONS:g} | {scores} |")
    print("\n".join(lines))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1) + "\n")
    return 0


def cell_curve(args: argparse.Namespace) -> int:
    """Set5 PSNR of one zoo cell along its training, as markdown and JSON."""
    folder = Path(args.work)
    records = [json.loads(line) for line in (folder / "log.jsonl").read_text().splitlines()]
    start = next(r for r in records if r.get("event") == "start")
    config, speeds = start["config"], start.get("mode_speeds") or {}
    mode = f"{'compiled' if config['compile'] else 'eager'} {'bf16' if config['amp'] else 'fp32'}"
    speed = speeds.get(mode)
    points, before = [], 0.0  # seconds trained by earlier processes (a cell pauses and resumes)
    for r in records:
        if r.get("event") == "paused":
            before += r["elapsed"]
        elif "val_psnr" in r:
            points.append({
                "iteration": r["iteration"], "stage": r["stage"], "set5_psnr": round(r["val_psnr"], 3),
                "idle_minutes": round(r["iteration"] / speed / 60, 1) if speed else None,
                "wall_minutes": round((before + r.get("elapsed", 0.0)) / 60, 1),
            })  # fmt: skip
    result = {
        "cell": folder.name, "cpu": cpu_signature(), "mode": mode, "idle_steps_per_second": speed,
        "iters": config["iters"], "prune_iters": config["prune_iters"], "batch": config["batch"],
        "patch": config["patch"], "lr": config["lr"], "schedule": config["schedule"], "curve": points,
    }  # fmt: skip
    budget = f"{config['iters']} iterations, K_p {config['prune_iters']}"
    print(f"{folder.name}: {mode} ({speed} it/s idle), {budget}")
    print("| iteration | stage | idle minutes (nominal) | wall minutes | Set5 PSNR (dB) |")
    print("|---|---|---|---|---|")
    for p in points:
        minutes = f"{p['idle_minutes']} | {p['wall_minutes']}"
        print(f"| {p['iteration']:,} | {p['stage']} | {minutes} | {p['set5_psnr']:.2f} |")
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1) + "\n")
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("action", choices=("run", "report", "cell"))
    p.add_argument("--work", default=str(ROOT.parent / "zoo-runs" / "recipes"))
    p.add_argument("--data-dir", default=str(ROOT.parent / "shared" / "data"))
    p.add_argument("--arch", default="swinir-light")
    p.add_argument("--scale", type=int, default=4)
    p.add_argument("--ratio", type=float, default=0.95)
    p.add_argument("--minutes", type=float, default=48.0)
    p.add_argument("--json", default=None)
    args = p.parse_args(argv)
    return {"run": run, "report": report, "cell": cell_curve}[args.action](args)


if __name__ == "__main__":
    sys.exit(main())
