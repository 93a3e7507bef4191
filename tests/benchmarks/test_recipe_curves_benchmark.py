"""benchmarks/recipe_curves.py: each recipe is a valid ``iss train`` run at its budget; the report compares
them at the same share of their budgets."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from common import load_benchmark

from iss.train import cli as train_cli


def _args(work: Path) -> argparse.Namespace:
    return argparse.Namespace(work=str(work), data_dir="data", arch="swinir-light", scale=4, ratio=0.95,
                              minutes=48.0, json=None)  # fmt: skip


def test_every_recipe_is_a_train_command_with_its_budget(tmp_path: Path) -> None:
    bench = load_benchmark("recipe_curves")
    parser = argparse.ArgumentParser()
    train_cli.add_arguments(parser)
    configs = {}
    for name in bench.RECIPES:
        argv = bench.command(_args(tmp_path), name, 36000)[4:]  # after "python -m iss train"
        configs[name] = train_cli.config_from_args(parser.parse_args(argv))
    today, fast, cosine = configs.values()
    assert (today.amp, today.compile, fast.amp, fast.compile) == (False, False, True, True)
    assert today.prune_iters == 18000 and today.milestones == (10800, 14400) and today.val_every == 3000
    assert (cosine.schedule, cosine.warmup, cosine.lr) == ("cosine", 1000, 5e-4)
    assert {c.seed for c in configs.values()} == {0} and {c.batch for c in configs.values()} == {4}


def test_report_scores_recipes_at_the_same_share_of_their_budgets(tmp_path: Path, capsys) -> None:
    bench = load_benchmark("recipe_curves")
    speeds = {"eager fp32": 6.0, "eager bf16": 9.0, "compiled fp32": 7.0, "compiled bf16": 12.0}
    budget = {"cpu": "test", "minutes": 48.0, "speeds": speeds, "iters": {"A_today": 17280, "B_fast": 34560}}
    (tmp_path / "budgets.json").write_text(json.dumps(budget))
    for name, iters in budget["iters"].items():
        (tmp_path / name).mkdir()
        lines = [{"event": "start", "iteration": 0, "config": {"iters": iters, "lr": 2e-4}}]
        lines += [{"iteration": iters * k // 12, "val_psnr": 27.0 + k / 10} for k in (1, 2)]
        (tmp_path / name / "log.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    args = _args(tmp_path)
    args.json = str(tmp_path / "out.json")
    assert bench.report(args) == 0
    table = capsys.readouterr().out.splitlines()
    assert table[2] == "| 4 | 27.10 | 27.10 |" and table[3] == "| 8 | 27.20 | 27.20 |"
    curves = json.loads((tmp_path / "out.json").read_text())["recipes"]
    assert (
        curves["A_today"]["curve"][0]["idle_minutes"] == curves["B_fast"]["curve"][0]["idle_minutes"] == 4.0
    )


def test_a_zoo_cell_curve_is_timed_by_the_mode_it_picked(tmp_path: Path, capsys) -> None:
    """``cell``: a factory cell's validations, at the idle minutes of the mode its run picked."""
    bench = load_benchmark("recipe_curves")
    config = {"iters": 8000, "prune_iters": 4000, "batch": 4, "patch": 16, "lr": 5e-4, "schedule": "cosine",
              "amp": True, "compile": False}  # fmt: skip
    speeds = {"eager fp32": 0.7, "eager bf16": 1.25, "compiled fp32": 0.75, "compiled bf16": 1.2}
    lines = [{"event": "start", "iteration": 0, "config": config, "mode_speeds": speeds},
             {"event": "paused", "iteration": 600, "elapsed": 600.0},
             {"event": "resume", "iteration": 600, "config": config, "mode_speeds": speeds},
             {"iteration": 1000, "stage": "prune", "val_psnr": 33.123, "elapsed": 300.0},
             {"iteration": 1100, "stage": "prune", "loss": 0.1}]  # fmt: skip
    (tmp_path / "log.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    args = _args(tmp_path)
    args.json = str(tmp_path / "out.json")
    assert bench.cell_curve(args) == 0
    assert capsys.readouterr().out.splitlines()[-1] == "| 1,000 | prune | 13.3 | 15.0 | 33.12 |"
    result = json.loads((tmp_path / "out.json").read_text())
    assert result["mode"] == "eager bf16" and result["curve"] == [
        {"iteration": 1000, "stage": "prune", "set5_psnr": 33.123, "idle_minutes": 13.3, "wall_minutes": 15.0}
    ]
