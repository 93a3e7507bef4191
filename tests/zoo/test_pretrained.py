"""iss.zoo.pretrained: ``iss.load`` (zoo name or path), ``iss.list_models``, ``iss.upscale``, the ``upscale``
command (files, folders, globs, bad files, the never-overwrite rule, exit codes); offline, on tiny models.
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

import iss
from iss import cli, data, zoo
from iss.zoo.pretrained import ModelInfo

pytestmark = pytest.mark.usefixtures("isolated_hub", "offline")  # no test may reach the Hub


@pytest.fixture(scope="module")
def tiny_file(tiny_zoo: str) -> Path:
    """The tiny x2 checkpoint the ``tiny_zoo`` manifest lists as ``tiny_x2_iht_r0.5``."""
    return Path(tiny_zoo).parent / "tiny_x2_iht.safetensors"


@pytest.fixture(scope="module")
def tiny(tiny_file: Path) -> torch.nn.Module:
    """The tiny model with dense kernels (fast, and what the sparse one must agree with)."""
    return iss.load(tiny_file, sparse=False)


def _noise(h: int, w: int, channels: int = 3, seed: int = 0) -> np.ndarray:
    shape = (h, w, channels) if channels > 1 else (h, w)
    return np.random.default_rng(seed).integers(0, 256, shape, dtype=np.uint8)


def _save(path: Path, array: np.ndarray) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(array).save(path)
    return path


def _upscale(capsys: pytest.CaptureFixture, *args: str) -> tuple[int, str, str]:
    """``python -m iss upscale ARGS``: (exit status, stdout, stderr)."""
    code = cli.main(["upscale", *map(str, args)])
    out, err = capsys.readouterr()
    return code, out, err


# ------------------------------------------------------------------------------------------ list and load


def test_list_models_gives_scale_method_ratio_and_set5_psnr(tiny_zoo: str) -> None:
    assert iss.list_models(tiny_zoo) == [
        ModelInfo("tiny_x2_iht_r0.5", "swinir-light", 2, "iht", 0.5, 30.0),
        ModelInfo("missing_x2_iss-p_r0.5", "swinir-light", 2, "iss-p", 0.5, None),
    ]
    shipped = iss.list_models()
    assert [m.name for m in shipped] == [e.name for e in zoo.load_zoo()]
    assert all(m.scale in (2, 3, 4) and 20 < m.set5_psnr < 40 for m in shipped)


def test_load_by_zoo_name_uses_the_verified_bundled_copy_offline(
    tiny_zoo: str, tiny_file: Path, caplog: pytest.LogCaptureFixture
) -> None:
    model = iss.load("tiny_x2_iht_r0.5", sparse=False, manifest=tiny_zoo)
    assert "no Hub location; using the bundled copy" in caplog.text  # the tiny zoo names no Hub repo
    reference, meta = iss.checkpoint.load(tiny_file)
    assert not model.training and model.scale == meta["scale"] == 2
    x = torch.rand(1, 3, 12, 16)
    with torch.inference_mode():
        torch.testing.assert_close(model(x), reference(x), rtol=0, atol=0)
        assert model(x).shape == (1, 3, 24, 32)


def test_load_the_readme_model_from_the_real_zoo() -> None:
    model = iss.load("swinir-light_x4_iss-p_r0.95", sparse=False)
    assert model.scale == 4 and not model.training
    assert iss.upscale(model, _noise(8, 10)).size == (40, 32)


def test_sparse_kernels_by_default_where_faster_and_off_on_request(
    tiny_file: Path, tiny: torch.nn.Module, monkeypatch: pytest.MonkeyPatch
) -> None:
    model = iss.load(str(tiny_file), exact=True)  # swinir-light's sparse speed beats dense on the CPU
    assert iss.sparse.layer_modes(model) and not iss.sparse.layer_modes(tiny)
    x = torch.rand(1, 3, 12, 12)
    with torch.inference_mode():
        torch.testing.assert_close(model(x), tiny(x), rtol=1e-4, atol=1e-5)
        assert (iss.load(str(tiny_file))(x) - tiny(x)).abs().max() < 1e-3  # default: half tiles (AVX-512)
    rates = {"dense": 2.0, "sparse": 1.0}
    monkeypatch.setattr(iss.sparse.speed, "gflops", lambda kind, arch, device: rates[kind])
    assert not iss.sparse.layer_modes(iss.load(tiny_file))  # the same rule the app's toggle follows
    with pytest.raises(ValueError, match="CPU only"):
        iss.load(tiny_file, sparse=True, device="cuda")


def test_load_errors_say_what_is_wrong(tiny_zoo: str, tmp_path: Path) -> None:
    with pytest.raises(KeyError, match=r"did you mean tiny_x2_iht_r0\.5"):
        iss.load("tiny_x2_iht_r0.05", manifest=tiny_zoo)
    with pytest.raises(FileNotFoundError, match="no bundled copy"):
        iss.load("missing_x2_iss-p_r0.5", manifest=tiny_zoo)
    with pytest.raises(FileNotFoundError, match="does not exist"):
        iss.load(tmp_path / "nope.safetensors")
    fake = tmp_path / "fake.safetensors"
    fake.write_bytes(b"not a checkpoint")
    with pytest.raises(ValueError, match="not a readable safetensors file"):
        iss.load(fake)


# ------------------------------------------------------------------------------------------------ upscale


def test_upscale_takes_a_path_a_pil_image_or_an_array(tiny: torch.nn.Module, tmp_path: Path) -> None:
    rgb = _noise(10, 14)
    expected = iss.infer.upscale_array(tiny, rgb)
    path = _save(tmp_path / "a.png", rgb)
    for image in (path, str(path), Image.fromarray(rgb), rgb):
        out = iss.upscale(tiny, image)
        assert isinstance(out, Image.Image) and out.mode == "RGB" and out.size == (28, 20)
        np.testing.assert_array_equal(np.asarray(out), expected)


def test_upscale_reads_grayscale_and_rgba_as_the_app_does(tiny: torch.nn.Module) -> None:
    gray = _noise(9, 11, channels=1)
    np.testing.assert_array_equal(
        np.asarray(iss.upscale(tiny, Image.fromarray(gray))),
        iss.infer.upscale_array(tiny, np.dstack([gray] * 3)),
    )
    rgba = np.dstack([_noise(9, 11), np.zeros((9, 11), np.uint8)])  # fully transparent: white
    white = np.full((9, 11, 3), 255, np.uint8)
    np.testing.assert_array_equal(
        np.asarray(iss.upscale(tiny, Image.fromarray(rgba, "RGBA"))), iss.infer.upscale_array(tiny, white)
    )


def test_upscale_refuses_images_above_the_apps_pixel_limit(
    tiny: torch.nn.Module, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = _save(tmp_path / "big.png", _noise(10, 20))
    monkeypatch.setattr(data, "MAX_PIXELS", 199)
    for image in (path, _noise(10, 20)):
        with pytest.raises(data.ImageError, match="too large: 20x10 = 200 pixels"):
            iss.upscale(tiny, image)


# ------------------------------------------------------------------------------------------ upscale command


def test_a_folder_with_a_bad_file_goes_on_and_exits_1(
    tiny_file: Path, tiny: torch.nn.Module, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    photos = tmp_path / "photos"
    arrays = {"colour": _noise(8, 12), "gray": _noise(8, 12, channels=1, seed=1)}
    for name, array in arrays.items():
        _save(photos / f"{name}.png", array)
    _save(photos / "alpha.png", np.dstack([_noise(8, 12, seed=2), np.full((8, 12), 128, np.uint8)]))
    (photos / "broken.png").write_bytes(b"\x89PNG\r\n\x1a\n not really")
    (photos / "notes.txt").write_text("not an image, and not named like one: left alone")
    code, out, err = _upscale(capsys, tiny_file, photos, "-o", tmp_path / "out", "--dense")
    assert code == 1 and err == ""
    lines = out.splitlines()  # a line per image in name order (alpha, broken, colour, gray), then the summary
    assert lines[1] == (
        f"[2/4] {photos / 'broken.png'}: skipped: not an image (readable formats: {', '.join(data.FORMATS)})"
    )
    assert re.fullmatch(rf"\[4/4\] {re.escape(str(tmp_path / 'out' / 'gray_tiny_x2_iht.png'))}  "
                        r"elapsed \d:\d\d:\d\d, about 0:00:00 left", lines[3])  # fmt: skip
    assert lines[4] == f"wrote 3 of 4 images to {tmp_path / 'out'}" and len(lines) == 5
    written = sorted(p.name for p in (tmp_path / "out").iterdir())
    assert written == ["alpha_tiny_x2_iht.png", "colour_tiny_x2_iht.png", "gray_tiny_x2_iht.png"]
    for name, array in arrays.items():
        result = iss.data.read_image(tmp_path / "out" / f"{name}_tiny_x2_iht.png")
        np.testing.assert_array_equal(result, iss.infer.upscale_array(tiny, iss.data.to_rgb_uint8(array)))
    assert Image.open(tmp_path / "out" / "alpha_tiny_x2_iht.png").mode == "RGB"


def test_globs_files_and_zoo_names_each_image_once_in_webp(
    tiny_zoo: str, tiny: torch.nn.Module, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    a = _save(tmp_path / "in" / "a.png", _noise(8, 8))
    _save(tmp_path / "in" / "sub" / "b.png", _noise(8, 10, seed=1))
    glob = str(tmp_path / "in" / "**" / "*.png")
    args = ("tiny_x2_iht_r0.5", glob, a, "-o", tmp_path / "out", "--format", "webp", "--manifest", tiny_zoo)
    code, out, _ = _upscale(capsys, *args)
    assert code == 0 and "wrote 2 of 2 images" in out
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == [
        "a_tiny_x2_iht_r0.5.webp",
        "b_tiny_x2_iht_r0.5.webp",
    ]  # the zoo name already says x2; webp is lossless
    webp = Image.open(tmp_path / "out" / "a_tiny_x2_iht_r0.5.webp")
    np.testing.assert_array_equal(
        np.asarray(webp.convert("RGB")), iss.infer.upscale_array(tiny, _noise(8, 8))
    )


def test_tiles_and_a_name_that_does_not_say_the_scale(
    tiny_file: Path, tiny: torch.nn.Module, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    plain = tmp_path / "mine.safetensors"
    shutil.copyfile(tiny_file, plain)
    image = _noise(40, 50)
    _save(tmp_path / "in" / "p.png", image)
    code, _, _ = _upscale(capsys, plain, tmp_path / "in", "-o", tmp_path / "out", "--tile", "36", "--dense")
    assert code == 0
    result = iss.data.read_image(tmp_path / "out" / "p_mine_x2.png")
    np.testing.assert_array_equal(result, iss.infer.upscale_array(tiny, image, tile=36))
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["upscale", str(plain), str(tmp_path / "in"), "-o", str(tmp_path / "out"), "--tile", "32"])
    assert exit_info.value.code == 2 and "must be a whole number above 32" in capsys.readouterr().err


def test_never_writes_over_an_input(tiny_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    folder = tmp_path / "photos"
    a = _save(folder / "a.png", _noise(8, 8))
    assert _upscale(capsys, tiny_file, folder, "-o", folder, "--dense")[0] == 0  # results beside the inputs
    result = folder / "a_tiny_x2_iht.png"
    before = {p.name: p.read_bytes() for p in folder.iterdir()}
    code, out, err = _upscale(capsys, tiny_file, folder, "-o", folder)  # now the result is an input too
    assert code == 2 and out == ""
    assert err == f"error: refusing to write {result}: it is one of the inputs; choose another -o folder\n"
    assert {p.name: p.read_bytes() for p in folder.iterdir()} == before

    out_dir = tmp_path / "out"
    out_dir.mkdir()
    (out_dir / "a_tiny_x2_iht.png").symlink_to(a)  # writing there would overwrite the input through the link
    code, _, err = _upscale(capsys, tiny_file, a, "-o", out_dir)
    assert code == 2 and "is one of the inputs" in err and a.read_bytes() == before["a.png"]


def test_usage_mistakes_exit_2_with_one_line(
    tiny_file: Path, tiny_zoo: str, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    _save(tmp_path / "x" / "same.png", _noise(8, 8))
    _save(tmp_path / "y" / "same.png", _noise(8, 8))
    (tmp_path / "empty").mkdir()
    (tmp_path / "file").write_text("")
    out = ["-o", tmp_path / "out"]
    cases = {
        (tiny_file, tmp_path / "nope.png", *out): "no such file or folder",
        (tiny_file, tmp_path / "*.jpg", *out): "nothing matches",
        (tiny_file, tmp_path / "empty", *out): "no images in",
        (tiny_file, tmp_path / "x", tmp_path / "y", *out): "would both be written",
        (tiny_file, tmp_path / "x", "-o", tmp_path / "file"): "is a file",
        ("tiny_x2_iht_r0.05", tmp_path / "x", *out, "--manifest", tiny_zoo): "did you mean",
    }
    for args, message in cases.items():
        code, stdout, err = _upscale(capsys, *args)
        assert code == 2 and message in err and err.count("\n") == 1 and stdout == "", (args, err)
    assert not (tmp_path / "out").exists()  # nothing is written before the inputs are known good


def test_a_folder_tree_keeps_its_subfolders_and_existing_results_are_skipped(
    tiny_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    photos, out = tmp_path / "photos", tmp_path / "out"
    _save(photos / "a.png", _noise(8, 8))
    _save(photos / "trip" / "day1" / "b.png", _noise(8, 10, seed=1))
    code, stdout, _ = _upscale(capsys, tiny_file, photos, "-o", out, "--dense")
    assert code == 0 and stdout.splitlines()[0].startswith(f"[1/2] {out / 'a_tiny_x2_iht.png'}  elapsed ")
    assert (out / "a_tiny_x2_iht.png").is_file() and (out / "trip" / "day1" / "b_tiny_x2_iht.png").is_file()

    (out / "a_tiny_x2_iht.png").write_bytes(b"kept")  # a result already there is never overwritten silently
    code, stdout, _ = _upscale(capsys, tiny_file, photos, "-o", out, "--dense")
    assert code == 0 and (out / "a_tiny_x2_iht.png").read_bytes() == b"kept"
    skipped = f"[1/2] {out / 'a_tiny_x2_iht.png'}: exists, skipped (--overwrite replaces it)"
    assert stdout.splitlines()[0] == skipped
    assert stdout.splitlines()[-1] == f"wrote 0 of 2 images to {out} (2 already there)"
    assert _upscale(capsys, tiny_file, photos, "-o", out, "--dense", "--overwrite")[0] == 0
    assert Image.open(out / "a_tiny_x2_iht.png").size == (16, 16)


def test_an_unwritable_output_folder_or_a_symlink_loop_is_one_line(
    tiny_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    photos = tmp_path / "photos"
    _save(photos / "a.png", _noise(8, 8))
    (tmp_path / "file").write_text("")
    code, stdout, err = _upscale(capsys, tiny_file, photos, "-o", tmp_path / "file" / "out")
    assert code == 2 and stdout == "" and err.count("\n") == 1
    folder = tmp_path / "file" / "out"
    assert err.startswith(f"error: cannot write to output folder {folder}: Not a directory")
    if os.geteuid() != 0:  # root writes through permissions
        (tmp_path / "locked").mkdir(mode=0o555)
        code, _, err = _upscale(capsys, tiny_file, photos, "-o", tmp_path / "locked")
        assert code == 2 and "Permission denied" in err and err.count("\n") == 1

    (photos / "sub").mkdir()
    (photos / "sub" / "back").symlink_to(photos, target_is_directory=True)
    code, stdout, err = _upscale(capsys, tiny_file, photos, "-o", tmp_path / "out")
    assert code == 2 and stdout == "" and err.count("\n") == 1
    loop = photos / "sub" / "back"
    assert err == f"error: symlink loop: {loop} leads back to a folder above it; remove the link\n"
