"""The zoo plan (``checkpoints/zoo_plan.json``): which checkpoints to train, in what order, at what budget.

A plan lists comparison groups (one backbone, scale and ratio). Every method of a group is one cell, trained
at the group's budget (iterations, K_p, batch, LR patch, learning rate, LR decay, seed) from the same initial
weights on the same batch stream, so the methods are compared fairly. Methods without a pruning stage (``l1``,
``scratch``) fine-tune for the whole budget. ``milestones`` are absolute iterations at which the learning
rate halves, the same for every method of a group (``iss.train`` counts them from the start of fine-tuning,
so each cell gets ``milestone - K_p``)::

    {"version": 1,
     "train_data": ["train/T91", "train/BSD200", "div2k/DIV2K_train_HR"],   # relative to --data-dir
     "eval": ["Set5", "Set14", "B100"],
     "defaults": {"batch": 32, "patch": 64, "lr": 2e-4, "seed": 0, "checkpoint_dtype": "fp16"},
     "groups": [{"arch": "swinir-light", "scale": 4, "ratio": 0.95, "iters": 4000, "prune_iters": 2000,
                 "milestones": [3200, 3600], "methods": ["iss-p", "iht", "l1"]}, ...],
     "curves": {"swinir-light_x4_iss-p_r0.95": 500}}

``curves`` (optional) names cells whose learning curve is wanted: they validate on the first ``eval`` set
every so many iterations (``val_psnr`` in their ``log.jsonl``). Validation changes no weight or batch, so
it is not part of the budget.
"""

from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import MISSING, dataclass, field
from pathlib import Path
from typing import Any

from iss.train.config import TrainConfig, pruner_options

GROUP_FIELDS = {
    "arch": str,
    "scale": int,
    "ratio": float,
    "iters": int,
    "prune_iters": int,
    "batch": int,
    "patch": int,
    "lr": float,
    "seed": int,
    "milestones": list,
    "methods": list,
    "checkpoint_dtype": str,
    "compile": bool,
    "schedule": str,
    "warmup": int,
    "pick_mode": bool,
    "arch_kwargs": dict,
    "pruner_options": dict,
    "note": str,
}
_REQUIRED = ("arch", "scale", "ratio", "iters", "methods")


def group_name(arch: str, scale: int, ratio: float) -> str:
    """A comparison group's name, e.g. ``swinir-light_x4_r0.95``."""
    return f"{arch}_x{scale}_r{ratio:g}"


@dataclass(frozen=True)
class Cell:
    """One checkpoint to train: a method in a comparison group, with the group's budget."""

    arch: str
    scale: int
    ratio: float
    method: str
    iters: int
    prune_iters: int  # K_p of the group; 0 for methods without a pruning stage
    batch: int
    patch: int
    lr: float
    seed: int
    milestones: tuple[int, ...] = ()  # absolute iterations
    checkpoint_dtype: str = "fp16"
    compile: bool = False  # torch.compile on CUDA
    schedule: str = "step"  # or "cosine": warm-up, then a cosine to 0 over both stages (milestones unused)
    warmup: int = 0  # cosine: linear warm-up iterations
    pick_mode: bool = False  # CPU: measure eager/compiled x fp32/bf16 first, train with the fastest
    arch_kwargs: dict[str, Any] = field(default_factory=dict, hash=False)
    pruner_options: dict[str, Any] = field(default_factory=dict, hash=False)  # e.g. ISS-P's alpha_ramp

    @property
    def name(self) -> str:
        """The zoo entry name, e.g. ``swinir-light_x4_iss-p_r0.95``."""
        return f"{self.arch}_x{self.scale}_{self.method}_r{self.ratio:g}"

    @property
    def group(self) -> str:
        """The comparison group, e.g. ``swinir-light_x4_r0.95``."""
        return group_name(self.arch, self.scale, self.ratio)

    def config(self, train_data: list[str], out: str | os.PathLike, **overrides: Any) -> TrainConfig:
        """The ``iss.train`` configuration of this cell (``overrides``: device, threads, compile...)."""
        base = TrainConfig(arch=self.arch, scale=self.scale, method=self.method, ratio=self.ratio)
        prune_iters = self.prune_iters if "prune_iters" in pruner_options(base) else 0
        fields = dict(
            arch=self.arch,
            scale=self.scale,
            method=self.method,
            ratio=self.ratio,
            iters=self.iters,
            prune_iters=prune_iters,
            batch=self.batch,
            patch=self.patch,
            lr=self.lr,
            seed=self.seed,
            milestones=tuple(m - prune_iters for m in self.milestones),
            train_data=tuple(train_data),
            out=str(out),
            arch_kwargs=dict(self.arch_kwargs),
            pruner_options=dict(self.pruner_options),
            checkpoint_dtype=self.checkpoint_dtype,
            schedule=self.schedule,
            warmup=self.warmup,
            pick_mode=self.pick_mode,
            val_data=None,
            log_every=100,
            save_every=max(self.iters // 20, 50),
        )
        return TrainConfig(**{**fields, **overrides})

    def to_dict(self) -> dict[str, Any]:
        return {k: list(v) if isinstance(v, tuple) else v for k, v in self.__dict__.items()}

    def matches(self, recorded: dict[str, Any]) -> bool:
        """Whether ``recorded`` (an earlier ``to_dict``) is this cell; a field missing from it, written before
        the field existed, stands for the field's default."""
        defaults = {
            f.name: f.default_factory() if f.default_factory is not MISSING else f.default
            for f in dataclasses.fields(self)
            if f.default is not MISSING or f.default_factory is not MISSING
        }
        defaults = {k: list(v) if isinstance(v, tuple) else v for k, v in defaults.items()}
        return {**defaults, **recorded} == self.to_dict()


@dataclass(frozen=True)
class Plan:
    """A parsed plan: training folders and evaluation sets, and the cells in priority order."""

    train_data: list[str]
    eval: list[str]
    cells: list[Cell]
    path: Path | None = None
    curves: dict[str, int] = field(default_factory=dict)  # cell name: validate every so many iterations

    def cell(self, name: str) -> Cell:
        """The cell called ``name``; ``KeyError`` lists the plan's cells."""
        for c in self.cells:
            if c.name == name:
                return c
        raise KeyError(f"no cell {name!r} in the plan; it has: {', '.join(c.name for c in self.cells)}")


def load_plan(path: str | os.PathLike) -> Plan:
    """Read and check a plan; errors name the group and field."""
    path = Path(path)
    try:
        raw = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ValueError(f"cannot read plan {path}: {e}") from e
    if not isinstance(raw, dict) or raw.get("version") != 1 or not isinstance(raw.get("groups"), list):
        raise ValueError(f'{path}: expected {{"version": 1, "groups": [...]}}')
    known = {"version", "description", "train_data", "eval", "defaults", "groups", "curves"}
    if unknown := sorted(set(raw) - known):
        raise ValueError(f"{path}: unknown fields {unknown}")
    defaults = raw.get("defaults", {})
    cells = [
        cell
        for i, group in enumerate(raw["groups"])
        for cell in _cells(defaults, group, f"{path}: group {i}")
    ]
    names = [c.name for c in cells]
    if dupes := sorted({n for n in names if names.count(n) > 1}):
        raise ValueError(f"{path}: cells planned twice: {', '.join(dupes)}")
    budgets: dict[str, Cell] = {}
    for c in cells:  # a group may be listed in parts (priority first); every part has the same budget
        first = budgets.setdefault(c.group, c)
        if _budget(first) != _budget(c):
            raise ValueError(f"{path}: {c.name} has another budget than {first.name} of the same group")
    curves = raw.get("curves", {})
    if not isinstance(curves, dict) or not all(isinstance(v, int) and v > 0 for v in curves.values()):
        raise ValueError(f'{path}: "curves" should map cell names to positive iteration counts')
    if unplanned := sorted(set(curves) - set(names)):
        raise ValueError(f"{path}: curves of cells not in the plan: {', '.join(unplanned)}")
    if curves and not raw.get("eval"):
        raise ValueError(f'{path}: "curves" validate on the first "eval" set; the plan has none')
    return Plan(list(raw.get("train_data", [])), list(raw.get("eval", [])), cells, path, dict(curves))


def _budget(cell: Cell) -> dict[str, Any]:
    """What must be equal across a comparison group: everything but the method and its own options (ISS-P's
    alpha ramp is ISS-P's, like its alpha)."""
    return {k: v for k, v in cell.to_dict().items() if k not in ("method", "pruner_options")}


def _cells(defaults: dict[str, Any], group: dict[str, Any], where: str) -> list[Cell]:
    """The cells of one group (defaults below the group's own fields), checked."""
    fields = {
        "batch": 32,
        "patch": 64,
        "lr": 2e-4,
        "seed": 0,
        "prune_iters": 0,
        "milestones": [],
        **defaults,
        **group,
    }
    unknown = sorted(set(fields) - set(GROUP_FIELDS))
    missing = [k for k in _REQUIRED if k not in fields]
    if unknown or missing:
        raise ValueError(f"{where}: unknown fields {unknown}" if unknown else f"{where}: missing {missing}")
    for key, kind in GROUP_FIELDS.items():
        value = fields.get(key)
        if value is not None and not isinstance(value, (int, float) if kind is float else kind):
            raise ValueError(f"{where}: {key!r} should be {kind.__name__}, got {value!r}")
    iters, prune_iters, milestones = fields["iters"], fields["prune_iters"], fields["milestones"]
    if not 0 <= prune_iters < iters or any(not prune_iters < m < iters for m in milestones):
        raise ValueError(
            f"{where}: need 0 <= prune_iters < milestones < iters, got {prune_iters}, {milestones}, {iters}"
        )
    fields.pop("note", None)
    methods = fields.pop("methods")
    fields["milestones"] = tuple(sorted(milestones))
    cells = [Cell(method=m, **fields) for m in methods]
    for cell in cells:
        # TrainConfig's own checks (ratio, scale, ...), then the method's options
        pruner_options(cell.config(["."], "."))
    return cells


def fit_budgets(
    path: str | os.PathLike,
    throughput: dict[str, Any],
    cell_minutes: float,
    *,
    jobs: int = 1,
    skip: set[str] = frozenset(),
) -> dict[str, int]:
    """Rewrite the plan's iterations so that each cell trains about ``cell_minutes`` at the measured speed.

    ``throughput`` is ``benchmarks/train_throughput.py``'s JSON: the ``fast`` rows give steps/s per process
    for (arch, batch, patch) with ``jobs`` processes at once (else one). K_p becomes half the budget and the
    LR halves at 80% and 90% of it. Groups in ``skip`` (already started) or not measured keep their budget.
    Returns the new iterations per group (0: not measured).
    """
    path = Path(path)
    raw = json.loads(path.read_text())
    defaults = raw.get("defaults", {})
    budgets: dict[str, int] = {}
    for group in raw["groups"]:
        fields = {"batch": 32, "patch": 64, **defaults, **group}
        name = f"{fields['arch']}_x{fields['scale']}_r{fields['ratio']:g}"
        if name in skip:
            continue
        if name not in budgets:
            rate = _steps_per_second(throughput, fields["arch"], fields["batch"], fields["patch"], jobs)
            budgets[name] = max(100, int(cell_minutes * 60 * rate) // 100 * 100) if rate else 0
        iters = budgets[name]
        if not iters:  # not measured: the group keeps its budget
            continue
        group.update(iters=iters, prune_iters=iters // 2, milestones=[iters * 8 // 10, iters * 9 // 10])
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(raw, indent=1) + "\n")
    load_plan(tmp)  # still a valid plan
    os.replace(tmp, path)
    return budgets


def _steps_per_second(
    throughput: dict[str, Any], arch: str, batch: int, patch: int, jobs: int
) -> float | None:
    """The measured fast-mode steps/s per process for this configuration (``jobs`` at once if measured),
    None if it was not measured."""
    rows = [r for r in throughput["rows"] if r["mode"] == "fast" and (r["arch"], r["batch"], r["patch"]) ==
            (arch, batch, patch)]  # fmt: skip
    row = next((r for r in rows if r["jobs"] == jobs), None) or next(
        (r for r in rows if r["jobs"] == 1), None
    )
    return float(row["steps_per_second"]) if row else None
