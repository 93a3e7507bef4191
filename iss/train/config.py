"""The configuration of a training run (``TrainConfig``), its presets and the options it gives the pruner.

``TrainConfig`` holds everything that defines a run of ``iss.train`` and checks it on creation. Presets give
schedule defaults that explicit fields override: ``paper`` is the official x4 schedule of the ISS-P code
(batch 32, LR patch 64, K_p ~100k, fine-tuning lengths and milestones as the official yml files, milestones
counted from the start of fine-tuning); ``cpu-tiny``/``cpu-short`` are short CPU schedules with
K_p = iters / 2 and milestones at the official fractions of a 500k fine-tuning.

Long schedules at a short budget (ISS-R, SRP, ASSL): ``pruner_options`` passes only ``prune_iters`` (K_p, the
whole pruning stage); ``iss.pruning.schedule`` keeps the official phase proportions inside it (SRP growth :
stabilise = 100,000 : 43,150; ASSL SSA : growth : stabilise = 17,260 : 100,000 : 43,150) with eta reaching its
official cap 0.5 at the end of the growth. Methods without a pruning stage (``l1``, ``scratch``) get no
``prune_iters`` and fine-tune from the first iteration.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

# Official pruning-stage lengths (official_iss.md section 3/4): growth 100,020, SRP/ASSL stabilise, ASSL SSA.
OFFICIAL_REG_ITERS = 100_020
OFFICIAL_STABILIZE = 43_150
OFFICIAL_SSA = 17_260
_PAPER_PRUNE_ITERS = {
    "scratch": 0,
    "l1": 0,
    "srp": OFFICIAL_REG_ITERS + OFFICIAL_STABILIZE,
    "assl": OFFICIAL_SSA + OFFICIAL_REG_ITERS + OFFICIAL_STABILIZE,
}  # others (iss-p, iht, iss-r): OFFICIAL_REG_ITERS


@dataclass
class TrainConfig:
    """Everything that defines a training run; checked on creation (``ValueError`` names the field)."""

    arch: str = "swinir-light"
    scale: int = 4
    method: str = "iss-p"
    ratio: float = 0.95
    alpha: float | None = None  # ISS-P shrink factor; None: the pruner's default (0.95, as the README)
    iters: int = 2000  # total iterations, pruning + fine-tuning
    prune_iters: int = 1000  # K_p: length of the pruning stage
    batch: int = 4
    patch: int = 24  # LR patch size (the HR patch is scale * patch)
    lr: float = 2e-4
    betas: tuple[float, float] = (0.9, 0.99)
    milestones: tuple[int, ...] = ()  # fine-tuning iterations at which the LR halves
    gamma: float = 0.5
    schedule: str = "step"  # step: constant while pruning, then milestones; cosine: warm-up + cosine to 0
    warmup: int = 0  # cosine: iterations of linear warm-up from 0 to lr
    train_data: tuple[str, ...] = ()
    val_data: str | None = None  # a benchmark set folder, e.g. .../benchmarks/Set5
    val_every: int = 500
    save_every: int = 500  # resumable state.pt every N iterations (and at the end)
    log_every: int = 10
    out: str | None = None
    seed: int = 0
    device: str = "auto"  # auto: cuda when available
    amp: bool | None = None  # bf16 autocast; None: on for CUDA, off on CPU
    compile: bool = False
    pick_mode: bool = False  # CPU: measure eager/compiled x fp32/bf16 first, train with the fastest
    workers: int = 0
    threads: int | None = None
    arch_kwargs: dict[str, Any] = field(default_factory=dict)
    pruner_options: dict[str, Any] = field(default_factory=dict)
    mask_check_every: int = 100  # distributed runs: compare a mask checksum across ranks every N iterations
    data_on_device: bool | None = None  # cut patches on the training device (None: on CUDA); same batches
    checkpoint_dtype: str = "fp32"  # kept values of the final checkpoint: fp32 or fp16

    def __post_init__(self) -> None:
        self.betas = tuple(float(b) for b in self.betas)
        self.milestones = tuple(int(m) for m in self.milestones)
        self.train_data = tuple(str(d) for d in self.train_data)
        checks = {
            "scale": self.scale in (2, 3, 4, 8),
            "ratio": 0.0 <= self.ratio < 1.0,
            "alpha": self.alpha is None or 0.0 <= self.alpha < 1.0,
            "iters": self.iters > 0,
            "prune_iters": 0 <= self.prune_iters <= self.iters,
            "batch": self.batch > 0,
            "patch": self.patch >= 4,
            "lr": self.lr > 0,
            "betas": len(self.betas) == 2 and all(0.0 <= b < 1.0 for b in self.betas),
            "milestones": list(self.milestones) == sorted(self.milestones)
            and all(m > 0 for m in self.milestones),
            "gamma": 0.0 < self.gamma <= 1.0,
            "schedule": self.schedule in ("step", "cosine"),
            "warmup": 0 <= self.warmup < self.iters,
            "val_every": self.val_every > 0,
            "save_every": self.save_every > 0,
            "log_every": self.log_every > 0,
            "workers": self.workers >= 0,
            "mask_check_every": self.mask_check_every > 0,
            "checkpoint_dtype": self.checkpoint_dtype in ("fp32", "fp16"),
        }
        bad = [name for name, ok in checks.items() if not ok]
        if bad:
            values = ", ".join(f"{name}={getattr(self, name)!r}" for name in bad)
            raise ValueError(f"invalid TrainConfig: {values} (see TrainConfig for the allowed ranges)")

    @classmethod
    def from_preset(cls, name: str, **overrides: Any) -> TrainConfig:
        """A preset (``paper``, ``cpu-tiny``, ``cpu-short``) for ``arch``/``method``, ``overrides`` on top."""
        if name not in PRESETS:
            raise KeyError(f"unknown preset '{name}'; choose one of: {', '.join(PRESETS)}")
        arch = overrides.get("arch", cls.arch)
        method = overrides.get("method", cls.method)
        return cls(**{**PRESETS[name](arch, method, overrides.get("iters")), **overrides})

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-able values (tuples as lists)."""
        return json.loads(json.dumps(dataclasses.asdict(self)))


Preset = Callable[[str, str, "int | None"], dict[str, Any]]  # (arch, method, iters override) -> fields


def _paper(arch: str, method: str, iters: int | None = None) -> dict[str, Any]:
    """The official x4 schedules (official_iss.md section 6): batch 32, LR patch 64, K_p ~100k.

    ``iters`` overrides are taken as given (K_p stays official); fine-tuning lengths and milestones as the
    official yml files, milestones counted from the start of fine-tuning.
    """
    prune = _PAPER_PRUNE_ITERS.get(method, OFFICIAL_REG_ITERS)
    if arch == "edsr-l":
        finetune, milestones, lr = 300_000, (200_000,), 1e-4
    elif arch == "swinir-light" and method == "iss-p":
        finetune, milestones, lr = 200_000, (250_000, 400_000, 450_000, 475_000), 2e-4
    else:
        finetune, milestones, lr = 500_000, (250_000, 400_000, 450_000, 475_000), 2e-4
    return dict(
        batch=32, patch=64, lr=lr, iters=prune + finetune, prune_iters=prune, milestones=milestones,
        val_every=5000, save_every=5000, log_every=100,
    )  # fmt: skip


def _cpu(default_iters: int, patch: int) -> Preset:
    """A short CPU schedule: K_p = iters / 2, milestones at the official fractions of a 500k fine-tuning."""

    def preset(arch: str, method: str, iters: int | None = None) -> dict[str, Any]:
        iters = iters or default_iters
        finetune = iters // 2
        milestones = tuple(int(finetune * f) for f in (0.5, 0.8, 0.9, 0.95))
        return dict(
            batch=4, patch=patch, iters=iters, prune_iters=iters - finetune, milestones=milestones,
            val_every=max(iters // 4, 1), save_every=max(iters // 10, 1), log_every=10,
        )  # fmt: skip

    return preset


PRESETS: dict[str, Preset] = {
    "paper": _paper,
    "cpu-tiny": _cpu(200, 16),
    "cpu-short": _cpu(2000, 24),
}


def pruner_options(config: TrainConfig) -> dict[str, Any]:
    """Options for ``iss.pruning.build``: ``prune_iters`` and ``alpha`` where the method takes them, then
    ``config.pruner_options`` (checked here, so that a plan or command line is refused before training)."""
    from iss import pruning

    accepted = pruning.options(config.method)
    if unknown := sorted(set(config.pruner_options) - set(accepted)):
        raise ValueError(
            f"unknown pruner option(s) {unknown} for '{config.method}'; accepted: {', '.join(accepted)}"
        )
    options = {"prune_iters": config.prune_iters} if "prune_iters" in accepted else {}
    if config.alpha is not None:
        if "alpha" not in accepted:
            raise ValueError(f"method '{config.method}' has no alpha; drop --alpha")
        options["alpha"] = config.alpha
    return {**options, **config.pruner_options}
