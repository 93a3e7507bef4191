"""The zoo factory: time-boxed, resumable training of a plan's cells, merged into the zoo manifest."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from common import ROOT, TINY_SWINIR

from iss import checkpoint, cli, train, zoo
from iss.evaluate import evaluate
from iss.infer import model_upscaler
from iss.train.recording import load_recording, optimizer_runs
from iss.ui import analysis
from iss.zoo import factory
from iss.zoo.plan import load_plan


def _plan(tmp_path: Path, iters: tuple[int, int] = (40, 30)) -> Path:
    """Two groups of two methods, tiny SwinIR-light: x2 (ISS-P, IHT) and x3 at 0.9 (L1, SRP)."""
    plan = {
        "version": 1,
        "train_data": ["train/a"],
        "eval": ["Set5"],
        "defaults": {"batch": 2, "patch": 8, "arch_kwargs": TINY_SWINIR},
        "groups": [
            {
                "arch": "swinir-light",
                "scale": 2,
                "ratio": 0.5,
                "iters": iters[0],
                "prune_iters": iters[0] // 2,
                "milestones": [iters[0] * 3 // 4],
                "methods": ["iss-p", "iht"],
            },
            {
                "arch": "swinir-light",
                "scale": 3,
                "ratio": 0.9,
                "iters": iters[1],
                "prune_iters": 10,
                "methods": ["l1", "srp"],
            },
        ],
    }
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(plan))
    return path


def _zoo_train(plan: Path, work: Path, data_dir: Path) -> list[str]:
    """The ``zoo train`` command line of a test: one CPU thread per cell (add ``--minutes``)."""
    return [sys.executable, "-m", "iss", "zoo", "train", "--plan", str(plan), "--work", str(work),
            "--data-dir", str(data_dir), "--device", "cpu", "--threads", "1"]  # fmt: skip


def _tensors(path: Path) -> dict[str, torch.Tensor]:
    return checkpoint.read(path)[0]


def test_a_cell_paused_at_its_deadline_resumes_exactly(
    tmp_path: Path, data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """In-process, with a clock that runs out after 7 iterations: the cell keeps its state and time, the
    next call finishes it bit for bit like a run that never stopped, then evaluates it."""
    plan = load_plan(_plan(tmp_path))
    cell = plan.cells[0]
    torch.set_num_threads(1)
    straight = cell.config([str(data_dir / "train" / "a")], tmp_path / "straight", device="cpu", threads=1)
    list(train.train(straight))

    clock = iter(range(10_000))  # one "second" per reading: the deadline, 8 s away, passes at iteration 8
    with monkeypatch.context() as patch:
        patch.setattr(time, "monotonic", lambda: next(clock))
        record = factory.run_cell(plan, cell.name, tmp_path / "work", data_dir, time.time() + 8, threads=1)
    folder = tmp_path / "work" / cell.name
    assert 0 < record.iterations < cell.iters and not record.metrics
    assert json.loads((folder / "cell.json").read_text())["iterations"] == record.iterations
    assert not (folder / "model.safetensors").exists()

    record = factory.run_cell(plan, cell.name, tmp_path / "work", data_dir, time.time() + 3600, threads=1)
    assert record.trained and record.train_seconds > 0 and set(record.metrics) == {"Set5"}
    # ISS-P of a group that also trains IHT is recorded for the Analysis tab, across the pause.
    config, traces = load_recording(folder / "recording")
    assert traces["iss-p"].iterations == list(range(1, cell.iters + 1))
    assert np.isfinite(traces["iss-p"].loss).all() and traces["iss-p"].finetune_from == cell.prune_iters
    assert [s["iteration"] for s in config["states"]] == [cell.prune_iters // 2, cell.prune_iters * 3 // 4]
    assert optimizer_runs(folder / "recording" / config["states"][0]["file"]) == ["iss-p"]
    finished, reference = (
        _tensors(folder / "model.safetensors"),
        _tensors(Path(straight.out) / "model.safetensors"),
    )
    assert finished.keys() == reference.keys()
    assert all(torch.equal(finished[k], reference[k]) for k in finished)
    # Metrics come from the sparse CPU path; they equal PyTorch's dense evaluation.
    model, _ = checkpoint.load(folder / "model.safetensors")
    dense = evaluate(model_upscaler(model), ["Set5"], 2, data_dir / "benchmarks", progress=False)
    assert record.metrics["Set5"]["psnr"] == pytest.approx(dense["Set5"]["psnr"], abs=1e-3)


def test_a_cell_killed_outright_shows_where_its_saved_state_stands(
    tmp_path: Path, data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``cell.json`` follows each saved ``state.pt``, so ``zoo status`` follows a cell under way and still
    tells the truth after a kill that left no time to pause; the next call carries on from there."""
    plan = load_plan(_plan(tmp_path, iters=(120, 30)))  # a state every 50 iterations
    cell = plan.cells[0]

    class Killed(Exception):
        pass

    def killed_after_first_save(config: train.TrainConfig, **kwargs: object):
        for event in real(config, **kwargs):
            yield event
            if event.saved:
                raise Killed

    real = train.train
    monkeypatch.setattr(train, "train", killed_after_first_save)
    with pytest.raises(Killed):
        factory.run_cell(plan, cell.name, tmp_path / "work", data_dir, time.time() + 3600, threads=1)
    folder = tmp_path / "work" / cell.name
    shown = json.loads((folder / "cell.json").read_text())
    assert shown["iterations"] == 50 and shown["train_seconds"] > 0
    assert torch.load(folder / "state.pt", weights_only=True)["iteration"] == 50
    assert "50/120" in factory.format_status(plan, tmp_path / "work")

    monkeypatch.setattr(train, "train", real)
    record = factory.run_cell(plan, cell.name, tmp_path / "work", data_dir, time.time() + 3600, threads=1)
    assert record.trained and record.train_seconds > shown["train_seconds"]


def test_a_cell_records_the_threads_it_trains_with(tmp_path: Path, data_dir: Path) -> None:
    """The budget's device names the threads the cell trained with (``--threads``), not the count torch had
    when the cell process started (an entry and two bundled recordings said 2 threads where they used 1)."""
    plan = load_plan(_plan(tmp_path))
    previous = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        record = factory.run_cell(
            plan, plan.cells[0].name, tmp_path / "work", data_dir, time.time() + 3600, threads=1
        )
    finally:
        torch.set_num_threads(previous)
    assert record.trained and record.device.endswith("(1 threads)")
    config, _ = load_recording(tmp_path / "work" / plan.cells[0].name / "recording")  # the Analysis tab's
    assert config["device"] == record.device


def test_a_cell_trained_two_ways_records_each_stretch(
    tmp_path: Path, data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A cell trained beside another on one thread, then alone on two, says both in its budget (the zoo's
    EDSR-L x4 cells did; their entries named only the last way)."""
    plan = load_plan(_plan(tmp_path))
    cell, work = plan.cells[0], tmp_path / "work"
    previous = torch.get_num_threads()
    try:
        clock = iter(range(10_000))
        with monkeypatch.context() as patch:
            patch.setattr(time, "monotonic", lambda: next(clock))
            paused = factory.run_cell(plan, cell.name, work, data_dir, time.time() + 8, threads=1, jobs=2)
        assert 0 < paused.iterations < cell.iters and paused.setups == [
            {"from": 0, "device": paused.device, "jobs": 2}
        ]
        record = factory.run_cell(plan, cell.name, work, data_dir, time.time() + 3600, threads=2, jobs=1)
    finally:
        torch.set_num_threads(previous)
    one, two = (factory.device_name("cpu", n) for n in (1, 2))
    assert record.trained and (record.device, record.jobs) == (two, 1)
    assert record.setups == [
        {"from": 0, "device": one, "jobs": 2},
        {"from": paused.iterations, "device": two, "jobs": 1},
    ]
    budget = factory.zoo_entry(record, work / cell.name, "iss-sr/zoo")["budget"]
    assert budget["setups"] == record.setups and budget["device"] == two

    older = factory.CellRecord(cell.to_dict(), iterations=5, device=one, jobs=2)  # no setups: written before
    older.start(two, 1)
    assert older.setups == [{"from": 0, "device": one, "jobs": 2}, {"from": 5, "device": two, "jobs": 1}]
    older.start(one, 2)  # back the first way before training any further: the last stretch never trained
    assert older.setups == [{"from": 0, "device": one, "jobs": 2}]


def test_a_cell_that_only_evaluates_keeps_to_its_threads(
    tmp_path: Path, data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A worker started for a trained cell (a factory restarted during its evaluation) evaluates on the
    cell's ``--threads`` too, not on every core: on two cores its sparse kernels took 1.6 of them and the
    other cell's training crawled. Its record keeps the number of cells it trained beside."""
    plan = load_plan(_plan(tmp_path))
    name, work = plan.cells[0].name, tmp_path / "work"
    previous = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        factory.run_cell(plan, name, work, data_dir, time.time() + 3600, threads=1)
        record = factory.CellRecord.read(work / name, plan.cells[0])
        record.metrics = None
        record.write(work / name)
        seen = []
        monkeypatch.setattr(factory, "evaluate_cell", lambda *a, **k: seen.append(torch.get_num_threads()))
        torch.set_num_threads(2)  # a fresh process's default on two cores
        record = factory.run_cell(plan, name, work, data_dir, time.time() + 3600, threads=1, jobs=3)
    finally:
        torch.set_num_threads(previous)
    assert seen == [1]
    assert record.jobs == 1  # the cells it trained beside, not those it was evaluated beside


def test_a_curve_cell_logs_set5_without_changing_its_weights(tmp_path: Path, data_dir: Path) -> None:
    """A cell in the plan's ``curves`` validates on Set5 every 10 iterations; its weights are those of a run
    that never validated (the budget is the same)."""
    path = _plan(tmp_path)
    raw = json.loads(path.read_text())
    plain = load_plan(path).cells[0]
    path.write_text(json.dumps({**raw, "curves": {plain.name: 10}}))
    plan = load_plan(path)
    torch.set_num_threads(1)
    straight = plain.config([str(data_dir / "train" / "a")], tmp_path / "straight", device="cpu", threads=1)
    list(train.train(straight))

    factory.run_cell(plan, plain.name, tmp_path / "work", data_dir, time.time() + 3600, threads=1)
    folder = tmp_path / "work" / plain.name
    log = [json.loads(line) for line in (folder / "log.jsonl").read_text().splitlines()]
    assert [r["iteration"] for r in log if "val_psnr" in r] == [10, 20, 30, 40]
    finished, reference = (
        _tensors(folder / "model.safetensors"),
        _tensors(Path(straight.out) / "model.safetensors"),
    )
    assert all(torch.equal(finished[k], reference[k]) for k in reference)


def test_a_sigterm_after_training_pauses_instead_of_killing(
    tmp_path: Path, data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A group kill (``kill -TERM -- -PGID``) reaches a cell twice, from the shell and from the factory; one
    that comes after the training loop (here: as evaluation starts) must not kill it either: the record is
    written, the evaluation left for the next call."""
    plan = load_plan(_plan(tmp_path))
    cell = plan.cells[0]
    evaluate = factory.evaluate_cell

    def terminated_then_evaluate(*args, **kwargs) -> None:
        os.kill(os.getpid(), signal.SIGTERM)
        evaluate(*args, **kwargs)

    leaked = []
    previous = signal.signal(signal.SIGTERM, lambda *_: leaked.append(True))  # not the default: kill pytest
    try:
        monkeypatch.setattr(factory, "evaluate_cell", terminated_then_evaluate)
        torch.set_num_threads(1)
        record = factory.run_cell(plan, cell.name, tmp_path / "work", data_dir, time.time() + 3600, threads=1)
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert not leaked and record.trained and not record.metrics
    saved = json.loads((tmp_path / "work" / cell.name / "cell.json").read_text())
    assert saved["iterations"] == cell.iters and saved["train_seconds"] > 0


def test_a_sigterm_as_a_cell_worker_exits_does_not_fail_it(tmp_path: Path, data_dir: Path) -> None:
    """The second SIGTERM of a group kill can reach the worker after its cell paused, while it exits
    (torch's compile workers make that slow): it must not turn a clean pause into "FAILED (exit -15)"."""
    plan = _plan(tmp_path)
    name = load_plan(plan).cells[0].name
    leaked = []
    previous = signal.signal(signal.SIGTERM, lambda *_: leaked.append(True))  # what the default would kill
    try:
        argv = ["zoo", "cell", name, "--plan", str(plan), "--work", str(tmp_path / "work"),
                "--data-dir", str(data_dir), "--device", "cpu", "--threads", "1",
                "--until", str(time.time() + 600)]  # fmt: skip
        assert cli.main(argv) == 0
        os.kill(os.getpid(), signal.SIGTERM)
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert not leaked


_CONTINUER = """import os, signal, sys, time
pid, seconds = int(sys.argv[1]), float(sys.argv[2])
while open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0] != "T":
    time.sleep(0.01)
time.sleep(seconds)
os.kill(pid, signal.SIGCONT)
"""


def _stop_this_process(seconds: float) -> None:
    """``kill -STOP`` this process for ``seconds``: a child waits until it is stopped, then continues it."""
    child = subprocess.Popen([sys.executable, "-c", _CONTINUER, str(os.getpid()), str(seconds)])
    os.kill(os.getpid(), signal.SIGSTOP)
    assert child.wait(timeout=60) == 0


stoppable = pytest.mark.skipif(sys.platform != "linux", reason="reads /proc to see the process stopped")


@stoppable
def test_the_run_timer_leaves_out_the_time_a_process_was_stopped() -> None:
    with factory._run_timer() as timer:
        time.sleep(0.2)
        assert timer.tick() >= 0.2
        _stop_this_process(1.5)
        assert timer.tick() == 0.0  # the stopped interval
        time.sleep(0.2)
        assert 0.2 <= timer.tick() < 1.0  # and counting again after it


@stoppable
def test_a_cell_stopped_while_training_does_not_count_the_stop_as_training(
    tmp_path: Path, data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The docs ask to ``kill -STOP`` the factory while timing something else: the cells' minutes (the zoo's
    budget column) leave the stop out, where they once added hours."""
    plan = load_plan(_plan(tmp_path))
    cell = plan.cells[0]
    real_train = train.train

    def train_stopped_at_iteration_5(*args, **kwargs):
        for event in real_train(*args, **kwargs):
            if event.iteration == 5:
                _stop_this_process(3.0)
            yield event

    monkeypatch.setattr(train, "train", train_stopped_at_iteration_5)
    torch.set_num_threads(1)
    began = time.perf_counter()
    record = factory.run_cell(plan, cell.name, tmp_path / "work", data_dir, time.time() + 3600, threads=1)
    wall = time.perf_counter() - began
    assert record.trained and 0 < record.train_seconds < wall - 3.0


def test_an_evaluation_stopped_between_images_resumes_where_it_stopped(
    tmp_path: Path, data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A factory stopped while a cell evaluates a large set (EDSR-L and CAT-R take hours over Urban100 on the
    CPU) stops after the image at hand, by SIGTERM or its deadline, and keeps the scores so far: the next
    call upscales only the images left, and the set's metrics match one that never stopped."""
    plan = load_plan(_plan(tmp_path))
    cell = plan.cells[0]
    torch.set_num_threads(1)
    factory.run_cell(plan, cell.name, tmp_path / "work", data_dir, time.time() + 3600, threads=1)
    folder, benchmarks = tmp_path / "work" / cell.name, data_dir / "benchmarks"
    record = factory.CellRecord.read(folder, cell)
    measured, record.metrics = record.metrics, {}
    upscaled = []

    def counting_upscaler(*args, **kwargs):
        run = model_upscaler(*args, **kwargs)

        def counted(lr: np.ndarray) -> np.ndarray:
            upscaled.append(lr.shape)
            return run(lr)

        return counted

    monkeypatch.setattr("iss.infer.model_upscaler", counting_upscaler)
    stops = iter([False, False, True])  # before the set, after the first image, after the second
    factory.evaluate_cell(record, folder, ["Set5"], benchmarks, device="cpu", stop=lambda: next(stops))
    record = factory.CellRecord.read(folder, cell)  # what a new process finds
    assert record.metrics == {} and len(record.partial["Set5"]) == len(upscaled) == 2

    clock = iter([0.0, 0.0, 10.0])  # the deadline (5) passes during the fourth image
    fake_time = SimpleNamespace(time=lambda: next(clock), perf_counter=time.perf_counter)
    with monkeypatch.context() as patched:
        patched.setattr(factory, "time", fake_time)
        factory.evaluate_cell(record, folder, ["Set5"], benchmarks, until=5.0, device="cpu")
    assert record.metrics == {} and len(record.partial["Set5"]) == len(upscaled) == 4

    factory.evaluate_cell(record, folder, ["Set5"], benchmarks, device="cpu")
    assert record.partial == {} and len(upscaled) == 5
    # the sparse kernels are picked by timing, so a new model instance may round differently
    assert factory.CellRecord.read(folder, cell).metrics["Set5"] == pytest.approx(measured["Set5"], rel=1e-6)


def test_a_cell_of_another_plan_is_not_mixed_in(tmp_path: Path, data_dir: Path) -> None:
    plan = load_plan(_plan(tmp_path))
    factory.CellRecord(plan.cells[0].to_dict(), iterations=3).write(tmp_path / "work" / plan.cells[0].name)
    changed = load_plan(_plan(tmp_path, iters=(60, 30)))
    with pytest.raises(ValueError, match="different plan cell"):
        factory.status(changed, tmp_path / "work")


def test_a_cell_recorded_before_a_field_existed_resumes(tmp_path: Path, data_dir: Path) -> None:
    """A work folder written by an older version (no ``pruner_options``) resumes, and is then written in full;
    the same record with an option the plan does not name is another cell."""
    plan = load_plan(_plan(tmp_path))
    cell, folder = plan.cells[0], tmp_path / "work" / plan.cells[0].name
    older = {k: v for k, v in cell.to_dict().items() if k != "pruner_options"}
    factory.CellRecord(older, iterations=3).write(folder)
    record = factory.CellRecord.read(folder, cell)
    assert record.iterations == 3 and record.cell == cell.to_dict()

    factory.CellRecord({**older, "pruner_options": {"alpha_ramp": 10}}, iterations=3).write(folder)
    with pytest.raises(ValueError, match="different plan cell"):
        factory.CellRecord.read(folder, cell)


def test_a_second_factory_on_the_same_work_folder_is_refused(tmp_path: Path, data_dir: Path) -> None:
    import fcntl

    plan = load_plan(_plan(tmp_path))
    work = tmp_path / "work"
    work.mkdir()
    with (work / "factory.lock").open("w") as held:  # the first factory, still training
        held.write("4242\n")
        held.flush()
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        with pytest.raises(ValueError, match=r"another zoo train \(pid 4242\) is training in"):
            factory.train_plan(plan, work, data_dir, minutes=1, jobs=1)
    assert not any(p.is_dir() for p in work.iterdir())  # it started no cell
    assert not (work / "plan.json").exists()


def test_train_works_only_on_the_cells_it_is_given(tmp_path: Path, data_dir: Path) -> None:
    """``zoo train --cells``: a session trains the cells that can land in it, the rest wait in the plan."""
    plan = load_plan(_plan(tmp_path))
    work = tmp_path / "work"
    with pytest.raises(
        KeyError, match=r"no cell 'swinir-light_x9_srp_r0\.9' in the plan; it has: swinir-light_x2"
    ):
        factory.train_plan(plan, work, data_dir, minutes=5, cells=["swinir-light_x9_srp_r0.9"])
    assert not work.exists()  # refused before touching the work folder
    exits = factory.train_plan(plan, work, data_dir, minutes=5, threads=1, cells=["swinir-light_x3_srp_r0.9"])
    assert exits == {"swinir-light_x3_srp_r0.9": 0}
    records = {c.name: r for c, r in factory.status(plan, work)}
    assert records["swinir-light_x3_srp_r0.9"].trained and records["swinir-light_x3_srp_r0.9"].metrics
    assert not any(r.iterations for name, r in records.items() if name != "swinir-light_x3_srp_r0.9")


def test_status_says_how_long_a_cell_under_way_has_left(tmp_path: Path) -> None:
    plan = load_plan(_plan(tmp_path, iters=(6000, 3000)))
    first, second = plan.cells[:2]
    work = tmp_path / "work"
    factory.CellRecord(first.to_dict(), iterations=1500, train_seconds=300).write(work / first.name)
    factory.CellRecord(second.to_dict(), iterations=6000, train_seconds=600).write(work / second.name)
    rows = {line.split()[0]: line.split() for line in factory.format_status(plan, work).splitlines()}
    assert rows["cell"][:5] == ["cell", "iterations", "it/s", "minutes", "left"]
    assert rows[first.name][1:5] == ["1500/6000", "5.00", "5.0", "15"]  # 4,500 iterations at 5 it/s
    assert rows[second.name][1:5] == ["6000/6000", "10.00", "10.0", "-"]


def test_status_times_what_is_left_at_the_latest_stretchs_speed_not_the_probes(tmp_path: Path) -> None:
    """Minutes spent compiling and probing modes before a stretch's first record, or stopped by
    ``kill -STOP`` between two records, slow the average, not the speed the cell trains on: 1,500
    iterations in 1,500 s on average, 5 it/s since its resume."""
    plan = load_plan(_plan(tmp_path, iters=(6000, 3000)))
    cell = plan.cells[0]
    folder = tmp_path / "work" / cell.name
    factory.CellRecord(cell.to_dict(), iterations=1500, train_seconds=1500).write(folder)
    records = [
        {"event": "start", "iteration": 0},
        {"iteration": 900, "elapsed": 10.0},  # an earlier stretch, at another speed
        {"event": "paused", "iteration": 1000, "elapsed": 12.0},
        {"event": "resume", "iteration": 1000},
        {"iteration": 1100, "elapsed": 400.0},  # after the probes
        {"iteration": 1200, "elapsed": 420.0},
        {"iteration": 1300, "elapsed": 1620.0},  # stopped for 20 minutes
        {"iteration": 1400, "elapsed": 1640.0},
        {"iteration": 1500, "elapsed": 1660.0},
    ]
    log = "".join(json.dumps(r) + "\n" for r in records) + '{"iteration": 16'  # cut short by a kill
    (folder / "log.jsonl").write_text(log)
    rows = {
        line.split()[0]: line.split() for line in factory.format_status(plan, tmp_path / "work").splitlines()
    }
    assert rows[cell.name][1:5] == ["1500/6000", "5.00", "25.0", "15"]  # 4,500 iterations at 5 it/s
    (folder / "log.jsonl").write_text(log.split('{"event": "resume"')[0])  # a stretch of one record
    assert factory.stretch_rate(folder / "log.jsonl") is None


def test_cells_the_zoo_holds_at_their_budget_are_not_trained_again(tmp_path: Path, data_dir: Path) -> None:
    """A work folder the machine did not keep: cells already in zoo.json at the plan's budget are skipped
    (and shown as landed); one landed at another budget (an earlier plan's) is trained again."""
    plan = load_plan(_plan(tmp_path))
    iss_p, iht, *rest = plan.cells

    def entry(cell, **changed) -> dict:
        budget = {"iterations": cell.iters, "batch": cell.batch, "patch": cell.patch, "lr": cell.lr,
                  "schedule": cell.schedule, "warmup": cell.warmup, "seed": cell.seed, "jobs": 2}  # fmt: skip
        return {"name": cell.name, "budget": {**budget, **changed}}

    manifest = tmp_path / "zoo.json"
    manifest.write_text(json.dumps({"version": 1, "entries": [entry(iss_p), entry(iht, iterations=20)]}))
    work, benchmarks = tmp_path / "work", data_dir / "benchmarks"
    assert factory.landed(plan, manifest) == {iss_p.name}
    assert factory.pending(plan, work, benchmarks, skip=factory.landed(plan, manifest)) == [iht, *rest]
    assert factory.pending(plan, work, benchmarks) == plan.cells  # no manifest: everything
    assert factory.landed(plan, tmp_path / "missing.json") == set()
    ramped = {"version": 1, "entries": [entry(iss_p, pruner_options={"alpha_ramp": 5})]}
    (tmp_path / "ramped.json").write_text(json.dumps(ramped))
    assert factory.landed(plan, tmp_path / "ramped.json") == set()  # trained with other pruner options
    rows = {
        line.split()[0]: line.split() for line in factory.format_status(plan, work, manifest).splitlines()
    }
    assert rows[iss_p.name][4] == "landed" and rows[iht.name][4] == "-"


@pytest.mark.slow
def test_interrupted_plan_resumes_to_the_uninterrupted_result_and_merges(
    tmp_path: Path, data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The command a GPU session runs: a first call that runs out of time, a second that finishes the plan
    (two cells at once); every checkpoint equals an uninterrupted ``iss.train`` run of its cell, and the
    merged zoo entries verify, load, and are exactly as sparse as claimed."""
    plan_path = _plan(tmp_path, iters=(600, 60))  # the first cell alone trains longer than the first call
    plan, work = load_plan(plan_path), tmp_path / "work"
    command = _zoo_train(plan_path, work, data_dir)
    first = subprocess.run([*command, "--minutes", "0.1"], capture_output=True, text=True, cwd=ROOT)
    assert first.returncode == 0, first.stderr[-2000:]
    assert factory.pending(plan, work, data_dir / "benchmarks"), "the first call should not finish the plan"
    second = subprocess.run(
        [*command, "--minutes", "10", "--jobs", "2"], capture_output=True, text=True, cwd=ROOT
    )
    assert second.returncode == 0, second.stderr[-2000:]
    assert not factory.pending(plan, work, data_dir / "benchmarks"), second.stdout

    torch.set_num_threads(1)
    for cell in plan.cells:
        straight = cell.config(
            [str(data_dir / "train" / "a")], tmp_path / "straight" / cell.name, device="cpu", threads=1
        )
        list(train.train(straight))
        got, want = (
            _tensors(work / cell.name / "model.safetensors"),
            _tensors(Path(straight.out) / "model.safetensors"),
        )
        assert all(torch.equal(got[k], want[k]) for k in want), cell.name

    manifest = tmp_path / "zoo" / "zoo.json"
    added = factory.add_to_zoo(
        plan,
        work,
        manifest,
        datasets=["Set5"],
        benchmarks=data_dir / "benchmarks",
        recordings=tmp_path / "rec",
    )
    assert added == [c.name for c in plan.cells]
    # The x2 group trained ISS-P and IHT: one recording of both, with the latest state of both runs (the one
    # a live run starts from; the earlier one is left out for size).
    config, traces = load_recording(tmp_path / "rec" / "swinir-light_x2_r0.5_cpu")
    x2 = next(c for c in plan.cells if c.group == "swinir-light_x2_r0.5")
    assert set(traces) == {"iss-p", "iht"} and config["iterations_done"] == x2.iters
    prune_iters = x2.prune_iters
    assert [s["iteration"] for s in config["states"]] == [prune_iters * 3 // 4]
    assert sorted(p.name for p in (tmp_path / "rec" / "swinir-light_x2_r0.5_cpu").glob("state_*")) == [
        config["states"][0]["file"]
    ]
    state = tmp_path / "rec" / "swinir-light_x2_r0.5_cpu" / config["states"][-1]["file"]
    assert sorted(optimizer_runs(state)) == ["iht", "iss-p"]
    _check_the_analysis_tab_reads(tmp_path / "rec", "swinir-light_x2_r0.5_cpu", config, monkeypatch)
    # The same group trained on a GPU, whose latest states zoo export left out: its recording takes the
    # states that came back, and supersedes the CPU one's, whose series stay.
    for cell in (c for c in plan.cells if c.group == "swinir-light_x2_r0.5"):
        (work / cell.name / "recording" / config["states"][0]["file"]).unlink()
    record = work / next(
        c.name for c in plan.cells if c.group == "swinir-light_x2_r0.5" and c.method == "iss-p"
    )
    cell = json.loads((record / "cell.json").read_text())
    (record / "cell.json").write_text(json.dumps({**cell, "device": "cuda: NVIDIA H100"}))
    gpu, cpu = (tmp_path / "rec" / f"swinir-light_x2_r0.5_{d}" for d in ("gpu", "cpu"))
    assert factory.add_recordings(plan, work, tmp_path / "rec", names=added) == [gpu]
    assert load_recording(gpu)[0]["states"] == [
        {"iteration": prune_iters // 2, "file": f"state_{prune_iters // 2}.safetensors"}
    ]
    assert [p.name for p in gpu.glob("state_*")] == [f"state_{prune_iters // 2}.safetensors"]
    assert not list(cpu.glob("state_*")) and load_recording(cpu)[0]["states"] == []
    assert set(load_recording(cpu)[1]) == {"iss-p", "iht"}
    # IHT landing in a later `zoo add` than ISS-P records the pair then; alone, it records nothing.
    iss_p, iht = (f"swinir-light_x2_{m}_r0.5" for m in ("iss-p", "iht"))
    assert factory.add_recordings(plan, work, tmp_path / "rec3", names=[iht]) == []
    assert factory.add_recordings(plan, work, tmp_path / "rec3", names=[iht], landed={iss_p}) == [
        tmp_path / "rec3" / "swinir-light_x2_r0.5_gpu"
    ]
    # Behind a first group that trains ISS-P and IHT too, the x2 group keeps its series only.
    raw = json.loads(plan_path.read_text())
    first = {**raw["groups"][0], "scale": 4, "iters": 8, "prune_iters": 4, "milestones": [6]}
    behind = tmp_path / "behind.json"
    behind.write_text(json.dumps({**raw, "groups": [first, *raw["groups"]]}))
    assert factory.add_recordings(load_plan(behind), work, tmp_path / "rec2", names=added) == [
        tmp_path / "rec2" / "swinir-light_x2_r0.5_gpu"
    ]
    assert load_recording(tmp_path / "rec2" / "swinir-light_x2_r0.5_gpu")[0]["states"] == []
    assert not list((tmp_path / "rec2").rglob("state_*"))
    for entry in zoo.load_zoo(manifest):
        zoo.verify(entry.bundled, entry)
        model, meta = checkpoint.load(entry.bundled)
        record = json.loads((work / entry.name / "cell.json").read_text())
        assert entry.metrics["Set5"]["psnr"] == pytest.approx(record["metrics"]["Set5"]["psnr"], abs=1e-4)
        assert entry.budget["iterations"] == meta["iterations"] == record["cell"]["iters"]
        assert entry.budget["device"].startswith("cpu") and entry.budget["git_commit"]
        for name, mask in checkpoint.read_masks(entry.bundled).items():
            weight, kept = model.get_parameter(name), int(mask.sum())
            assert kept == weight.numel() - int(np.ceil(round(entry.ratio * weight.numel(), 6))), name
    # The ISS-P cell, now labelled GPU-trained, added again over its CPU entry: without Urban100 it cannot
    # score higher there, so the CPU entry and its file stay.
    iss_p, iht = (f"swinir-light_x2_{m}_r0.5" for m in ("iss-p", "iht"))
    bundled = manifest.parent / f"{iss_p}.safetensors"
    kept = bundled.read_bytes()
    shutil.copyfile(work / iht / "model.safetensors", work / iss_p / "model.safetensors")  # other bytes
    assert factory.add_to_zoo(plan, work, manifest, datasets=["Set5"], benchmarks=None, names=[iss_p]) == []
    assert bundled.read_bytes() == kept
    zoo.verify(bundled, next(e for e in zoo.load_zoo(manifest) if e.name == iss_p))


def _check_the_analysis_tab_reads(
    recordings: Path, name: str, config: dict, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The Analysis tab shows a factory recording whole and starts a live run from its latest state, with
    the recorded backbone, K_p and Adam moments."""
    monkeypatch.setattr(analysis, "RECORDINGS_DIR", recordings)
    iterations = [s["iteration"] for s in config["states"]]
    assert analysis.recorded_states() == [analysis.RANDOM_INIT] + [f"{name} @ {i}" for i in iterations]
    start = analysis.default_start()
    assert start == f"{name} @ {max(iterations)}"
    settings = analysis.start_settings(start)
    assert settings["optimizer"] and settings["arch_kwargs"] == TINY_SWINIR
    assert settings["prune_iters"] == config["prune_iters"]
    *_, status = list(analysis.train_live(iterations=2, start=start, patch=8, batch=2, update_seconds=0.0))[
        -1
    ]
    assert f"iteration {max(iterations) + 2} " in status
    assert "with the optimizer's state (Adam's moments) as recorded" in status
    assert f"{config['iterations_done']} iterations of each run" in analysis.recorded_figures(name)[-1]


def _scored(entry: dict, device: str, set5: float, urban100: float) -> dict:
    scores = {"Set5": {"psnr": set5, "ssim": 0.9}, "Urban100": {"psnr": urban100, "ssim": 0.8}}
    metrics = {**entry["metrics"], **scores}
    return {**entry, "budget": {**entry["budget"], "device": device}, "metrics": metrics}


def test_merge_across_devices_keeps_the_better_entry(tmp_path: Path) -> None:
    """A CPU- and a GPU-trained cell of one name: the newcomer replaces the old entry only where it scores
    higher on Set5 and Urban100 (or with force); a retrain on the same kind of device always replaces."""
    base = json.loads((ROOT / "checkpoints" / "zoo.json").read_text())["entries"][0]
    manifest, logged = tmp_path / "zoo.json", []
    cpu = _scored(base, "cpu: AMD EPYC (1 threads)", 30.0, 24.0)
    zoo.merge_entries(manifest, [cpu])

    def device_psnr() -> tuple[str, float]:
        (entry,) = zoo.load_zoo(manifest)
        return entry.budget["device"], entry.metrics["Set5"]["psnr"]

    for set5, urban100 in ((29.0, 23.0), (30.5, 23.9), (29.9, 24.5), (30.0, 24.0)):
        gpu = _scored(base, "NVIDIA H200", set5, urban100)
        assert zoo.merge_entries(manifest, [gpu], log=logged.append) == []
        assert device_psnr() == ("cpu: AMD EPYC (1 threads)", 30.0)
    assert "kept the entry trained on cpu: AMD EPYC (1 threads) (Set5 30.00, Urban100 24.00)" in logged[0]
    assert zoo.merge_entries(manifest, [_scored(base, "NVIDIA H200", 30.1, 24.1)]) == [base["name"]]
    assert device_psnr() == ("NVIDIA H200", 30.1)
    assert zoo.merge_entries(manifest, [cpu], log=logged.append) == []  # the other way round too
    assert zoo.merge_entries(manifest, [cpu], force=True) == [base["name"]]
    assert device_psnr() == ("cpu: AMD EPYC (1 threads)", 30.0)
    retrain = _scored(base, "cpu: Intel Xeon (2 threads)", 29.0, 23.0)
    assert zoo.merge_entries(manifest, [retrain]) == [base["name"]]
    assert device_psnr() == ("cpu: Intel Xeon (2 threads)", 29.0)


@pytest.mark.slow
def test_sigterm_pauses_the_running_cells_cleanly(tmp_path: Path, data_dir: Path) -> None:
    """Stopping ``zoo train`` (SIGTERM, as ``kill`` does) pauses each running cell where it is: its state
    and record agree, nothing is lost since the last save, and the log says ``paused``."""
    plan_path = _plan(tmp_path, iters=(5000, 60))
    work = tmp_path / "work"
    command = [*_zoo_train(plan_path, work, data_dir), "--minutes", "9"]
    process = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    log = work / "swinir-light_x2_iss-p_r0.5" / "log.jsonl"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not (log.is_file() and len(log.read_text().splitlines()) >= 2):
        time.sleep(0.5)  # started, and trained past its first 100 iterations
    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=60) == 0, process.stdout.read()[-2000:]
    record = json.loads((work / "swinir-light_x2_iss-p_r0.5" / "cell.json").read_text())
    state = torch.load(work / "swinir-light_x2_iss-p_r0.5" / "state.pt", weights_only=True)
    assert 100 <= record["iterations"] == state["iteration"] < 5000
    assert json.loads(log.read_text().splitlines()[-1])["event"] == "paused"
