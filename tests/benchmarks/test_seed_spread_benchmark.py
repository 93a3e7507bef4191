"""benchmarks/seed_spread.py: per-seed plans keep the budget, seed 0 is the zoo's, leads are per seed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from common import ROOT, load_benchmark

from iss.train.recording import load_recording
from iss.zoo import factory
from iss.zoo.plan import load_plan
from tests.zoo.test_factory import _plan


def test_seed_plan_keeps_the_groups_budget_and_only_changes_the_seed(tmp_path: Path) -> None:
    raw = json.loads(_plan(tmp_path).read_text())
    plan = load_benchmark("seed_spread").seed_plan(raw, ["swinir-light_x2_r0.5"], ["iht"], seed=3)
    assert plan["train_data"] == raw["train_data"] and plan["defaults"] == raw["defaults"]
    assert plan["groups"] == [{**raw["groups"][0], "seed": 3, "methods": ["iht"]}]


def test_seed_plan_refuses_a_group_or_method_the_plan_lacks(tmp_path: Path) -> None:
    raw, seed_plan = json.loads(_plan(tmp_path).read_text()), load_benchmark("seed_spread").seed_plan
    with pytest.raises(ValueError, match=r"groups not in the plan: swinir-light_x4_r0\.5"):
        seed_plan(raw, ["swinir-light_x2_r0.5", "swinir-light_x4_r0.5"], ["iht"], seed=1)
    with pytest.raises(ValueError, match="does not train l1"):
        seed_plan(raw, ["swinir-light_x2_r0.5"], ["iss-p", "l1"], seed=1)


def test_summarize_spreads_over_seeds_and_leads_per_seed() -> None:
    runs = {"iss-p": {0: {"Set5": 30.0, "B100": 27.0}, 1: {"Set5": 30.4}, 2: {"Set5": 30.2}},
            "iht": {0: {"Set5": 29.9, "B100": 27.2}, 1: {"Set5": 30.5}}}  # fmt: skip
    summary = load_benchmark("seed_spread").summarize(runs, ["Set5", "B100"])
    assert summary["methods"]["iss-p"]["Set5"] == pytest.approx(
        {"mean": 30.2, "min": 30.0, "max": 30.4, "seeds": 3}
    )
    assert summary["methods"]["iss-p"]["B100"] == {"mean": 27.0, "min": 27.0, "max": 27.0, "seeds": 1}
    assert summary["lead"][0] == pytest.approx({"Set5": 0.1, "B100": -0.2})
    assert list(summary["lead"]) == [0, 1] and summary["lead"][1] == pytest.approx({"Set5": -0.1})


@pytest.mark.slow
def test_report_reads_seed_0_from_the_zoo_and_trains_other_seeds_at_the_same_budget(
    tmp_path: Path,
    data_dir: Path,
    capsys: pytest.CaptureFixture,
) -> None:
    """Seed 0 is the zoo's entry (refused when its budget differs); seed 1 trains through the factory from
    other initial weights, so its PSNR differs; the lead is the first method's PSNR minus the second's; the
    seed's ISS-P/IHT pair is merged into one recording."""
    bench, base, work = load_benchmark("seed_spread"), _plan(tmp_path, iters=(20, 20)), tmp_path / "seeds"
    group, manifest = ["--groups", "swinir-light_x2_r0.5", "--plan", str(base)], tmp_path / "zoo" / "zoo.json"
    bench.write_plans(base, ["swinir-light_x2_r0.5"], ["iss-p", "iht"], [0], work)
    seed0 = load_plan(work / "plan_seed0.json")
    factory.train_plan(seed0, work / "seed0", data_dir, 5, device="cpu", threads=1)
    factory.add_to_zoo(seed0, work / "seed0", manifest, datasets=["Set5"], benchmarks=data_dir / "benchmarks")
    common = [
        *group,
        "--work",
        str(work),
        "--data-dir",
        str(data_dir),
        "--sets",
        "Set5",
        "--zoo",
        str(manifest),
    ]
    bench.main(["train", *common, "--seeds", "1", "--threads", "1", "--device", "cpu"])
    bench.main(["report", *common, "--seeds", "0,1", "--json", str(tmp_path / "spread.json")])
    summary = json.loads((tmp_path / "spread.json").read_text())["groups"]["swinir-light_x2_r0.5"]
    zoo = {e["method"]: e["metrics"]["Set5"]["psnr"] for e in json.loads(manifest.read_text())["entries"]}
    seed1 = {m: json.loads((work / "seed1" / f"swinir-light_x2_{m}_r0.5" / "cell.json").read_text())
             for m in ("iss-p", "iht")}  # fmt: skip
    assert all(r["cell"]["seed"] == 1 and r["metrics"]["Set5"]["psnr"] != zoo[m] for m, r in seed1.items())
    assert summary["lead"]["0"]["Set5"] == pytest.approx(zoo["iss-p"] - zoo["iht"])
    lead1 = seed1["iss-p"]["metrics"]["Set5"]["psnr"] - seed1["iht"]["metrics"]["Set5"]["psnr"]
    assert summary["lead"]["1"]["Set5"] == pytest.approx(lead1)
    assert "| iss-p - iht, seed 1 |" in capsys.readouterr().out
    _, traces = load_recording(work / "seed1" / "recordings" / "swinir-light_x2_r0.5_cpu")
    assert set(traces) == {"iss-p", "iht"}

    raw = json.loads(manifest.read_text())
    raw["entries"][0]["budget"]["iterations"] += 1
    manifest.write_text(json.dumps(raw))
    with pytest.raises(ValueError, match="no seed-0 entry at the plan's budget"):
        bench.main(["report", *common, "--seeds", "0,1"])


def test_seed_0_of_methods_without_a_pruning_stage_is_the_bundled_entry(tmp_path: Path) -> None:
    """The zoo records K_p 0 for L1 and scratch (they fine-tune for the whole budget), the plan its group's
    K_p, which SRP trains with; the CPU plan splits the group over several entries."""
    bench, zoo = load_benchmark("seed_spread"), ROOT / "checkpoints" / "zoo.json"
    plan, methods = zoo.with_name("zoo_plan_cpu2.json"), ["l1", "scratch", "srp"]  # scratch: its own entry
    bench.write_plans(plan, ["swinir-light_x4_r0.95"], methods, [0], tmp_path)  # the 60,000-iteration cells
    psnr = bench.collect(zoo, tmp_path, [0], ["Set5"], None)["swinir-light_x4_r0.95"]
    bundled = {e["name"]: e["metrics"]["Set5"]["psnr"] for e in json.loads(zoo.read_text())["entries"]}
    for method in methods:
        assert psnr[method][0]["Set5"] == bundled[f"swinir-light_x4_{method}_r0.95"]
