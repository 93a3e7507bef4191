"""The zoo plan: groups expand to cells with one shared budget; mistakes are refused with the field named."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from common import ROOT

from iss.zoo.factory import landed
from iss.zoo.plan import load_plan


def _write(tmp_path: Path, groups: list, **top) -> Path:
    path = tmp_path / "plan.json"
    path.write_text(json.dumps({"version": 1, "train_data": ["train/T91"], "eval": ["Set5"], **top,
                                "groups": groups}))  # fmt: skip
    return path


def test_group_expands_to_cells_with_one_budget(tmp_path: Path) -> None:
    group = {"arch": "swinir-light", "scale": 4, "ratio": 0.95, "iters": 1000, "prune_iters": 400,
             "milestones": [800, 900], "methods": ["iss-p", "l1", "srp"]}  # fmt: skip
    plan = load_plan(_write(tmp_path, [group], defaults={"batch": 16, "patch": 48}))
    assert [c.name for c in plan.cells] == [
        "swinir-light_x4_iss-p_r0.95", "swinir-light_x4_l1_r0.95", "swinir-light_x4_srp_r0.95",
    ]  # fmt: skip
    assert {(c.iters, c.batch, c.patch, c.seed, c.group) for c in plan.cells} == {
        (1000, 16, 48, 0, "swinir-light_x4_r0.95")
    }
    issp, l1, srp = (c.config(["data"], tmp_path / c.name) for c in plan.cells)
    # K_p for methods with a pruning stage; l1 fine-tunes throughout. The LR halves at the same absolute
    # iterations for every method (iss.train counts milestones from the start of fine-tuning).
    assert (issp.prune_iters, l1.prune_iters, srp.prune_iters) == (400, 0, 400)
    assert issp.milestones == (400, 500) and l1.milestones == (800, 900)
    assert issp.seed == l1.seed and issp.checkpoint_dtype == "fp16"


def test_a_group_can_train_with_the_cpu_recipe(tmp_path: Path) -> None:
    """Cosine schedule with warm-up and the measured fast path reach every cell's training config."""
    group = {
        "arch": "swinir-light",
        "scale": 4,
        "ratio": 0.95,
        "iters": 1000,
        "prune_iters": 500,
        "schedule": "cosine",
        "warmup": 50,
        "pick_mode": True,
        "lr": 5e-4,
        "methods": ["iss-p", "l1"],
    }
    issp, l1 = (c.config(["data"], tmp_path / c.name) for c in load_plan(_write(tmp_path, [group])).cells)
    assert (issp.schedule, issp.warmup, issp.pick_mode, issp.lr) == ("cosine", 50, True, 5e-4)
    assert (l1.schedule, l1.warmup, l1.pick_mode, l1.prune_iters) == ("cosine", 50, True, 0)
    with pytest.raises(ValueError, match="schedule"):
        load_plan(_write(tmp_path, [group | {"schedule": "linear"}]))


@pytest.mark.parametrize(
    ("plan", "names", "ramp"),
    [
        ("alpha_ramp_x4.json", ["swinir-light_x4_iss-p_r0.99", "swinir-light_x4_iss-p_r0.95"], 3000),
        ("alpha_ramp_x4_10k.json", ["swinir-light_x4_iss-p_r0.99"], 10000),
    ],
)
def test_a_group_passes_its_pruner_options_to_training(plan: str, names: list[str], ramp: int) -> None:
    """The alpha-ramp experiments' plans: the zoo cell's recipe, plus ISS-P's ``alpha_ramp``."""
    zoo = load_plan(ROOT / "checkpoints" / "zoo_plan_cpu2.json")
    cells = load_plan(ROOT / "benchmarks" / "plans" / plan).cells
    assert [c.name for c in cells] == names
    for cell in cells:
        config = cell.config(["data"], "out")
        assert config.pruner_options == {"alpha_ramp": ramp}
        assert config == zoo.cell(cell.name).config(["data"], "out", pruner_options={"alpha_ramp": ramp})


def test_one_method_of_a_group_can_have_its_own_options(tmp_path: Path) -> None:
    """Pruner options are the method's, not the group's budget: the CPU plan's x4 r0.99 ISS-P ramps its
    alpha beside IHT's, and the factory does not retrain the ramped cell the zoo holds."""
    group = {"arch": "swinir-light", "scale": 4, "ratio": 0.99, "iters": 1000, "prune_iters": 500}
    plan = load_plan(_write(tmp_path, [group | {"methods": ["iss-p"], "pruner_options": {"alpha_ramp": 100}},
                                       group | {"methods": ["iht"]}]))  # fmt: skip
    assert [c.pruner_options for c in plan.cells] == [{"alpha_ramp": 100}, {}]
    with pytest.raises(ValueError, match="another budget"):
        load_plan(_write(tmp_path, [group | {"methods": ["iss-p"]}, group | {"methods": ["l1"], "batch": 9}]))

    cpu = load_plan(ROOT / "checkpoints" / "zoo_plan_cpu2.json")
    assert "swinir-light_x4_iss-p_r0.99" in landed(cpu, ROOT / "checkpoints" / "zoo.json")


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"iters": "many"}, "'iters' should be int"),
        ({"methods": ["iss-p", "magic"]}, "magic"),
        ({"prune_iters": 1000}, "prune_iters < milestones < iters"),
        ({"milestones": [300]}, "prune_iters < milestones < iters"),
        ({"colour": "red"}, "unknown fields"),
        ({"ratio": 1.5}, "ratio"),
        ({"methods": ["iss-p", "l1"], "pruner_options": {"alpha_ramp": 100}}, "unknown pruner option.*'l1'"),
    ],
)
def test_mistakes_name_the_group_and_field(tmp_path: Path, change: dict, message: str) -> None:
    group = {"arch": "swinir-light", "scale": 4, "ratio": 0.95, "iters": 1000, "prune_iters": 400,
             "methods": ["iss-p"], **change}  # fmt: skip
    with pytest.raises((ValueError, KeyError), match=message):
        load_plan(_write(tmp_path, [group]))


def test_curves_name_planned_cells_and_positive_intervals(tmp_path: Path) -> None:
    group = {"arch": "swinir-light", "scale": 2, "ratio": 0.9, "iters": 10, "methods": ["l1"]}
    plan = load_plan(_write(tmp_path, [group], curves={"swinir-light_x2_l1_r0.9": 5}))
    assert plan.curves == {"swinir-light_x2_l1_r0.9": 5}
    with pytest.raises(ValueError, match="not in the plan: swinir-light_x2_iht_r0"):
        load_plan(_write(tmp_path, [group], curves={"swinir-light_x2_iht_r0.9": 5}))
    with pytest.raises(ValueError, match="positive"):
        load_plan(_write(tmp_path, [group], curves={"swinir-light_x2_l1_r0.9": 0}))


def test_a_cell_planned_twice_is_refused(tmp_path: Path) -> None:
    group = {"arch": "swinir-light", "scale": 2, "ratio": 0.9, "iters": 10, "methods": ["l1"]}
    with pytest.raises(ValueError, match="planned twice"):
        load_plan(_write(tmp_path, [group, group]))


def test_the_zoo_plan_follows_the_issue_priority_order() -> None:
    """checkpoints/zoo_plan.json: EDSR-L and CAT-R x4 and x2 r0.95 first (iss-p, iht, l1: what the CPU
    trains slowest), CAT-R eager; then SwinIR-light x4 r0.95 (7 methods), x4 r0.99, x2/x3 r0.95, the rest."""
    plan = load_plan(ROOT / "checkpoints" / "zoo_plan.json")
    groups = list(dict.fromkeys(c.group for c in plan.cells))
    assert groups[:8] == [
        "edsr-l_x4_r0.95", "edsr-l_x2_r0.95", "cat-r_x4_r0.95", "cat-r_x2_r0.95",
        "swinir-light_x4_r0.95", "swinir-light_x4_r0.99", "swinir-light_x2_r0.95", "swinir-light_x3_r0.95",
    ]  # fmt: skip
    assert [c.method for c in plan.cells[:3]] == ["iss-p", "iht", "l1"]
    assert not any(c.compile for c in plan.cells if c.arch == "cat-r")
    first = [c.method for c in plan.cells if c.group == "swinir-light_x4_r0.95"]
    assert first == ["iss-p", "iht", "l1", "srp", "assl", "scratch", "iss-r"]
    assert [c.method for c in plan.cells if c.group == "swinir-light_x4_r0.99"][:4] == [
        "iss-p",
        "l1",
        "srp",
        "assl",
    ]
    assert set(plan.eval) == {"Set5", "Set14", "B100"}
