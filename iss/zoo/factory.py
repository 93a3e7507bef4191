"""The zoo factory: train a plan's cells inside a time box, resumably, and turn them into zoo entries.

``python -m iss zoo train --plan checkpoints/zoo_plan.json --minutes M --work DIR`` trains the next
unfinished cells (``iss.zoo.plan``) for at most M minutes, each in its own process driving ``iss.train.train``
(``--jobs N`` runs N at once). Each cell keeps its run in ``DIR/<cell>/`` (``state.pt``, ``log.jsonl``,
``model.safetensors``) and a record, ``cell.json``: the plan cell, time, throughput, device, git commit and
the metrics of its compact checkpoint. A cell stops cleanly at the deadline and the next call continues it
exactly; finished cells are evaluated (``eval`` sets of the plan) within the same time box, image by image,
and a stopped evaluation goes on from the next image.
``zoo add`` merges finished cells into ``checkpoints/zoo.json``; ``zoo status`` shows the plan's progress.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from itertools import pairwise
from pathlib import Path
from typing import Any

import torch

from .manifest import DEFAULT_ZOO
from .plan import Cell, Plan, load_plan


@dataclass
class CellRecord:
    """``DIR/<cell>/cell.json``: what a cell is, how far it got, what it cost and how good it is."""

    cell: dict[str, Any]
    iterations: int = 0
    train_seconds: float = 0.0
    eval_seconds: float = 0.0
    device: str = ""
    jobs: int = 1
    git_commit: str = ""
    metrics: dict[str, dict[str, float]] | None = None
    partial: dict[str, list[list[float]]] = field(default_factory=dict)  # per-image scores of unfinished sets
    setups: list[dict[str, Any]] = field(default_factory=list)  # how each stretch of iterations trained

    def start(self, device: str, jobs: int) -> None:
        """Train on from ``iterations`` on ``device`` (its threads named) beside ``jobs - 1`` other cells:
        ``device`` and ``jobs`` are the latest, ``setups`` every stretch, so that a cell trained partly
        alone on both cores and partly beside another says so."""
        if not self.setups and self.device:  # recorded before setups were kept: its one known stretch
            self.setups.append({"from": 0, "device": self.device, "jobs": self.jobs})
        self.device, self.jobs = device, jobs
        stretch = {"from": self.iterations, "device": device, "jobs": jobs}
        if self.setups and self.setups[-1]["from"] == self.iterations:
            self.setups.pop()  # nothing trained the last way
        if not self.setups or (self.setups[-1]["device"], self.setups[-1]["jobs"]) != (device, jobs):
            self.setups.append(stretch)

    @property
    def trained(self) -> bool:
        return self.iterations >= self.cell["iters"]

    @property
    def steps_per_second(self) -> float:
        return self.iterations / self.train_seconds if self.train_seconds else 0.0

    def to_dict(self) -> dict[str, Any]:
        data = dict(self.__dict__)
        data["steps_per_second"] = round(self.steps_per_second, 3)
        data["images_per_second"] = round(self.steps_per_second * self.cell["batch"], 1)
        return data

    @classmethod
    def read(cls, folder: Path, cell: Cell) -> CellRecord:
        path = folder / "cell.json"
        if not path.is_file():
            return cls(cell.to_dict())
        data = json.loads(path.read_text())
        fields = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
        record = cls(**fields)
        if not cell.matches(record.cell):
            raise ValueError(
                f"{folder} was trained for a different plan cell ({record.cell}); the plan now says "
                f"{cell.to_dict()}. Use another --work folder, or delete {folder} to start the cell again."
            )
        record.cell = cell.to_dict()  # written in full from now on
        return record

    def write(self, folder: Path) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        tmp = folder / "cell.json.tmp"
        tmp.write_text(json.dumps(self.to_dict(), indent=1) + "\n")
        os.replace(tmp, folder / "cell.json")


# ------------------------------------------------------------------------------------------------ one cell


def run_cell(
    plan: Plan,
    name: str,
    work: Path,
    data_dir: Path,
    until: float,
    *,
    device: str = "auto",
    threads: int | None = None,
    jobs: int = 1,
) -> CellRecord:
    """Train (or continue) one cell until it is done or ``until`` (a ``time.time()``) comes; then evaluate
    it on the plan's sets, image by image, until ``until``. Returns the cell's record, also written to disk.
    SIGTERM pauses it cleanly at any point, however often it comes (a group kill and the factory's own)."""
    cell = plan.cell(name)
    folder = work / cell.name
    record = CellRecord.read(folder, cell)
    record.git_commit = record.git_commit or git_commit()
    if threads:
        torch.set_num_threads(threads)  # also when the cell only evaluates: its cores, as it trained
    with _on_sigterm() as terminated:
        deadline = time.monotonic() + (until - time.time())
        stop = lambda: terminated.is_set() or time.monotonic() >= deadline  # noqa: E731
        if not record.trained:  # a later evaluation-only call leaves device and jobs as they trained
            _train_cell(plan, cell, record, folder, data_dir, stop, device=device, threads=threads, jobs=jobs)
        if record.trained:
            benchmarks = data_dir / "benchmarks"
            evaluate_cell(record, folder, plan.eval, benchmarks, until, device=device, stop=terminated.is_set)
    return record


def _train_cell(
    plan: Plan,
    cell: Cell,
    record: CellRecord,
    folder: Path,
    data_dir: Path,
    stop: Callable[[], bool],
    *,
    device: str,
    threads: int | None,
    jobs: int,
) -> None:
    """Run ``cell``'s training loop until it is done or ``stop()``; update its record with every saved
    state, so that ``zoo status`` follows a cell under way and a cell killed outright says where it stands."""
    from iss.train import train

    cuda = device.startswith("cuda") or (device == "auto" and torch.cuda.is_available())
    config = cell.config(
        [str(data_dir / d) for d in plan.train_data],
        folder,
        device=device,
        threads=threads,
        compile=cell.compile and cuda,
        **_curve(plan, cell, data_dir),
    )
    recorder = _recorder(plan, cell, folder, config)
    record.start(device_name(config.device, config.threads), jobs)
    with _run_timer() as timer:

        def ticking_stop() -> bool:  # asked before every step and between the mode probes
            record.train_seconds += timer.tick()
            return stop()

        for event in train(config, resume=(folder / "state.pt").exists(), stop=ticking_stop):
            record.iterations = event.iteration
            if recorder:
                recorder.observe(event)
            if event.saved:
                record.train_seconds += timer.tick()
                record.write(folder)
        if recorder:
            recorder.write()
        record.train_seconds += timer.tick()
    record.write(folder)


def _curve(plan: Plan, cell: Cell, data_dir: Path) -> dict[str, Any]:
    """Validation settings of a cell whose learning curve the plan wants (none for the others)."""
    if cell.name not in plan.curves:
        return {}
    return {"val_data": str(data_dir / "benchmarks" / plan.eval[0]), "val_every": plan.curves[cell.name]}


@contextlib.contextmanager
def _on_sigterm() -> Iterator[threading.Event]:
    """An event set by SIGTERM (``kill``, ``zoo train`` being stopped) while in the block, so that cells
    pause cleanly instead of dying between two saved states."""
    terminated = threading.Event()
    previous = signal.signal(signal.SIGTERM, lambda *_: terminated.set())
    try:
        yield terminated
    finally:
        signal.signal(signal.SIGTERM, previous)


class RunTimer:
    """Seconds a process ran, leaving out the time it was stopped (``kill -STOP``, as when something is timed
    beside the factory): an interval between two ticks that saw a SIGCONT counts nothing, so a stop costs
    the step or image it interrupted instead of adding hours to a cell's minutes."""

    def __init__(self) -> None:
        self._last, self._continued = time.perf_counter(), False

    def tick(self) -> float:
        """Seconds since the last tick (or the start), 0 if the process was stopped in between."""
        now = time.perf_counter()
        seconds = 0.0 if self._continued else now - self._last
        self._last, self._continued = now, False
        return seconds

    def continued(self, *_: Any) -> None:
        self._continued = True


@contextlib.contextmanager
def _run_timer() -> Iterator[RunTimer]:
    """A ``RunTimer`` told of SIGCONT while in the block (signals reach the main thread only; elsewhere, and
    where there is no SIGCONT, it is a plain clock)."""
    timer = RunTimer()
    if not hasattr(signal, "SIGCONT") or threading.current_thread() is not threading.main_thread():
        yield timer
        return
    previous = signal.signal(signal.SIGCONT, timer.continued)
    try:
        yield timer
    finally:
        signal.signal(signal.SIGCONT, previous)


def recorded_groups(plan: Plan) -> list[str]:
    """The plan's groups that train both ISS-P and IHT (recorded for the Analysis tab), in plan order; the
    first one alone keeps resumable states (~12 MB each for SwinIR-light: the repository that bundles the
    recordings must still fit a GPU round)."""
    from iss.train.recording import RUNS

    groups = dict.fromkeys(c.group for c in plan.cells)
    return [g for g in groups if {c.method for c in plan.cells if c.group == g} >= set(RUNS)]


def _recorder(plan: Plan, cell: Cell, folder: Path, config: Any) -> Any:
    """For the ISS-P and IHT cells of a recorded group: a recorder of the Analysis tab's series, and for the
    first such group of resumable states at half and three quarters of K_p (``DIR/<cell>/recording``);
    else None."""
    from iss.train.recording import RUNS, TrainRecorder

    recorded = recorded_groups(plan)
    if cell.method not in RUNS or cell.group not in recorded:
        return None
    meta = {
        "arch": cell.arch, "scale": cell.scale, "ratio": cell.ratio, "alpha": 0.95,
        "prune_iters": config.prune_iters, "iterations": cell.iters, "batch": cell.batch, "patch": cell.patch,
        "lr": cell.lr, "seed": cell.seed, "arch_kwargs": cell.arch_kwargs,
        "device": device_name(config.device, config.threads),
        "data": [Path(d).name for d in config.train_data],
        "command": f"python -m iss zoo train --plan {plan.path.name} (cell {cell.name})",
    }  # fmt: skip
    states = (config.prune_iters // 2, config.prune_iters * 3 // 4) if cell.group == recorded[0] else ()
    return TrainRecorder(folder / "recording", cell.method, meta, states=states)


def evaluate_cell(
    record: CellRecord,
    folder: Path,
    datasets: list[str],
    benchmarks: Path,
    until: float | None = None,
    *,
    device: str = "auto",
    stop: Callable[[], bool] = lambda: False,
) -> None:
    """Add the metrics of ``folder/model.safetensors`` on ``datasets`` not measured yet, image by image, until
    ``stop()`` or ``until`` comes; the scores of a set stopped half-way are kept in the record and the next
    call goes on from there (EDSR-L and CAT-R take hours over Urban100 on the CPU). Sets missing from
    ``benchmarks`` are skipped."""
    from iss.checkpoint import load
    from iss.data import BenchmarkSet
    from iss.evaluate import image_scores, mean_scores
    from iss.infer import model_upscaler

    record.metrics = record.metrics or {}
    todo = [s for s in datasets if s not in record.metrics and (benchmarks / s / "HR").is_dir()]
    if not todo:
        return
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    torch_device = torch.device(device)
    model, _ = load(folder / "model.safetensors", device=torch_device)
    if torch_device.type == "cpu":
        from iss.sparse import sparsify  # exact: the same outputs within 1e-4, several times faster

        model = sparsify(model, exact=True)
    upscale = model_upscaler(model, device=torch_device)
    stopping = lambda: stop() or (until is not None and time.time() >= until)  # noqa: E731
    for name in todo:
        if stopping():
            return
        bench = BenchmarkSet(benchmarks, name, record.cell["scale"])
        scores = record.partial.setdefault(name, [])
        with _run_timer() as timer:
            for score in image_scores(upscale, bench, start=len(scores)):
                scores.append(list(score))
                if len(scores) == len(bench):
                    record.metrics[name] = mean_scores(scores)
                    del record.partial[name]
                record.eval_seconds += timer.tick()
                record.write(folder)
                if stopping():
                    break
        if name not in record.metrics:
            return


def device_name(device: str, threads: int | None = None) -> str:
    """``NVIDIA H100 80GB HBM3`` or ``cpu: AMD EPYC avx2 avx512f avx512_bf16 (2 threads)``: what a cell
    trained on (the vector extensions decide which precision pays); ``threads`` is the count it trains with
    (default: torch's now)."""
    from iss.train.loop import cpu_signature

    if device.startswith("cuda") or (device == "auto" and torch.cuda.is_available()):
        return torch.cuda.get_device_name()
    return f"cpu: {cpu_signature()} ({threads or torch.get_num_threads()} threads)"


def git_commit() -> str:
    """The code's commit: ``$ISS_GIT_COMMIT`` (set where the tree travels without .git), else ``git`` in the
    working directory (the checkout the zoo is trained from)."""
    if os.environ.get("ISS_GIT_COMMIT"):
        return os.environ["ISS_GIT_COMMIT"]
    try:
        head = subprocess.run(
            ["git", "rev-parse", "HEAD"], capture_output=True, text=True, check=True
        ).stdout.strip()
        dirty = subprocess.run(["git", "diff", "--quiet", "HEAD", "--", "iss"]).returncode
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return head + ("-dirty" if dirty else "")


# ------------------------------------------------------------------------------------------------ scheduling


def status(plan: Plan, work: Path) -> list[tuple[Cell, CellRecord]]:
    """Every cell of the plan with its record (a fresh one for cells not started)."""
    return [(cell, CellRecord.read(work / cell.name, cell)) for cell in plan.cells]


def _zoo_budget(cell: Cell) -> dict[str, Any]:
    """What a zoo entry's budget must say for it to stand for ``cell`` (``zoo_entry`` writes these keys)."""
    return {"iterations": cell.iters, "batch": cell.batch, "patch": cell.patch, "lr": cell.lr,
            "schedule": cell.schedule, "warmup": cell.warmup, "seed": cell.seed,
            "pruner_options": cell.pruner_options}  # fmt: skip


def landed(plan: Plan, manifest: Path) -> set[str]:
    """Cells of the plan already in ``manifest`` with the cell's own budget: the zoo holds them, so a work
    folder the machine did not keep does not mean training them again."""
    if not manifest.is_file():
        return set()
    budgets = {
        e["name"]: {"pruner_options": {}, **e.get("budget", {})}  # written only where there are some
        for e in json.loads(manifest.read_text())["entries"]
    }
    return {
        cell.name
        for cell in plan.cells
        if cell.name in budgets and all(budgets[cell.name].get(k) == v for k, v in _zoo_budget(cell).items())
    }


def pending(plan: Plan, work: Path, benchmarks: Path, skip: set[str] = frozenset()) -> list[Cell]:
    """Cells not trained yet, or missing metrics on a plan set found in ``benchmarks``, in plan order, less
    those named in ``skip`` (``landed`` ones)."""
    sets = {s for s in plan.eval if (benchmarks / s / "HR").is_dir()}
    return [
        cell
        for cell, record in status(plan, work)
        if cell.name not in skip and (not record.trained or sets - set(record.metrics or {}))
    ]


def train_plan(
    plan: Plan,
    work: Path,
    data_dir: Path,
    minutes: float,
    *,
    jobs: int = 1,
    device: str = "auto",
    threads: int | None = None,
    keep_going: bool = False,
    manifest: Path | None = None,
    cells: list[str] | None = None,
    log=print,
) -> dict[str, int]:
    """Run pending cells, ``jobs`` at a time, each in its own process, until they are done or ``minutes``
    have passed; returns each worked cell's exit status. Workers stop by themselves at the deadline. A cell
    that its group's measured speed says cannot finish in the time left is not started (the call ends
    early, leaving the machine free), unless ``keep_going``. Cells ``manifest`` holds at their budget are
    skipped; ``cells`` names the only ones to work on (say, those that can land in a session)."""
    from iss.data import TrainPatches

    wanted = None if cells is None else {plan.cell(name).name for name in cells}  # KeyError: not in the plan
    until = time.time() + 60 * minutes
    work.mkdir(parents=True, exist_ok=True)
    with _sole_factory(work), _on_sigterm() as terminated:
        (work / "plan.json").write_text(plan.path.read_text())  # what the cells were trained from
        done = landed(plan, manifest) if manifest is not None else set()
        if done:
            log(f"in {manifest.name} at their budget, not trained again: {', '.join(sorted(done))}")
        queue = pending(plan, work, data_dir / "benchmarks", skip=done)
        if wanted is not None:
            queue = [c for c in queue if c.name in wanted]
        if device == "cpu" or not torch.cuda.is_available():
            threads = threads or max(1, (os.cpu_count() or 1) // jobs)
        for scale in sorted({c.scale for c in queue}):  # the LR of the training images: once, not per worker
            TrainPatches([data_dir / d for d in plan.train_data], scale, 1, length=1)
        running: dict[str, subprocess.Popen] = {}
        exits: dict[str, int] = {}
        while (queue or running) and time.time() < until - 5 and not terminated.is_set():
            while queue and len(running) < jobs:
                if not keep_going and not _fits(work, plan, queue[0], until - time.time()):
                    log(f"{queue[0].name} would not finish in the time left; stopping early")
                    queue.clear()
                    break
                cell = queue.pop(0)
                running[cell.name] = _start(plan, cell, work, data_dir, until, device, threads, jobs)
                log(f"{time.strftime('%H:%M:%S')} started {cell.name}")
            time.sleep(0.2)
            for name, process in list(running.items()):
                if process.poll() is not None:
                    exits[name] = running.pop(name).returncode
                    log(_summary(work, plan.cell(name), exits[name]))
        for process in running.values() if terminated.is_set() else []:
            process.terminate()  # each pauses its cell cleanly
        for name, process in running.items():  # past the deadline: they save and stop on their own
            exits[name] = process.wait()
            log(_summary(work, plan.cell(name), exits[name]))
    return exits


@contextlib.contextmanager
def _sole_factory(work: Path) -> Iterator[None]:
    """Hold ``work/factory.lock`` while training: a second ``zoo train`` on the same folder (say, one still
    running from an earlier start) would train the same cells at once. The kernel frees it when the process
    ends, however it ends."""
    try:
        import fcntl
    except ImportError:  # not POSIX: no lock
        yield
        return
    with (work / "factory.lock").open("a+") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            f.seek(0)
            raise ValueError(
                f"another zoo train (pid {f.read().strip() or '?'}) is training in {work}: stop it first "
                "(kill -TERM PID pauses its cells cleanly), or give another --work"
            ) from None
        f.truncate(0)
        f.write(f"{os.getpid()}\n")
        f.flush()
        yield


def _fits(work: Path, plan: Plan, cell: Cell, seconds: float) -> bool:
    """Whether ``cell`` can finish in ``seconds``, judged by the speed of its group's cells trained so far
    (a cell of a group not measured yet is always started: its progress is kept for the next call)."""
    record = CellRecord.read(work / cell.name, cell)
    rates = [r.steps_per_second for c, r in status(plan, work) if c.group == cell.group and r.train_seconds]
    return not rates or (cell.iters - record.iterations) / min(rates) < seconds


def _start(
    plan: Plan,
    cell: Cell,
    work: Path,
    data_dir: Path,
    until: float,
    device: str,
    threads: int | None,
    jobs: int,
) -> subprocess.Popen:
    """A worker process for one cell; its output goes to ``DIR/<cell>/worker.log``."""
    folder = work / cell.name
    folder.mkdir(parents=True, exist_ok=True)
    command = [
        sys.executable,
        "-m",
        "iss",
        "zoo",
        "cell",
        cell.name,
        "--plan",
        str(plan.path),
        "--work",
        str(work),
        "--data-dir",
        str(data_dir),
        "--until",
        repr(until),
        "--device",
        device,
        "--jobs",
        str(jobs),
    ]
    if threads:
        command += ["--threads", str(threads)]
    with (folder / "worker.log").open("a") as out:
        return subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT)


def _summary(work: Path, cell: Cell, exit_code: int) -> str:
    """One line on a worker that ended: progress, speed, metrics (or where its error is)."""
    head = f"{time.strftime('%H:%M:%S')} {cell.name}: "
    if exit_code:
        return head + f"FAILED (exit {exit_code}); see {work / cell.name / 'worker.log'}"
    record = CellRecord.read(work / cell.name, cell)
    metrics = "".join(f", {k} {v['psnr']:.2f}" for k, v in (record.metrics or {}).items())
    return head + f"{record.iterations}/{cell.iters} iterations, {record.steps_per_second:.2f} it/s{metrics}"


# ------------------------------------------------------------------------------------------------ zoo entries


def zoo_entry(record: CellRecord, folder: Path, hub_repo: str) -> dict[str, Any]:
    """Describe a finished cell as a zoo entry whose file is ``<name>.safetensors`` (``add_to_zoo`` copies
    it once the entry is merged)."""
    from iss.checkpoint import read_meta
    from iss.hub import sha256_of

    cell = record.cell
    name = f"{cell['arch']}_x{cell['scale']}_{cell['method']}_r{cell['ratio']:g}"
    meta = read_meta(folder / "model.safetensors")  # verifies the checkpoint's own hash
    source = folder / "model.safetensors"
    budget = {
        "iterations": cell["iters"],
        "prune_iters": meta["budget"]["prune_iters"],
        "batch": cell["batch"],
        "patch": cell["patch"],
        "lr": cell["lr"],
        "milestones": cell["milestones"],
        "schedule": cell.get("schedule", "step"),
        "warmup": cell.get("warmup", 0),
        "precision": meta["budget"].get("precision", "eager fp32"),
        "seed": cell["seed"],
        "data": meta["data"],
        "device": record.device,
        "jobs": record.jobs,
        **({"setups": record.setups} if len(record.setups) > 1 else {}),
        "train_minutes": round(record.train_seconds / 60, 1),
        "steps_per_second": round(record.steps_per_second, 3),
        "images_per_second": round(record.steps_per_second * cell["batch"], 1),
        **({"pruner_options": cell["pruner_options"]} if cell.get("pruner_options") else {}),
        "values": cell["checkpoint_dtype"],
        "git_commit": record.git_commit,
    }
    return {
        "name": name,
        "arch": cell["arch"],
        "scale": cell["scale"],
        "method": cell["method"],
        "ratio": cell["ratio"],
        "file": f"{name}.safetensors",
        "sha256": sha256_of(source),
        "size_bytes": source.stat().st_size,
        "hub": {"repo_id": hub_repo, "revision": "main", "filename": f"{name}.safetensors"},
        "budget": budget,
        "metrics": {
            s: {"psnr": round(m["psnr"], 4), "ssim": round(m["ssim"], 6)}
            for s, m in (record.metrics or {}).items()
        },
    }


def add_to_zoo(
    plan: Plan,
    work: Path,
    manifest: Path,
    *,
    datasets: list[str],
    benchmarks: Path | None,
    names: list[str] | None = None,
    force: bool = False,
    recordings: Path | None = None,
    log=print,
) -> list[str]:
    """Evaluate finished cells on ``datasets`` still missing, then merge them into ``manifest``, and their
    ISS-P/IHT recordings into ``recordings`` (see ``add_recordings``)."""
    from . import DEFAULT_HUB_REPO, merge_entries

    manifest.parent.mkdir(parents=True, exist_ok=True)
    entries = []
    for cell, record in status(plan, work):
        if (names and cell.name not in names) or not record.trained:
            continue
        folder = work / cell.name
        if benchmarks is not None:
            evaluate_cell(record, folder, datasets, benchmarks)
        missing = [s for s in datasets if s not in (record.metrics or {})]
        if missing:
            raise FileNotFoundError(f"{cell.name}: no metrics on {', '.join(missing)}; pass --data-dir")
        entries.append(zoo_entry(record, folder, DEFAULT_HUB_REPO))
        log(f"{cell.name}: " + ", ".join(f"{s} {m['psnr']:.2f}" for s, m in entries[-1]["metrics"].items()))
    added = merge_entries(manifest, entries, force=force, log=log)
    for name in added:  # only now: an entry kept over this cell keeps its file too
        shutil.copyfile(work / name / "model.safetensors", manifest.parent / f"{name}.safetensors")
    if recordings is not None:
        for folder in add_recordings(plan, work, recordings, names=added, landed=landed(plan, manifest)):
            log(f"recording {folder}")
    return added


def add_recordings(
    plan: Plan, work: Path, root: Path, *, names: list[str], landed: set[str] | None = None
) -> list[Path]:
    """For every group with an ISS-P or IHT cell among ``names`` whose ISS-P and IHT cells are both among
    ``names`` or ``landed`` (by an earlier ``zoo add``) and were recorded: one recording of both in
    ``root/<group>_<cpu|gpu>`` (what the Analysis tab lists), replacing an older one of that name.

    Only the first of ``recorded_groups`` keeps a resumable state (the latest; a GPU one supersedes the CPU
    one, which keeps its series), the others their series."""
    from iss.train.recording import RUNS, drop_states, merge_recordings, recording_config

    recorded = recorded_groups(plan)
    done = {*names, *(landed or ())}
    written = []
    for group in recorded:
        cells = {c.method: c for c in plan.cells if c.group == group and c.method in RUNS}
        parts = {run: work / cells[run].name / "recording" for run in cells}
        if not any(c.name in names for c in cells.values()) or not all(
            c.name in done and (parts[r] / "run.json").is_file() for r, c in cells.items()
        ):
            continue
        record = CellRecord.read(work / cells["iss-p"].name, cells["iss-p"])
        out = root / f"{group}_{'cpu' if record.device.startswith('cpu') else 'gpu'}"
        if out.exists():
            shutil.rmtree(out)
        config = recording_config(parts["iss-p"])
        config["command"] = f"python -m iss zoo train --plan {plan.path.name} (cells of {group})"
        written.append(merge_recordings(parts, out, {k: v for k, v in config.items() if k not in _PER_RUN}))
        if group != recorded[0]:
            drop_states(out)
        elif out.name.endswith("_gpu") and (root / f"{group}_cpu" / "run.json").is_file():
            drop_states(root / f"{group}_cpu")
    return written


_PER_RUN = ("layers", "iterations_done", "finetune_from", "states", "seconds")


# ------------------------------------------------------------------------------------------------ commands

COMMANDS = ("train", "cell", "status", "add", "budget", "pack", "export")


def add_commands(sub: Any, common: Any) -> None:
    """``zoo train|cell|status|add`` (the factory's part of ``python -m iss zoo``)."""
    planned = type(common)(add_help=False)
    planned.add_argument("--plan", type=Path, default=Path("checkpoints", "zoo_plan.json"))
    planned.add_argument(
        "--data-dir",
        type=Path,
        default=os.environ.get("ISS_DATA_DIR"),
        help="folder holding the plan's train_data and benchmarks/ (default $ISS_DATA_DIR)",
    )
    worked = type(common)(add_help=False, parents=[planned])
    worked.add_argument("--work", type=Path, required=True, help="folder of the cells' runs")
    running = type(common)(add_help=False)
    running.add_argument("--device", default="auto", help="cuda, cpu (default: cuda when available)")
    running.add_argument("--threads", type=int, help="torch CPU threads per cell (default: cores / jobs)")
    running.add_argument("--jobs", type=int, default=1, help="cells trained at once, one process each")
    train = sub.add_parser("train", parents=[worked, running, common], help="train the plan's next cells")
    train.add_argument("--minutes", type=float, required=True, help="stop cleanly within this time")
    train.add_argument(
        "--keep-going", action="store_true", help="start cells even if they cannot finish in this call"
    )
    train.add_argument("--cells", help="only these cells, in plan order (comma-separated names)")
    cell = sub.add_parser("cell", parents=[worked, running], help="(used by zoo train) one cell's worker")
    cell.add_argument("name")
    cell.add_argument("--until", type=float, required=True, help="deadline as a Unix time")
    sub.add_parser("status", parents=[worked, common], help="the plan's cells: progress, speed, metrics")
    add = sub.add_parser("add", parents=[worked, common], help="merge finished cells into the zoo manifest")
    add.add_argument(
        "--datasets",
        default="Set5,Set14,B100,Urban100,Manga109",
        help="sets every entry must have metrics on (missing ones are evaluated here)",
    )
    add.add_argument("--cells", help="only these cells (comma-separated names)")
    add.add_argument(
        "--force", action="store_true", help="replace entries from the other kind of device, even better ones"
    )
    add.add_argument(
        "--recordings",
        type=Path,
        default=Path("assets", "recordings"),
        help="where the ISS-P vs IHT recordings of added groups go (the Analysis tab's)",
    )
    budget = sub.add_parser("budget", parents=[worked], help="set the plan's iterations from throughput")
    budget.add_argument("--throughput", type=Path, required=True, help="benchmarks/train_throughput.py JSON")
    budget.add_argument("--cell-minutes", type=float, required=True, help="training minutes per cell")
    budget.add_argument("--jobs", type=int, default=1, help="cells that will train at once")
    pack = sub.add_parser("pack", parents=[planned], help="copy the plan's data for a GPU machine")
    pack.add_argument("--out", type=Path, default=Path(".gpu"), help="ignored folder to carry")
    pack.add_argument("--budget-mib", type=float, default=60, help="tracked files + pack stay under this")
    export = sub.add_parser("export", parents=[worked], help="tar the cells' results to bring them back")
    export.add_argument("--out", type=Path, required=True, help="folder for cells-<k>.tar.gz")
    export.add_argument("--max-mib", type=float, default=15, help="largest archive")
    export.add_argument("--max-files", type=int, default=8, help="most archives (less what else comes back)")


def run(args: Any) -> int:
    """Run one of ``COMMANDS``."""
    from iss.cli import UsageError

    from .pack import export_cells, pack_data
    from .plan import fit_budgets

    if args.data_dir is None and args.zoo_command in ("train", "cell", "add", "pack"):
        raise UsageError("pass --data-dir (or set ISS_DATA_DIR): the folder holding train/ and benchmarks/")
    if args.zoo_command == "budget":
        started = {c.group for c, r in status(load_plan(args.plan), args.work) if r.iterations}
        throughput = json.loads(args.throughput.read_text())
        budgets = fit_budgets(args.plan, throughput, args.cell_minutes, jobs=args.jobs, skip=started)
        for group, iters in budgets.items():
            print(f"{group}: {iters} iterations" if iters else f"{group}: not measured, budget kept")
        print(f"kept the budgets of started groups: {', '.join(sorted(started)) or '-'}")
        return 0
    plan = load_plan(args.plan)
    if args.zoo_command == "pack":
        pack_data(plan, args.data_dir, args.out, budget_mib=args.budget_mib)
        return 0
    if args.zoo_command == "export":
        export_cells(args.work, args.out, max_mib=args.max_mib, max_files=args.max_files)
        return 0
    manifest = getattr(args, "manifest", None) or DEFAULT_ZOO
    if args.zoo_command == "train":
        exits = train_plan(
            plan,
            args.work,
            args.data_dir,
            args.minutes,
            jobs=args.jobs,
            device=args.device,
            threads=args.threads,
            keep_going=args.keep_going,
            manifest=manifest,
            cells=args.cells.split(",") if args.cells else None,
        )
        print(format_status(plan, args.work, manifest))
        return 1 if any(exits.values()) else 0
    if args.zoo_command == "cell":
        # run_cell pauses on SIGTERM; before and after it, one is a no-op: a group kill reaches a cell twice
        # (the shell's and the factory's own), and the second may come while the worker exits
        signal.signal(signal.SIGTERM, lambda *_: None)
        run_cell(
            plan,
            args.name,
            args.work,
            args.data_dir,
            args.until,
            device=args.device,
            threads=args.threads,
            jobs=args.jobs,
        )
        return 0
    if args.zoo_command == "status":
        print(format_status(plan, args.work, manifest))
        return 0
    names = args.cells.split(",") if args.cells else None
    datasets = [s for s in args.datasets.split(",") if s]
    added = add_to_zoo(
        plan,
        args.work,
        manifest,
        datasets=datasets,
        benchmarks=args.data_dir / "benchmarks",
        names=names,
        force=args.force,
        recordings=args.recordings,
    )
    print(f"{manifest}: added or replaced {len(added)} entries: {', '.join(added) or '-'}")
    return 0


def stretch_rate(log: Path) -> float | None:
    """Iterations per second of a run's latest stretch: the median over the intervals between the records
    logged since its last start or resume, so that neither the compiles and mode probes before the first
    record nor a ``kill -STOP`` pause between two records count. None when that stretch has no interval."""
    points: list[tuple[int, float]] = []
    for line in log.read_text().splitlines() if log.is_file() else []:
        try:
            record = json.loads(line)
        except json.JSONDecodeError:  # a line a kill cut short
            continue
        if record.get("event") in ("start", "resume"):
            points = []
        elif "event" not in record and "elapsed" in record:
            points.append((record["iteration"], record["elapsed"]))
    rates = [(i1 - i0) / (t1 - t0) for (i0, t0), (i1, t1) in pairwise(points) if t1 > t0]
    return statistics.median(rates) if rates else None


def format_status(plan: Plan, work: Path, manifest: Path | None = None) -> str:
    """A text table of the plan's cells: iterations done, it/s (of the latest stretch where its log has
    one, else on average), minutes trained and, for a cell under way, the minutes left at that speed
    ("landed" for a cell ``manifest`` holds at its budget), metrics, device."""
    rows = [("cell", "iterations", "it/s", "minutes", "left", "metrics (PSNR)", "device")]
    done = landed(plan, manifest) if manifest is not None else set()
    for cell, record in status(plan, work):
        metrics = " ".join(f"{k} {v['psnr']:.2f}" for k, v in (record.metrics or {}).items())
        rate = stretch_rate(work / cell.name / "log.jsonl") or record.steps_per_second
        under_way = 0 < record.iterations < cell.iters and rate > 0
        left = (cell.iters - record.iterations) / rate / 60 if under_way else None
        rows.append(
            (
                cell.name,
                f"{record.iterations}/{cell.iters}",
                f"{rate:.2f}",
                f"{record.train_seconds / 60:.1f}",
                "landed" if cell.name in done else f"{left:.0f}" if left is not None else "-",
                metrics or "-",
                record.device or "-",
            )
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows)
