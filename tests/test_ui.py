"""The app's handlers as plain functions (no server): compare, inputs, caps, missing checkpoints, live."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import plotly.graph_objects as go
import pytest
import torch
from PIL import Image

import iss
from iss.ui import figures
from iss.ui import handlers as h
from iss.ui.recording import load_recording, load_state, save_recording, save_state

TINY = dict(embed_dim=12, depths=(2,), num_heads=(2,))  # a few thousand weights: fast on CPU


def _photo(size: int = 48) -> Image.Image:
    """A textured RGB test image (a bundled photo crop)."""
    img = iss.data.read_image(h.EXAMPLES_DIR / "pagoda.png")
    return Image.fromarray(img[:size, :size])


def _write_zoo(folder: Path, entries: list[dict]) -> str:
    path = folder / "zoo.json"
    path.write_text(json.dumps({"version": 1, "entries": entries}))
    return str(path)


def _entry(name: str, file: Path, scale: int, ratio: float, method: str = "iss-p", **extra) -> dict:
    data = file.read_bytes() if file.is_file() else b""
    import hashlib

    return {
        "name": name, "arch": "swinir-light", "scale": scale, "method": method, "ratio": ratio,
        "file": file.name, "sha256": hashlib.sha256(data).hexdigest(), "size_bytes": len(data), **extra,
    }  # fmt: skip


@pytest.fixture(scope="module")
def tiny_zoo(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A zoo with one tiny pruned x2 checkpoint (bundled, no Hub entry) and one whose file is missing."""
    folder = tmp_path_factory.mktemp("zoo")
    torch.manual_seed(0)
    model = iss.archs.build("swinir-light", 2, **TINY)
    pruner = iss.pruning.build("iht", model, 0.5, prune_iters=0)
    path = iss.checkpoint.save(
        model, folder / "tiny_x2_iht.safetensors", {"arch": "swinir-light", "scale": 2, "arch_kwargs": TINY,
                                                    "method": "iht", "ratio": 0.5}, pruner.masks,
    )  # fmt: skip
    entries = [
        _entry("tiny_x2_iht_r0.5", path, 2, 0.5, "iht", metrics={"Set5": {"psnr": 30.0, "ssim": 0.9}}),
        _entry("missing_x2_iss-p_r0.5", folder / "missing.safetensors", 2, 0.5),
    ]
    return _write_zoo(folder, entries)


def test_compare_bicubic_and_checkpoint(tiny_zoo: str, tmp_path: Path) -> None:
    names = h.method_choices("swinir-light", 2, 0.5, tiny_zoo)
    assert names == ["bicubic", "tiny_x2_iht_r0.5", "missing_x2_iss-p_r0.5"]
    comp = h.compare(_photo(), 2, names, h.MODE_HR, zoo_path=tiny_zoo, out_dir=str(tmp_path))
    assert set(comp.results) == {"bicubic", "tiny_x2_iht_r0.5"}
    assert comp.hr.shape == (48, 48, 3) and comp.lr.shape == (24, 24, 3)
    rows = {r[0]: r for r in comp.rows}
    bicubic, tiny = rows["bicubic"], rows["tiny_x2_iht_r0.5"]
    assert bicubic[1] == pytest.approx(
        iss.metrics.psnr_y(iss.imresize(comp.lr, 2), comp.hr, crop_border=2), abs=0.01
    )
    assert isinstance(tiny[1], float) and 0 < tiny[2] <= 1
    assert "(50.0%)" in tiny[3] or "(5" in tiny[3]  # about half of the weights kept
    assert tiny[5].endswith("MB")
    # the missing checkpoint is greyed out with its reason, not fatal
    assert rows["missing_x2_iss-p_r0.5"][1].startswith("unavailable: ")
    assert (
        "missing" in rows["missing_x2_iss-p_r0.5"][1]
        and "missing_x2_iss-p_r0.5 is unavailable" in comp.message
    )
    for path in comp.files:
        with Image.open(path) as im:
            assert im.format == "PNG" and im.size == (48, 48)


def test_kept_weights_reflect_pruning(tiny_zoo: str) -> None:
    model, meta = h.load_model("tiny_x2_iht_r0.5", "cpu", False, tiny_zoo)
    kept, total = h.kept_weights(model)
    assert meta["scale"] == 2 and 0.45 < kept / total < 0.6


@pytest.mark.parametrize(
    "image",
    [
        Image.new("RGBA", (20, 16), (10, 200, 30, 0)),  # fully transparent: composited on white
        Image.fromarray(np.arange(320, dtype=np.uint8).reshape(16, 20)),  # grayscale
        Image.fromarray(np.arange(320, dtype=np.uint16).reshape(16, 20) * 200),  # 16-bit
    ],
    ids=["rgba", "gray", "16bit"],
)
def test_compare_accepts_rgba_gray_16bit(image: Image.Image) -> None:
    comp = h.compare(image, 2, ["bicubic"], h.MODE_LR)
    assert comp.results["bicubic"].shape == (32, 40, 3)
    assert comp.results["bicubic"].dtype == np.uint8
    if image.mode == "RGBA":
        assert comp.lr.min() == 255  # transparent pixels become white
    assert "converted" in comp.message


def test_size_cap_downscales_with_message() -> None:
    big = Image.new("RGB", (h.MAX_SIDE[h.MODE_LR] * 2, 40), (120, 80, 40))
    comp = h.compare(big, 2, ["bicubic"], h.MODE_LR)
    assert max(comp.lr.shape[:2]) == h.MAX_SIDE[h.MODE_LR]
    assert "cap" in comp.message and "downscaled" in comp.message


def test_user_mistakes_raise_clear_errors(tiny_zoo: str) -> None:
    with pytest.raises(ValueError, match="upload an image"):
        h.compare(None, 2, ["bicubic"])
    with pytest.raises(ValueError, match="none of the chosen methods"):
        h.compare(_photo(), 2, ["missing_x2_iss-p_r0.5"], zoo_path=tiny_zoo)
    with pytest.raises(ValueError, match="scale"):
        h.compare(_photo(), 5, ["bicubic"])


def test_pairs_zoom_and_overview(tiny_zoo: str) -> None:
    comp = h.compare(_photo(), 2, ["bicubic", "tiny_x2_iht_r0.5"], zoo_path=tiny_zoo)
    assert h.default_pair(comp) == ("bicubic", "tiny_x2_iht_r0.5")
    left, right = h.slider_pair(comp, h.HR_LABEL, h.LR_LABEL)
    assert left.shape == right.shape == (48, 48, 3)
    with pytest.raises(KeyError):
        h.slider_pair(comp, "nope", "bicubic")
    box = h.zoom_box(comp, 47, 0, size=16)
    assert box == (32, 0, 48, 16)  # clamped to the image
    grid = h.zoom_grid(comp, box, display=64)
    assert [c.split(" dB ")[-1] for _, c in grid] == [h.HR_LABEL, h.LR_LABEL, "bicubic", "tiny_x2_iht_r0.5"]
    assert all(tile.shape == (64, 64, 3) for tile, _ in grid)
    marked = h.overview(comp, box)
    assert tuple(marked[0, 40]) == (255, 0, 0) and not np.array_equal(marked, comp.hr)


def test_examples_bundled_and_urban100_crops(tmp_path: Path) -> None:
    bundled = h.example_images(None)
    assert len(bundled) >= 3 and all(Path(p).is_file() for p, _ in bundled)
    credits = (h.ASSETS / "CREDITS.md").read_text()
    assert all(Path(p).name in credits for p, _ in bundled)
    urban = tmp_path / "data" / "benchmarks" / "Urban100" / "HR"
    urban.mkdir(parents=True)
    Image.new("RGB", (300, 260), (1, 2, 3)).save(urban / "img_012.png")
    crops = h.example_images(tmp_path / "data", cache=tmp_path / "crops")
    assert [label for _, label in crops] == ["Urban100 img_012 (crop)"]
    with Image.open(crops[0][0]) as im:
        assert im.size == (h.URBAN100_CROP_SIZE, h.URBAN100_CROP_SIZE)
    assert Path(crops[0][0]).parent == tmp_path / "crops"


@pytest.mark.slow  # ~3 s idle, much more on a loaded machine
def test_train_live_streams_updates() -> None:
    updates = list(
        h.train_live(
            "swinir-light", 2, 0.9, 0.95, 3, 2, 8, 2, arch_kwargs=TINY, update_seconds=0.0, device="cpu"
        )
    )
    assert len(updates) >= 3
    flips, grads, training, status = updates[-1]
    assert all(isinstance(f, go.Figure) for f in (flips, grads, training))
    assert "3 / 3" in status and "too short" in status
    names = {trace.name for trace in flips.data}
    assert any(n.startswith("ISS-P") for n in names) and any(n.startswith("IHT") for n in names)
    # same init, same batches: the first losses agree exactly
    first_losses = [trace.y[0] for trace in training.data if trace.name.endswith("loss")]
    assert len(first_losses) == 2 and first_losses[0] == pytest.approx(first_losses[1])


def test_live_run_state_round_trip(tmp_path: Path) -> None:
    run = h.build_live_run("swinir-light", 2, 0.9, 0.95, 100, None, arch_kwargs=TINY)
    batches = h.training_batches(2, 8, 2)
    for i in range(1, 3):
        lr, hr = next(batches)
        for name in run.trainers:
            run.traces[name].commit(i, run.trainers[name].step(lr, hr))
    save_state(tmp_path / "s.safetensors", run.models, run.pruners, {"iteration": 2})
    fresh = h.build_live_run("swinir-light", 2, 0.9, 0.95, 100, None, arch_kwargs=TINY, seed=1)
    assert load_state(tmp_path / "s.safetensors", fresh.models, fresh.pruners) == {"iteration": 2}
    for name in run.models:
        saved = dict(run.models[name].named_parameters())
        for key, param in fresh.models[name].named_parameters():
            assert torch.equal(param, saved[key].detach().half().float())
        assert fresh.pruners[name].iteration == 2
        for key, mask in run.pruners[name].masks.items():
            assert torch.equal(fresh.pruners[name].masks[key], mask)
    save_recording(tmp_path, {"arch": "swinir-light", "states": []}, run.traces)
    config, traces = load_recording(tmp_path)
    assert config["iterations_done"] == 2 and config["layers"] == run.traces["iss-p"].layers
    assert traces["iht"].loss == pytest.approx(run.traces["iht"].loss, rel=1e-3)
    layer = config["layers"][0]
    assert traces["iss-p"].grad_norm[layer] == pytest.approx(run.traces["iss-p"].grad_norm[layer], rel=0.01)


def test_downsample_keeps_mass() -> None:
    x, y = figures.downsample(list(range(1000)), [1.0 if i % 10 == 0 else 0.0 for i in range(1000)], 100)
    assert len(x) == 100 and np.mean(y) == pytest.approx(0.1)


def test_paper_results_match_the_paper() -> None:
    rows = h.paper_results()["rows"]
    assert len(rows) == 64
    cell = next(r for r in rows if (r["table"], r["scale"], r["method"]) == (2, 4, "iss-p"))
    assert cell["ratio"] == 0.95 and cell["metrics"]["Set5"] == {"psnr": 31.16, "ssim": 0.8775}
    cat = next(r for r in rows if r["arch"] == "cat-r" and r["method"] == "iss-p")
    assert cat["metrics"]["Urban100"]["psnr"] == 26.94


def test_zoo_vs_paper_and_sparsity_view(tiny_zoo: str) -> None:
    rows = h.zoo_vs_paper(tiny_zoo)
    assert rows[0][:5] == ["tiny_x2_iht_r0.5", "", "Set5", 30.0, 0.9]
    assert rows[0][-1] == "not in the paper"  # ratio 0.5 is not a paper cell
    kept, hist, layers = h.sparsity_view("tiny_x2_iht_r0.5", None, tiny_zoo)
    assert isinstance(kept, go.Figure) and isinstance(hist, go.Figure) and layers
    assert all(0.4 < v <= 0.6 for v in kept.data[0].y[1:-1])  # pruned layers keep about half


@pytest.mark.slow  # two short training runs
def test_record_analysis_script_writes_a_resumable_recording(tmp_path: Path, monkeypatch) -> None:
    import importlib.util

    spec = importlib.util.spec_from_file_location("record", h.ROOT / "benchmarks" / "record_analysis.py")
    record = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(record)
    out = tmp_path / "rec"
    args = ["--out", str(out), "--iterations", "4", "--states", "2", "--flush-every", "2", "--batch", "2",
            "--patch", "8", "--arch-kwargs", json.dumps(TINY), "--ratio", "0.9"]  # fmt: skip
    assert record.main(args) == 0
    config, traces = load_recording(out)
    assert config["iterations_done"] == 4 and [s["iteration"] for s in config["states"]] == [2, 4]
    assert len(config["layers"]) > 2 and traces["iss-p"].iterations == [1, 2, 3, 4]
    run = h.build_live_run("swinir-light", 2, 0.9, 0.95, 100_000, None, arch_kwargs=TINY)
    meta = load_state(out / "state_4.safetensors", run.models, run.pruners)
    assert meta["iteration"] == 4 and run.pruners["iht"].iteration == 4
    # a live run can start from a recorded state; it goes on from the recorded iteration
    monkeypatch.setattr(h, "RECORDINGS_DIR", tmp_path)
    assert h.recorded_states() == [h.RANDOM_INIT, "rec @ 2", "rec @ 4"]
    *_, status = list(h.train_live(iterations=2, start="rec @ 2", patch=8, batch=2, update_seconds=0.0))[-1]
    assert "iteration 4," in status and "too short" not in status
    figs = h.recorded_figures("rec")
    assert "4 iterations of each run" in figs[-1]
    assert record.main(["--out", str(out), "--rewrite", "--keep-states", "last"]) == 0
    assert [s["iteration"] for s in load_recording(out)[0]["states"]] == [4]
    assert not (out / "state_2.safetensors").exists() and (out / "state_4.safetensors").exists()


def test_rewrite_upgrades_states_without_threshold_hints(tmp_path: Path) -> None:
    import importlib.util

    from safetensors import safe_open
    from safetensors.torch import load_file, save_file

    spec = importlib.util.spec_from_file_location("record", h.ROOT / "benchmarks" / "record_analysis.py")
    record = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(record)
    run = h.build_live_run("swinir-light", 2, 0.9, 0.95, 100, None, arch_kwargs=TINY)
    path = save_state(tmp_path / "state_0.safetensors", run.models, run.pruners, {"iteration": 0})
    save_recording(tmp_path, {"states": [{"iteration": 0, "file": path.name}]}, run.traces)
    tensors = load_file(str(path))  # make it look like a state from before ``tau`` existed
    with safe_open(str(path), framework="pt") as f:
        metadata = f.metadata()
    pruners = json.loads(metadata["pruner"])
    for skeleton in pruners.values():
        skeleton["__dict__"] = [kv for kv in skeleton["__dict__"] if kv[0] != "tau"]
    tensors = {k: v for k, v in tensors.items() if ".pruner.tau/" not in k}
    save_file(tensors, str(path), metadata={**metadata, "pruner": json.dumps(pruners)})
    with pytest.raises(KeyError, match="tau"):
        load_state(path, run.models, run.pruners)
    assert record.main(["--out", str(tmp_path), "--rewrite"]) == 0
    assert load_state(path, run.models, run.pruners) == {"iteration": 0}
