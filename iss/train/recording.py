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
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file
from torch import nn

RUNS = ("iss-p", "iht")
EXAMPLES_DIR = Path("assets", "examples").resolve()  # the repository's photos: training runs at its root
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


def save_recording(
    folder: str | Path,
    config: dict[str, Any],
    traces: dict[str, RunTrace],
    *,
    iterations_done: int | None = None,
) -> Path:
    """Write ``run.json`` and ``series.npz`` for ``traces`` (keyed by run); ``iterations_done`` where the
    traces were thinned (default: one entry per iteration)."""
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
        "iterations_done": len(first.iterations) if iterations_done is None else iterations_done,
        "finetune_from": {run: trace.finetune_from for run, trace in traces.items()},
    }
    (folder / "run.json").write_text(json.dumps(config, indent=1))
    return folder


def recording_config(folder: str | Path) -> dict[str, Any]:
    """A recording's ``run.json`` alone (cell, budget, layers, states), without reading its series."""
    return json.loads((Path(folder) / "run.json").read_text())


def load_recording(folder: str | Path) -> tuple[dict[str, Any], dict[str, RunTrace]]:
    """Read a recording written by ``save_recording``: (config, {run: trace})."""
    folder = Path(folder)
    if not (folder / "run.json").is_file() or not (folder / "series.npz").is_file():
        raise FileNotFoundError(f"no recording in {folder} (expected run.json and series.npz)")
    config = recording_config(folder)
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


def drop_states(folder: str | Path) -> list[Path]:
    """Delete a recording's resumable states, keeping its series; returns the files removed."""
    folder = Path(folder)
    config = recording_config(folder)
    removed = [folder / s["file"] for s in config.get("states", []) if (folder / s["file"]).is_file()]
    for path in removed:
        path.unlink()
    (folder / "run.json").write_text(json.dumps({**config, "states": []}, indent=1))
    return removed


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


def state_lr(path: str | Path) -> float | None:
    """The learning rate of the first run's saved optimizer in a ``save_state`` file (where its schedule was
    at that iteration); None when the file holds no optimizer state."""
    with safe_open(str(path), framework="pt") as f:
        skeletons = json.loads(f.metadata().get("optimizer", "{}"))
    for skeleton in skeletons.values():
        groups = dict(skeleton["__dict__"]).get("param_groups", {"__list__": []})["__list__"]
        if groups:
            return float(dict(groups[0]["__dict__"])["lr"])
    return None


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


# ------------------------------------------------------------------------------------ recording a train run


def validation_pair(scale: int, size: int = 96) -> tuple[np.ndarray, np.ndarray]:
    """A small fixed (LR, HR) pair for the quick validation PSNR: the centre of the first bundled photo."""
    from iss.data import modcrop, read_image
    from iss.data.resize import imresize

    hr = read_image(sorted(EXAMPLES_DIR.glob("*.png"))[0])
    h, w = hr.shape[:2]
    side = min(size - size % int(scale), h, w)
    y0, x0 = (h - side) // 2, (w - side) // 2
    hr = modcrop(hr[y0 : y0 + side, x0 : x0 + side], int(scale))
    return imresize(hr, 1 / int(scale)), hr


def validate(model: nn.Module, pair: tuple[np.ndarray, np.ndarray], scale: int) -> float:
    """PSNR (Y) of ``model`` on the validation pair."""
    from iss.data.metrics import psnr_y
    from iss.infer import upscale_array

    lr, hr = pair
    return psnr_y(upscale_array(model, lr), hr, crop_border=int(scale))


class TrainRecorder:
    """Records one ``iss.train`` run of ISS-P or IHT in this format, in ``folder``.

    Fed every ``TrainEvent``: the telemetry of each iteration (``iss.pruning.TelemetryRecorder``: no host sync
    per step, read back on checked iterations), a quick validation PSNR every ``validate_every`` iterations,
    and resumable states with the optimizer's moments (bf16) at the iterations in ``states``. The recording is
    written whenever the run saves its state, so a paused or killed run resumes its recording with it.
    """

    def __init__(self, folder: str | Path, run: str, config: dict[str, Any], *, states: tuple[int, ...] = (),
                 validate_every: int = 100) -> None:  # fmt: skip
        self.folder, self.run, self.config = Path(folder), run, dict(config)
        self.states, self.validate_every = set(states), validate_every
        self.pair = validation_pair(config["scale"])
        self.trace: RunTrace | None = None
        self.telemetry: Any = None
        self.began, self.seconds = time.perf_counter(), 0.0

    def observe(self, event: Any) -> None:
        """Take one iteration's ``TrainEvent``."""
        if self.trace is None:
            self._start(event.trainer.pruner, event.iteration - 1)
        self.telemetry.record(event.trainer.last_loss)
        if event.iteration % self.validate_every == 0:
            self.trace.val_iterations.append(event.iteration)
            self.trace.val_psnr.append(validate(event.model, self.pair, self.config["scale"]))
        if event.iteration in self.states:
            self._save_state(event)
        if event.loss is not None:  # the host waited for this iteration anyway
            self.flush()
        if event.saved:
            self.write()

    def flush(self) -> None:
        """Move the queued iterations' telemetry into the trace."""
        for stats, loss in self.telemetry.flush() if self.telemetry else []:
            self.trace.observe(stats)
            self.trace.commit(stats.iteration, loss)

    def write(self) -> None:
        """Write ``run.json`` and ``series.npz`` of what was recorded so far."""
        if self.trace is None:
            return
        self.flush()
        now = time.perf_counter()
        self.seconds, self.began = self.seconds + now - self.began, now
        save_recording(
            self.folder, {**self.config, "seconds": round(self.seconds, 1)}, {self.run: self.trace}
        )

    def _start(self, pruner: Any, start: int) -> None:
        """A new trace, or the recorded one cut back to ``start`` (a resumed run repeats what came after)."""
        from iss.pruning import TelemetryRecorder

        self.telemetry = TelemetryRecorder(pruner)
        self.trace = RunTrace(layers=pruner.layer_names)
        if (self.folder / "run.json").is_file():
            config, traces = load_recording(self.folder)
            self.seconds = config.get("seconds", 0.0)
            self.config["states"] = [s for s in config.get("states", []) if s["iteration"] <= start]
            self.trace = _cut(traces[self.run], start)
        self.config.setdefault("states", [])

    def _save_state(self, event: Any) -> None:
        """A resumable state of this run, the optimizer's moments in bf16 (loading casts them back)."""
        trainer = event.trainer
        optimizer = trainer.optimizer.state_dict()  # holds the live state: copy, never change it
        optimizer["state"] = {
            i: {
                k: v.bfloat16() if k != "step" and v.is_floating_point() else v.clone()
                for k, v in state.items()
            }
            for i, state in optimizer["state"].items()
        }
        name = f"state_{event.iteration}.safetensors"
        meta = {"iteration": event.iteration, **{k: self.config[k] for k in _STATE_KEYS}}
        self.folder.mkdir(parents=True, exist_ok=True)
        save_state(self.folder / name, {self.run: event.model}, {self.run: trainer.pruner}, meta,
                   {self.run: optimizer})  # fmt: skip
        self.config["states"].append({"iteration": event.iteration, "file": name})


_STATE_KEYS = ("arch", "scale", "ratio", "alpha", "prune_iters", "arch_kwargs")


def _cut(trace: RunTrace, iteration: int) -> RunTrace:
    """``trace`` up to and including ``iteration``."""
    keep = sum(1 for i in trace.iterations if i <= iteration)
    cut = RunTrace(layers=trace.layers, finetune_from=trace.finetune_from)
    cut.iterations = trace.iterations[:keep]
    for series in _SCALAR_SERIES:
        setattr(cut, series, getattr(trace, series)[:keep])
    for series in _LAYER_SERIES:
        setattr(cut, series, {name: values[:keep] for name, values in getattr(trace, series).items()})
    val = sum(1 for i in trace.val_iterations if i <= iteration)
    cut.val_iterations, cut.val_psnr = trace.val_iterations[:val], trace.val_psnr[:val]
    if cut.finetune_from is not None and cut.finetune_from > iteration:
        cut.finetune_from = None
    return cut


MAX_POINTS = 6000  # entries per series of a merged recording: about 3.7 MB for SwinIR-light's ISS-P and IHT


def merge_recordings(parts: dict[str, Path], out: str | Path, config: dict[str, Any]) -> Path:
    """One recording in ``out`` from single-run recordings (``{run: folder}``, e.g. the zoo factory's ISS-P
    and IHT cells): both series, thinned to at most ``MAX_POINTS`` entries (``thin``), and the latest state
    every part saved, as one file (what a live run starts from by default; earlier ones are left out: ~12 MB
    each for SwinIR-light, and the repository that bundles recordings must still fit a GPU round's
    transfer)."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    traces, configs = {}, {}
    for run, folder in parts.items():
        configs[run], found = load_recording(folder)
        traces[run] = found[run]
    common = set.intersection(  # states that came back for every part (zoo export may leave some out)
        *({s["iteration"] for s in configs[run].get("states", []) if (Path(folder) / s["file"]).is_file()}
          for run, folder in parts.items())
    )  # fmt: skip
    states = []
    for iteration in sorted(common)[-1:]:
        name = f"state_{iteration}.safetensors"
        tensors: dict[str, torch.Tensor] = {}
        metadata: dict[str, Any] = {}
        for folder in parts.values():
            path = Path(folder) / name
            tensors.update(load_file(str(path)))
            with safe_open(str(path), framework="pt") as f:
                for key, value in f.metadata().items():
                    metadata[key] = {**metadata.get(key, {}), **json.loads(value)} if key != "meta" else value
        save_file(tensors, str(out / name), metadata={k: v if k == "meta" else json.dumps(v)
                                                      for k, v in metadata.items()})  # fmt: skip
        states.append({"iteration": iteration, "file": name})
    seconds = sum(c.get("seconds", 0.0) for c in configs.values())
    done = min(t.iterations[-1] if t.iterations else 0 for t in traces.values())  # from iteration 1
    timing = {"seconds": round(seconds, 1), "seconds_per_iteration": seconds / max(done, 1)}
    every = math.ceil(max(len(t.iterations) for t in traces.values()) / MAX_POINTS)
    traces = {run: thin(trace, every) for run, trace in traces.items()}
    config = {**config, **timing, "states": states, "every": every}
    return save_recording(out, config, traces, iterations_done=done)


def thin(trace: RunTrace, every: int) -> RunTrace:
    """``trace`` with one entry per window of ``every`` iterations (1..every, every+1..2 every, ...: two runs'
    windows line up even where one started recording late), at its last recorded iteration: the window's
    mean of the per-iteration series (loss, flips, gradient statistics; NaN where none was reported) and the
    last value of the distances, which are states rather than rates. Validation points stay as they are."""
    iterations = np.asarray(trace.iterations)
    if every <= 1 or len(iterations) == 0:
        return trace
    window = (iterations - 1) // every
    starts = np.flatnonzero(np.diff(window, prepend=window[0] - 1))
    ends = np.append(starts[1:], len(iterations)) - 1

    def means(values: list[float]) -> list[float]:
        a = np.asarray(values, np.float64)
        found = np.isfinite(a)
        sums, counts = np.add.reduceat(np.where(found, a, 0.0), starts), np.add.reduceat(found, starts)
        with np.errstate(invalid="ignore"):
            return (sums / counts).tolist()  # 0 / 0: NaN

    def lasts(values: list[float]) -> list[float]:
        return np.asarray(values, np.float64)[ends].tolist()

    thinned = RunTrace(layers=trace.layers, finetune_from=trace.finetune_from)
    thinned.iterations = iterations[ends].tolist()
    thinned.loss, thinned.flips_total = means(trace.loss), means(trace.flips_total)
    thinned.distance_first = lasts(trace.distance_first)
    thinned.distance_window = lasts(trace.distance_window)
    for series in _LAYER_SERIES:
        setattr(thinned, series, {name: means(values) for name, values in getattr(trace, series).items()})
    thinned.val_iterations, thinned.val_psnr = list(trace.val_iterations), list(trace.val_psnr)
    return thinned
