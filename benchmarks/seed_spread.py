"""How much of a zoo group's method ordering one seed can move: the methods retrained at other seeds.

    python benchmarks/seed_spread.py train --groups swinir-light_x4_r0.95,swinir-light_x4_r0.99 \
        --methods iss-p,iht --seeds 1,2 --work runs/seeds --data-dir ../shared/data --jobs 2 --threads 1
    python benchmarks/seed_spread.py report --groups swinir-light_x4_r0.95,swinir-light_x4_r0.99 \
        --methods iss-p,iht --seeds 0,1,2 --work runs/seeds --data-dir ../shared/data \
        --json benchmarks/results/seed_spread_cpu.json

Both commands write ``<work>/plan_seed<N>.json`` (the plan's groups and methods named, at seed N, the budget
otherwise unchanged; the cells of other groups in ``<work>/seed<N>`` are kept, only not reported). ``train``
trains it in ``<work>/seed<N>`` through ``iss.zoo.factory``, resumable like ``zoo train``.
``report`` takes seed 0 from the zoo manifest (its entries must have the plan's budget), evaluates the other
seeds' cells on the sets still missing, and prints each method's PSNR over the seeds (mean, min-max) and, per
seed, the first method's lead over the second.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from iss.data import BENCHMARKS
from iss.zoo import load_zoo
from iss.zoo.factory import add_recordings, evaluate_cell, status, train_plan
from iss.zoo.plan import Cell, group_name, load_plan

ROOT = Path(__file__).resolve().parents[1]


def _name(group: dict) -> str:
    return group_name(group["arch"], group["scale"], group["ratio"])


def seed_plan(plan: dict, groups: list[str], methods: list[str], seed: int) -> dict:
    """``plan`` restricted to ``groups`` and ``methods`` (in this order), at ``seed``, without its learning
    ``curves`` (a seed run wants final scores). A group may be split over several entries of the plan (as the
    CPU plan's are): each keeps the chosen methods it trains."""
    picked, trained = [], set()
    for group in plan["groups"]:
        if _name(group) in groups and (mine := [m for m in methods if m in group["methods"]]):
            picked.append({**group, "seed": seed, "methods": mine})
            trained.update((_name(group), m) for m in mine)
    if missing := sorted(set(groups) - {_name(g) for g in plan["groups"]}):
        raise ValueError(f"groups not in the plan: {', '.join(missing)}")
    for name in groups:
        if kept := [m for m in methods if (name, m) not in trained]:
            raise ValueError(f"{name} does not train {', '.join(kept)}")
    description = f"seed {seed} of {', '.join(groups)}: {', '.join(methods)}"
    rest = {k: v for k, v in plan.items() if k != "curves"}
    return {**rest, "description": description, "groups": picked}


def write_plans(base: Path, groups: list[str], methods: list[str], seeds: list[int], work: Path) -> None:
    """One plan file per seed in ``work``."""
    raw = json.loads(base.read_text())
    work.mkdir(parents=True, exist_ok=True)
    for seed in seeds:
        plan = seed_plan(raw, groups, methods, seed)
        (work / f"plan_seed{seed}.json").write_text(json.dumps(plan, indent=1) + "\n")


def _budget_matches(entry_budget: dict, cell: Cell) -> bool:
    """Whether a zoo entry was trained at ``cell``'s budget (what the plan holds equal in a group; K_p is
    the one the method trained with, 0 for L1 and scratch, as the zoo records it)."""
    prune_iters = cell.config(["."], ".").prune_iters
    wanted = {"iterations": cell.iters, "prune_iters": prune_iters, "batch": cell.batch,
              "patch": cell.patch, "lr": cell.lr, "milestones": list(cell.milestones), "seed": 0}  # fmt: skip
    return all(entry_budget.get(k) == v for k, v in wanted.items())


def collect(
    zoo: Path, work: Path, seeds: list[int], sets: list[str], data_dir: Path | None
) -> dict[str, dict[str, dict[int, dict[str, float]]]]:
    """PSNR on Y as ``{group: {method: {seed: {set: psnr}}}}``; seed 0 from the zoo, others from ``work``,
    whose ISS-P/IHT recordings are merged into ``<work>/seed<N>/recordings`` for recording_table.py."""
    entries = {e.name: e for e in load_zoo(zoo)}
    psnr: dict[str, dict[str, dict[int, dict[str, float]]]] = {}
    for seed in seeds:
        plan, folder, trained = load_plan(work / f"plan_seed{seed}.json"), work / f"seed{seed}", []
        for cell, record in status(plan, folder):
            if seed == 0:
                entry = entries.get(cell.name)
                if entry is None or not _budget_matches(entry.budget, cell):
                    raise ValueError(f"{cell.name}: the zoo has no seed-0 entry at the plan's budget")
                metrics = entry.metrics
            elif not record.trained:
                print(f"{cell.name} seed {seed}: {record.iterations}/{cell.iters} iterations, left out")
                continue
            else:
                if data_dir is not None:
                    evaluate_cell(record, folder / cell.name, sets, data_dir / "benchmarks")
                metrics, trained = record.metrics or {}, [*trained, cell.name]
            runs = psnr.setdefault(cell.group, {}).setdefault(cell.method, {})
            runs[seed] = {s: metrics[s]["psnr"] for s in sets if s in metrics}
        add_recordings(plan, folder, folder / "recordings", names=trained)
    return psnr


def summarize(runs: dict[str, dict[int, dict[str, float]]], sets: list[str]) -> dict:
    """Per method and set: mean, min, max over seeds; per seed and set: the first method's lead over the
    second (over the seeds both have)."""
    methods = list(runs)
    out: dict = {"methods": {}, "lead": {}}
    for method, by_seed in runs.items():
        out["methods"][method] = {}
        for s in sets:
            values = [v[s] for v in by_seed.values() if s in v]
            if values:
                out["methods"][method][s] = {"mean": float(np.mean(values)), "min": min(values),
                                             "max": max(values), "seeds": len(values)}  # fmt: skip
    if len(methods) >= 2:
        first, second = runs[methods[0]], runs[methods[1]]
        for seed in sorted(set(first) & set(second)):
            both = [s for s in sets if s in first[seed] and s in second[seed]]
            out["lead"][seed] = {s: first[seed][s] - second[seed][s] for s in both}
    return out


def markdown(group: str, summary: dict, sets: list[str]) -> str:
    """One group's table: methods' mean (min-max) over seeds, then the lead of the first method per seed."""
    lines = [f"**{group}** (PSNR on Y, mean over seeds, min-max)", "",
             "| | seeds | " + " | ".join(sets) + " |", "|---|---|" + "---|" * len(sets)]  # fmt: skip
    for method, per_set in summary["methods"].items():
        n = max((v["seeds"] for v in per_set.values()), default=0)
        cells = [_spread(per_set.get(s)) for s in sets]
        lines.append(f"| {method} | {n} | " + " | ".join(cells) + " |")
    methods = list(summary["methods"])
    for seed, lead in summary["lead"].items():
        cells = [f"{lead[s]:+.2f}" if s in lead else "-" for s in sets]
        lines.append(f"| {methods[0]} - {methods[1]}, seed {seed} | | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _spread(value: dict | None) -> str:
    return f"{value['mean']:.2f} ({value['min']:.2f}-{value['max']:.2f})" if value else "-"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("command", choices=("train", "report"))
    parser.add_argument("--plan", type=Path, default=ROOT / "checkpoints" / "zoo_plan_cpu.json")
    parser.add_argument("--zoo", type=Path, default=ROOT / "checkpoints" / "zoo.json", help="seed 0's")
    parser.add_argument("--groups", required=True, help="comma-separated, e.g. swinir-light_x4_r0.95")
    parser.add_argument("--methods", default="iss-p,iht", help="the report's lead: 1st - 2nd")
    parser.add_argument("--seeds", default="1,2", help="comma-separated; 0 is the zoo's own checkpoint")
    parser.add_argument("--work", type=Path, default=Path("runs/seeds"))
    parser.add_argument("--data-dir", type=Path, help="holds train/ and benchmarks/ (report: evaluates)")
    parser.add_argument("--sets", default=",".join(BENCHMARKS))
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--threads", type=int, default=1, help="train: CPU threads per cell")
    parser.add_argument("--device", default="auto", help="train: auto, cpu or cuda")
    parser.add_argument("--minutes", type=float, default=600.0, help="train: time box per seed")
    parser.add_argument("--json", type=Path, help="report: write the summary here")
    args = parser.parse_args(argv)
    groups, methods = args.groups.split(","), args.methods.split(",")
    seeds, sets = [int(s) for s in args.seeds.split(",")], args.sets.split(",")
    write_plans(args.plan, groups, methods, seeds, args.work)
    if args.command == "train":
        if args.data_dir is None or 0 in seeds:
            parser.error("train needs --data-dir, and seeds other than 0 (seed 0 is the zoo's)")
        for seed in seeds:
            plan = load_plan(args.work / f"plan_seed{seed}.json")
            train_plan(plan, args.work / f"seed{seed}", args.data_dir, args.minutes, jobs=args.jobs,
                       device=args.device, threads=args.threads, keep_going=True)  # fmt: skip
        return
    psnr = collect(args.zoo, args.work, seeds, sets, args.data_dir)
    summaries = {group: summarize(runs, sets) for group, runs in psnr.items()}
    print("\n\n".join(markdown(group, summary, sets) for group, summary in summaries.items()))
    if args.json:
        args.json.write_text(json.dumps({"seeds": seeds, "sets": sets, "groups": summaries}, indent=1) + "\n")


if __name__ == "__main__":
    main()
