"""iss.evaluate and ``python -m iss eval``: the published bicubic Set5 row, JSON, models, clean errors."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

import iss.hub
from iss.cli import main
from iss.data.metrics import psnr_y, ssim_y
from iss.evaluate import evaluate, format_table
from iss.infer import bicubic_upscaler, model_upscaler

# The bicubic row of the SR literature (Y channel, border = scale) and the tolerance we hold ours to.
PUBLISHED_SET5 = {2: (33.66, 0.9299), 3: (30.39, 0.8682), 4: (28.42, 0.8104)}


@pytest.fixture(autouse=True)
def _one_thread() -> Iterator[None]:
    """Tiny models run faster on one thread than on a thread pool fighting other processes for the CPU."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(autouse=True)
def _isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A private LR cache and no ISS_DATA_DIR unless a test sets it."""
    monkeypatch.setenv("ISS_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("ISS_DATA_DIR", raising=False)


@pytest.fixture
def tiny_set(tmp_path: Path) -> Path:
    """A benchmarks folder holding a 'Set5' of two small random images (LR generated)."""
    hr = tmp_path / "tiny" / "Set5" / "HR"
    hr.mkdir(parents=True)
    rng = np.random.default_rng(0)
    for name, (h, w) in {"a": (72, 78), "b": (30, 28)}.items():
        Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8)).save(hr / f"{name}.png")
    return tmp_path / "tiny"


def _eval(*args: str) -> int:
    return main(["eval", *args])


@pytest.mark.parametrize("scale", [2, 3, 4])
def test_bicubic_set5_matches_published_row(
    benchmarks: Path, tmp_path: Path, capsys: pytest.CaptureFixture, scale: int
) -> None:
    out = tmp_path / "res.json"
    argv = ["--model", "bicubic", "--scale", str(scale), "--datasets", "Set5", "--data-dir", str(benchmarks)]
    assert _eval(*argv, "--json", str(out)) == 0
    stdout, stderr = capsys.readouterr()
    result = json.loads(out.read_text())
    assert list(result) == ["Set5"] and set(result["Set5"]) == {"psnr", "ssim"}
    psnr, ssim = PUBLISHED_SET5[scale]
    assert abs(result["Set5"]["psnr"] - psnr) <= 0.03
    assert abs(result["Set5"]["ssim"] - ssim) <= 0.001
    assert f"Set5  {result['Set5']['psnr']:>7.2f}  {result['Set5']['ssim']:.4f}" in stdout
    assert stderr == ""  # no progress bar when stderr is not a terminal


def test_evaluate_function_matches_per_image_metrics(benchmarks: Path) -> None:
    """The mean over images of psnr_y/ssim_y on the shipped LR, computed here independently."""
    result = evaluate(bicubic_upscaler(4), ["Set5"], 4, benchmarks, progress=False)
    lr_dir, hr_dir = benchmarks / "Set5" / "LR_bicubic" / "X4", benchmarks / "Set5" / "HR"
    scores = []
    for hr_file in sorted(hr_dir.glob("*.png")):
        hr = np.asarray(Image.open(hr_file).convert("RGB"))
        lr = np.asarray(Image.open(lr_dir / f"{hr_file.stem}x4.png").convert("RGB"))
        hr = hr[: lr.shape[0] * 4, : lr.shape[1] * 4]
        sr = bicubic_upscaler(4)(lr)
        scores.append((psnr_y(sr, hr, 4), ssim_y(sr, hr, 4)))
    assert result["Set5"]["psnr"] == pytest.approx(np.mean([s[0] for s in scores]), abs=1e-12)
    assert result["Set5"]["ssim"] == pytest.approx(np.mean([s[1] for s in scores]), abs=1e-12)


def test_rgb_convention_is_lower_than_y(benchmarks: Path) -> None:
    y = evaluate(bicubic_upscaler(2), ["Set5"], 2, benchmarks, progress=False)
    rgb = evaluate(bicubic_upscaler(2), ["Set5"], 2, benchmarks, progress=False, y_channel=False)
    assert rgb["Set5"]["psnr"] < y["Set5"]["psnr"] - 1.0  # chroma errors count on RGB
    assert rgb["Set5"]["ssim"] == y["Set5"]["ssim"]


def test_several_sets_and_env_data_dir(
    tiny_set: Path,
    benchmarks: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture,
) -> None:
    data = tmp_path / "data"
    (data / "benchmarks").mkdir(parents=True)
    for name in ("Set5", "Set14"):
        shutil.copytree(benchmarks / name, data / "benchmarks" / name)
    monkeypatch.setenv("ISS_DATA_DIR", str(data))
    out = tmp_path / "both.json"
    assert _eval("--scale", "3", "--datasets", "set5, Set14", "--json", str(out)) == 0
    result = json.loads(out.read_text())
    assert list(result) == ["Set5", "Set14"]
    # Published bicubic Set14 x3 is 27.55/0.7742; this Set14 copy (full-size HR) measures slightly higher.
    assert abs(result["Set14"]["psnr"] - 27.55) < 0.15 and abs(result["Set14"]["ssim"] - 0.7742) < 0.003
    stdout = capsys.readouterr().out.splitlines()
    assert stdout[0].startswith("bicubic x3, Y, border 3") and stdout[1].split() == ["set", "PSNR", "SSIM"]
    assert [line.split()[0] for line in stdout[2:]] == ["Set5", "Set14"]


def test_format_table_aligns_columns() -> None:
    table = format_table(
        {"Set5": {"psnr": 33.6612, "ssim": 0.92991}, "Urban100": {"psnr": 26.9, "ssim": 0.8}}
    )
    assert table.splitlines() == [
        "set          PSNR    SSIM",
        "Set5        33.66  0.9299",
        "Urban100    26.90  0.8000",
    ]


def test_official_weights_and_checkpoint_models(tiny_set: Path, tmp_path: Path) -> None:
    """An architecture with --weights, and one of our checkpoints, give what the model itself gives."""
    from iss import archs, checkpoint

    one = tmp_path / "one"  # one small image: the full-size EDSR-baseline is slow on CPU
    (one / "Set5" / "HR").mkdir(parents=True)
    shutil.copy(tiny_set / "Set5" / "HR" / "b.png", one / "Set5" / "HR")
    torch.manual_seed(0)
    model = archs.build("edsr-baseline", 2)
    torch.save({"params": model.state_dict()}, tmp_path / "official.pth")
    expected = evaluate(model_upscaler(model), ["Set5"], 2, one, progress=False)
    out = tmp_path / "official.json"
    weights = ["--model", "edsr-baseline", "--weights", str(tmp_path / "official.pth"), "--device", "cpu"]
    assert (
        _eval(*weights, "--scale", "2", "--datasets", "Set5", "--data-dir", str(one), "--json", str(out)) == 0
    )
    assert json.loads(out.read_text()) == expected

    small = archs.build("edsr-baseline", 3, num_feat=8, num_block=1)
    meta = {"arch": "edsr-baseline", "scale": 3, "arch_kwargs": {"num_feat": 8, "num_block": 1}}
    path = checkpoint.save(small, tmp_path / "small.safetensors", meta)
    expected = evaluate(model_upscaler(small), ["Set5"], 3, tiny_set, progress=False)
    out = tmp_path / "ckpt.json"
    assert (
        _eval("--model", str(path), "--datasets", "Set5", "--data-dir", str(tiny_set), "--json", str(out))
        == 0
    )
    assert json.loads(out.read_text()) == expected  # scale taken from the checkpoint
    tiled = tmp_path / "tiled.json"
    assert _eval("--model", str(path), "--data-dir", str(tiny_set), "--datasets", "Set5", "--tile", "16",
                 "--overlap", "10", "--json", str(tiled)) == 0  # fmt: skip
    # Receptive radius 5 LR pixels <= overlap // 2: tiling changes nothing beyond float summation order
    # (which can flip the rounding of a pixel or two).
    assert json.loads(tiled.read_text())["Set5"]["psnr"] == pytest.approx(expected["Set5"]["psnr"], abs=1e-3)


def test_download_fetches_only_missing_sets(
    tiny_set: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fetched = []
    hub_root = tmp_path / "hub"
    shutil.copytree(tiny_set / "Set5", hub_root / "Set14")

    def fake_fetch(name: str) -> Path:
        fetched.append(name)
        return hub_root

    monkeypatch.setattr(iss.hub, "fetch_benchmark", fake_fetch)
    out = tmp_path / "dl.json"
    args = ["--scale", "2", "--datasets", "Set5,set14", "--data-dir", str(tiny_set), "--download", "--json"]
    assert _eval(*args, str(out)) == 0
    assert fetched == ["Set14"] and list(json.loads(out.read_text())) == ["Set5", "Set14"]


def _assert_one_line_error(capsys: pytest.CaptureFixture, code: int, *needles: str) -> None:
    stdout, stderr = capsys.readouterr()
    assert code != 0
    assert len(stderr.strip().splitlines()) == 1 and stderr.startswith("error: "), stderr
    assert "Traceback" not in stderr + stdout
    for needle in needles:
        assert needle in stderr


def test_error_unknown_set(benchmarks: Path, capsys: pytest.CaptureFixture) -> None:
    code = _eval("--scale", "2", "--datasets", "Set5,Set6", "--data-dir", str(benchmarks))
    _assert_one_line_error(capsys, code, "unknown benchmark set 'Set6'")


def test_error_missing_folders(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    code = _eval("--scale", "2", "--datasets", "Set5", "--data-dir", str(tmp_path))
    _assert_one_line_error(capsys, code, "Set5/HR not found")
    code = _eval("--scale", "2", "--datasets", "Set5", "--data-dir", str(tmp_path / "nope"))
    _assert_one_line_error(capsys, code, "is not a folder")
    code = _eval("--scale", "2", "--datasets", "Set5")
    _assert_one_line_error(capsys, code, "--data-dir", "ISS_DATA_DIR")


def test_error_unreadable_image(tiny_set: Path, capsys: pytest.CaptureFixture) -> None:
    (tiny_set / "Set5" / "HR" / "c.png").write_text("not really a png")
    code = _eval("--scale", "2", "--datasets", "Set5", "--data-dir", str(tiny_set))
    _assert_one_line_error(capsys, code, "c.png", "not an image")


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--scale", "5"], "--scale must be 2, 3 or 4, got 5"),
        ([], "--scale is required"),
        (["--scale", "2", "--model", "swinir-light"], "needs --weights"),
        (["--scale", "2", "--model", "swinir-light", "--weights", "missing.pth"], "missing.pth not found"),
        (["--scale", "2", "--model", "nonsense"], "unknown --model 'nonsense'"),
        (["--scale", "2", "--model", "x.pth"], "go with --weights"),
        (["--model", "missing.safetensors"], "missing.safetensors does not exist"),
        (
            ["--scale", "2", "--model", "edsr-l", "--weights", "w.pth", "--tile", "16"],
            "--tile must be larger",
        ),
        (["--scale", "2", "--datasets", " , "], "--datasets is empty"),
        (["--model", "edsr-l", "--scale", "2", "--device", "warp9"], "--device 'warp9' is not a device"),
    ],
)
def test_error_bad_arguments(
    tiny_set: Path, capsys: pytest.CaptureFixture, args: list[str], needle: str
) -> None:
    code = _eval("--data-dir", str(tiny_set), "--datasets", "Set5", *args)  # later flags win
    _assert_one_line_error(capsys, code, needle)


def test_error_wrong_weights_file(tiny_set: Path, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    (tmp_path / "w.pth").write_bytes(b"definitely not a checkpoint")
    code = _eval("--scale", "2", "--model", "edsr-baseline", "--weights", str(tmp_path / "w.pth"),
                 "--data-dir", str(tiny_set), "--datasets", "Set5")  # fmt: skip
    _assert_one_line_error(capsys, code, "w.pth")


@pytest.mark.parametrize(
    ("name", "needle"), [("int16_mask", "torch.int16"), ("unknown_kwarg", "no option colour")]
)
def test_error_malformed_checkpoint(
    malformed_zoo: str, tiny_set: Path, capsys: pytest.CaptureFixture, name: str, needle: str
) -> None:
    """A re-signed malformed checkpoint is one line on stderr, not a traceback."""
    path = Path(malformed_zoo).parent / f"{name}.safetensors"
    code = _eval("--model", str(path), "--data-dir", str(tiny_set), "--datasets", "Set5")
    _assert_one_line_error(capsys, code, f"checkpoint {path}", needle)


def test_error_upscaler_returning_wrong_shape(tiny_set: Path) -> None:
    with pytest.raises(ValueError, match="the upscaler returned uint8"):
        evaluate(lambda lr: lr, ["Set5"], 2, tiny_set, progress=False)


def test_sparse_kernels_give_the_dense_scores(
    tiny_set: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """``--sparse`` (iss.sparsify) on a 95%-zero checkpoint scores what the dense model scores, and the
    table's title says which kernels ran."""
    from iss import archs, checkpoint

    torch.manual_seed(0)
    model = archs.build("edsr-baseline", 2, num_feat=16, num_block=1)
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, (torch.nn.Conv2d, torch.nn.Linear)):
                m.weight.mul_(torch.rand_like(m.weight) >= 0.95)
    meta = {"arch": "edsr-baseline", "scale": 2, "arch_kwargs": {"num_feat": 16, "num_block": 1}}
    path = checkpoint.save(model, tmp_path / "sparse.safetensors", meta)
    scores = {}
    for flag in ((), ("--sparse",)):
        out = tmp_path / f"scores{len(flag)}.json"
        args = ("--model", str(path), "--datasets", "Set5", "--data-dir", str(tiny_set), "--device", "cpu")
        assert _eval(*args, "--json", str(out), *flag) == 0
        scores[flag] = json.loads(out.read_text())["Set5"]
    assert scores[("--sparse",)]["psnr"] == pytest.approx(scores[()]["psnr"], abs=1e-3)
    printed = capsys.readouterr().out
    labels = ("fused C kernels", "C kernels", "PyTorch kernels (no C compiler)", "dense kernels")
    assert sum(f"({label})" in printed for label in labels) == 1


@pytest.mark.usefixtures("isolated_hub", "offline")
def test_a_zoo_name_on_the_data_folder_the_readme_describes(tmp_path: Path) -> None:
    data = tmp_path / "data"  # data/benchmarks/Set5/HR, as every other command takes it
    hr = data / "benchmarks" / "Set5" / "HR"
    hr.mkdir(parents=True)
    rng = np.random.default_rng(1)
    Image.fromarray(rng.integers(0, 256, (24, 30, 3), dtype=np.uint8)).save(hr / "a.png")
    name, out = "swinir-light_x2_iss-p_r0.95", tmp_path / "res.json"
    assert _eval("--model", name, "--datasets", "Set5", "--data-dir", str(data), "--json", str(out)) == 0
    model = iss.load(name, sparse=False)
    expected = evaluate(model_upscaler(model), ["Set5"], 2, data / "benchmarks", progress=False)
    assert json.loads(out.read_text())["Set5"] == pytest.approx(expected["Set5"])
