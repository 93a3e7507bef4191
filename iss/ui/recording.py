"""Per-iteration telemetry of ISS-P vs IHT runs (live or recorded) and its compact on-disk form.

A recording is a folder (``assets/recordings/<name>/``) holding:

- ``run.json``: the run's configuration, the layers traced, seconds per iteration, and the saved states;
- ``series.npz`` (compressed): per run ``<run>/<series>`` arrays, ``float16`` for losses and per-mille counts,
  ``float16`` log10 for gradient statistics (``<series>_log10``: variances span a dozen decades);
- ``state_<iteration>.safetensors``: resumable states of both runs: model parameters in ``float16`` under
  ``<run>.model.<name>`` (buffers are rebuilt by the architecture) and the pruner's ``state_dict``
  flattened under ``<run>.pruner.<path>``, bool masks bit-packed (``numpy.packbits``); the pruner's non-tensor
  entries go to the JSON metadata field ``pruner`` (no pickle anywhere). Optionally, per run, the
  optimizer's ``state_dict`` (e.g. ``torch.optim.Adam``: moments as saved, usually ``float32``) flattened the
  same way under ``<run>.optimizer.<path>``, its skeleton in the metadata field ``optimizer``. A state without
  it (older recordings) still loads; the resumed run then restarts the optimizer (Adam's first steps are
  larger).

``RunTrace``, ``save_recording``/``load_recording`` and ``save_state``/``load_state`` are a plain library API
(no gradio): anything that trains ISS-P and IHT, such as separate ``iss.train`` runs, can write a recording.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file
from torch import nn

RUNS = ("iss-p", "iht")
_SCALAR_SERIES = ("loss", "flips_total", "distance_first", "distance_window")
_LAYER_SERIES = ("flips", "grad_norm", "grad_var")
_LOG10_SERIES = ("grad_norm", "grad_var")  # span many decades (variances ~1e-12): stored as float16 log10


@dataclass
class RunTrace:
    """One run's telemetry, one entry per iteration: what the analysis figures plot."""

    layers: list[str]
    iterations: list[int] = field(default_factory=list)
    loss: list[float] = field(default_factory=list)
    flips_total: list[float] = field(default_factory=list)
    distance_first: list[float] = field(default_factory=list)
    distance_window: list[float] = field(default_factory=list)
    flips: dict[str, list[float]] = field(default_factory=dict)
    grad_norm: dict[str, list[float]] = field(default_factory=dict)
    grad_var: dict[str, list[float]] = field(default_factory=dict)
    val_iterations: list[int] = field(default_factory=list)
    val_psnr: list[float] = field(default_factory=list)
    finetune_from: int | None = None
    _pending: Any = None

    def __post_init__(self) -> None:
        for series in _LAYER_SERIES:
            getattr(self, series).update(
                {name: [] for name in self.layers if name not in getattr(self, series)}
            )

    def observe(self, stats: Any) -> None:
        """Pruner callback: keep the ``StepStats`` until ``commit`` pairs it with the step's loss."""
        self._pending = stats

    def commit(self, iteration: int, loss: float) -> None:
        """Append one iteration: the loss returned by ``Trainer.step`` and the telemetry seen during it."""
        stats, self._pending = self._pending, None
        self.iterations.append(iteration)
        self.loss.append(float(loss))
        self.flips_total.append(_number(getattr(stats, "flips_permille_total", None)))
        self.distance_first.append(_number(getattr(stats, "distance_first_permille", None)))
        self.distance_window.append(_number(getattr(stats, "distance_window_permille", None)))
        for series, source in (
            ("flips", "flips_permille"),
            ("grad_norm", "grad_norm"),
            ("grad_var", "grad_var"),
        ):
            values = getattr(stats, source, None) or {}
            for name in self.layers:
                getattr(self, series)[name].append(_number(values.get(name)))
        if (
            stats is not None
            and getattr(stats, "stage", "prune") == "finetune"
            and self.finetune_from is None
        ):
            self.finetune_from = iteration

    def to_arrays(self, prefix: str) -> dict[str, np.ndarray]:
        """The series as named arrays (see the module docstring for dtypes)."""
        arrays = {f"{prefix}/iterations": np.asarray(self.iterations, np.int32)}
        for series in _SCALAR_SERIES:
            arrays[f"{prefix}/{series}"] = np.asarray(getattr(self, series), np.float16)
        for series in _LAYER_SERIES:
            for i, name in enumerate(self.layers):
                values = np.asarray(getattr(self, series)[name], np.float64)
                if series in _LOG10_SERIES:
                    with np.errstate(divide="ignore"):
                        arrays[f"{prefix}/{series}_log10/{i}"] = np.log10(values).astype(np.float16)
                else:
                    arrays[f"{prefix}/{series}/{i}"] = values.astype(np.float16)
        arrays[f"{prefix}/val_iterations"] = np.asarray(self.val_iterations, np.int32)
        arrays[f"{prefix}/val_psnr"] = np.asarray(self.val_psnr, np.float32)
        return arrays

    @classmethod
    def from_arrays(cls, arrays: Any, prefix: str, layers: list[str], finetune_from: int | None) -> RunTrace:
        """Inverse of ``to_arrays`` (values come back as Python floats)."""
        trace = cls(layers=list(layers), finetune_from=finetune_from)
        trace.iterations = arrays[f"{prefix}/iterations"].tolist()
        for series in _SCALAR_SERIES:
            setattr(trace, series, arrays[f"{prefix}/{series}"].astype(np.float64).tolist())
        for series in _LAYER_SERIES:
            for i, name in enumerate(layers):
                log_key = f"{prefix}/{series}_log10/{i}"
                if log_key in arrays:
                    values = 10.0 ** arrays[log_key].astype(np.float64)
                else:  # written before the log10 encoding (float32 values)
                    values = arrays[f"{prefix}/{series}/{i}"].astype(np.float64)
                getattr(trace, series)[name] = values.tolist()
        trace.val_iterations = arrays[f"{prefix}/val_iterations"].tolist()
        trace.val_psnr = arrays[f"{prefix}/val_psnr"].astype(np.float64).tolist()
        return trace


def _number(value: Any) -> float:
    """A telemetry value as float, NaN when the pruner did not report it this iteration."""
    if value is None:
        return math.nan
    if isinstance(value, torch.Tensor):
        return float(value.item())
    return float(value)


def save_recording(folder: str | Path, config: dict[str, Any], traces: dict[str, RunTrace]) -> Path:
    """Write ``run.json`` and ``series.npz`` for ``traces`` (keyed by run)."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    arrays: dict[str, np.ndarray] = {}
    for run, trace in traces.items():
        arrays.update(trace.to_arrays(run))
    np.savez_compressed(folder / "series.npz.tmp.npz", **arrays)
    (folder / "series.npz.tmp.npz").replace(folder / "series.npz")
    first = next(iter(traces.values()))
    config = {
        **config,
        "layers": first.layers,
        "iterations_done": len(first.iterations),
        "finetune_from": {run: trace.finetune_from for run, trace in traces.items()},
    }
    (folder / "run.json").write_text(json.dumps(config, indent=1))
    return folder


def load_recording(folder: str | Path) -> tuple[dict[str, Any], dict[str, RunTrace]]:
    """Read a recording written by ``save_recording``: (config, {run: trace})."""
    folder = Path(folder)
    if not (folder / "run.json").is_file() or not (folder / "series.npz").is_file():
        raise FileNotFoundError(f"no recording in {folder} (expected run.json and series.npz)")
    config = json.loads((folder / "run.json").read_text())
    with np.load(folder / "series.npz") as arrays:
        traces = {
            run: RunTrace.from_arrays(arrays, run, config["layers"], config["finetune_from"].get(run))
            for run in RUNS
            if f"{run}/iterations" in arrays
        }
    return config, traces


def list_recordings(root: str | Path) -> list[Path]:
    """Recording folders under ``root`` (each holding ``run.json``), sorted by name."""
    root = Path(root)
    return sorted(p.parent for p in root.glob("*/run.json")) if root.is_dir() else []


def save_state(
    path: str | Path,
    models: dict[str, nn.Module],
    pruners: dict[str, Any],
    meta: dict,
    optimizers: dict[str, dict[str, Any]] | None = None,
) -> Path:
    """Save resumable states of several runs in one safetensors file (weights fp16, pruner state as is).

    ``optimizers`` maps a run to its optimizer's ``state_dict()`` (kept as is); runs left out have none.
    """
    tensors: dict[str, torch.Tensor] = {}
    pruner_meta: dict[str, Any] = {}
    for run, model in models.items():
        for name, param in model.named_parameters():
            tensors[f"{run}.model.{name}"] = param.detach().cpu().half()
        pruner_meta[run] = _flatten(pruners[run].state_dict(), f"{run}.pruner.", tensors)
    metadata = {"meta": json.dumps(meta), "pruner": json.dumps(pruner_meta)}
    if optimizers:
        skeletons = {run: _flatten(state, f"{run}.optimizer.", tensors) for run, state in optimizers.items()}
        metadata["optimizer"] = json.dumps(skeletons)
    path = Path(path)
    tensors = {k: v.contiguous() for k, v in tensors.items()}
    save_file(tensors, str(path), metadata=metadata)
    return path


def optimizer_runs(path: str | Path) -> list[str]:
    """Runs whose optimizer state a ``save_state`` file holds (reads only the header)."""
    with safe_open(str(path), framework="pt") as f:
        return list(json.loads(f.metadata().get("optimizer", "{}")))


def load_state(
    path: str | Path,
    models: dict[str, nn.Module],
    pruners: dict[str, Any],
    optimizers: dict[str, torch.optim.Optimizer] | None = None,
) -> dict:
    """Load a ``save_state`` file into ``models`` and ``pruners`` (same runs); returns its ``meta``.

    The optimizers in ``optimizers`` (built over the loaded models' parameters, on their final device) get
    their saved state where the file has one (``optimizer_runs``) and are left fresh otherwise.
    """
    with safe_open(str(path), framework="pt") as f:
        metadata = f.metadata()
    tensors = load_file(str(path))
    pruner_meta = json.loads(metadata["pruner"])
    optimizer_meta = json.loads(metadata.get("optimizer", "{}"))
    for run, model in models.items():
        prefix = f"{run}.model."
        params = dict(model.named_parameters())
        state = {k[len(prefix) :]: v for k, v in tensors.items() if k.startswith(prefix)}
        if set(state) != set(params):
            raise ValueError(f"{path}: the saved {run} parameters do not match this architecture")
        with torch.no_grad():
            for name, value in state.items():
                params[name].copy_(value.to(params[name].dtype))
        pruners[run].load_state_dict(_unflatten(pruner_meta[run], f"{run}.pruner.", tensors))
    for run, optimizer in (optimizers or {}).items():
        if run in optimizer_meta:
            optimizer.load_state_dict(_unflatten(optimizer_meta[run], f"{run}.optimizer.", tensors))
    return json.loads(metadata["meta"])


def _flatten(value: Any, key: str, tensors: dict[str, torch.Tensor]) -> Any:
    """JSON skeleton of ``value`` with every tensor moved into ``tensors`` under a path key."""
    if isinstance(value, torch.Tensor) and value.dtype == torch.bool:
        tensors[key] = torch.from_numpy(np.packbits(value.detach().cpu().numpy().ravel()))
        return {"__bits__": key, "shape": list(value.shape)}
    if isinstance(value, torch.Tensor):
        tensors[key] = value.detach().cpu()
        return {"__tensor__": key}
    if isinstance(value, dict):
        return {"__dict__": [[k, _flatten(v, f"{key}{k}/", tensors)] for k, v in value.items()]}
    if isinstance(value, list | tuple):
        return {"__list__": [_flatten(v, f"{key}{i}/", tensors) for i, v in enumerate(value)]}
    return value


def _unflatten(skeleton: Any, key: str, tensors: dict[str, torch.Tensor]) -> Any:
    """Inverse of ``_flatten``."""
    if isinstance(skeleton, dict) and "__bits__" in skeleton:
        shape = skeleton["shape"]
        bits = np.unpackbits(tensors[skeleton["__bits__"]].numpy(), count=math.prod(shape))
        return torch.from_numpy(bits.astype(bool)).reshape(shape)
    if isinstance(skeleton, dict) and "__tensor__" in skeleton:
        return tensors[skeleton["__tensor__"]]
    if isinstance(skeleton, dict) and "__dict__" in skeleton:
        return {k: _unflatten(v, key, tensors) for k, v in skeleton["__dict__"]}
    if isinstance(skeleton, dict) and "__list__" in skeleton:
        return [_unflatten(v, key, tensors) for v in skeleton["__list__"]]
    return skeleton
