"""The Compare tab as plain functions (no server): compare, inputs, caps, missing checkpoints, zoom."""

from __future__ import annotations

import hashlib
import json
import shutil
import threading
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch
from common import ROOT, TINY
from huggingface_hub import constants
from PIL import Image

import iss
import iss.data.metrics
import iss.sparse.speed
from iss.ui import catalog, compare


def _photo(size: int = 48) -> Image.Image:
    """A textured RGB test image (a bundled photo crop)."""
    img = iss.data.read_image(catalog.EXAMPLES_DIR / "pagoda.png")
    return Image.fromarray(img[:size, :size])


def _compare(methods, scale: int = 2, image=None, **kwargs) -> compare.Comparison:
    """``compare.compare`` of the tiny zoo's backbone at ratio 0.5 (dense, CPU unless told otherwise)."""
    kwargs = {"sparse": False, "device": "cpu", **kwargs}
    return compare.compare(
        _photo() if image is None else image, "swinir-light", scale, 0.5, methods, **kwargs
    )


def test_compare_bicubic_and_checkpoint(tiny_zoo: str, tmp_path: Path) -> None:
    names = catalog.method_choices("swinir-light", 2, 0.5, tiny_zoo)
    assert names == ["bicubic", "iss-p", "iht"]  # the app's one order: ISS-P first
    comp = _compare(names, zoo_path=tiny_zoo, out_dir=str(tmp_path))
    assert set(comp.results) == {"bicubic", "iht"}
    assert comp.hr.shape == (48, 48, 3) and comp.lr.shape == (24, 24, 3)
    rows = {r[0]: r for r in comp.rows}
    bicubic, tiny = rows["bicubic"], rows["iht"]
    assert bicubic[1] == pytest.approx(
        iss.data.metrics.psnr_y(iss.imresize(comp.lr, 2), comp.hr, crop_border=2), abs=0.01
    )
    assert isinstance(tiny[1], float) and 0 < tiny[2] <= 1
    assert "(50.0%)" in tiny[3] or "(5" in tiny[3]  # about half of the weights kept
    assert tiny[5] == "1,200"  # iterations trained: the methods of a cell may have had different budgets
    assert tiny[6].endswith("MB")
    # the missing checkpoint is greyed out with its reason, not fatal
    assert rows["iss-p"][1].startswith("unavailable: ")
    assert "missing" in rows["iss-p"][1] and "iss-p is unavailable" in comp.message
    for path in comp.files:
        with Image.open(path) as im:
            assert im.format == "PNG" and im.size == (48, 48)


def test_sparse_kernels_toggle_gives_the_same_image(tiny_zoo: str) -> None:
    """The "sparse kernels" toggle runs the checkpoint through iss.sparsify: same pixels, its own time."""
    name = "iht"
    dense = _compare([name], zoo_path=tiny_zoo)
    fast = _compare([name], zoo_path=tiny_zoo, sparse=True)
    model, _ = catalog.load_model("tiny_x2_iht_r0.5", "cpu", True, tiny_zoo)
    assert any(isinstance(m, iss.sparse.SparseConv2d) for m in model.modules())
    diff = np.abs(fast.results[name].astype(int) - dense.results[name].astype(int))
    assert diff.max() <= 1  # equal within 1e-4 before rounding to uint8
    row = next(r for r in fast.rows if r[0] == name)
    assert row[1] == pytest.approx(next(r for r in dense.rows if r[0] == name)[1], abs=0.01)
    assert isinstance(row[-1], float) and row[-1] > 0  # a number: the column fits its panel
    assert f"ran ({iss.sparse.sparse_path(model)}; expected" in fast.message  # the summary names the kernels
    assert "ran (dense kernels; expected" in dense.message
    assert "C kernels" in compare.sparse_kernel_note() or "fallback" in compare.sparse_kernel_note()


def test_kept_weights_reflect_pruning(tiny_zoo: str) -> None:
    model, meta = catalog.load_model("tiny_x2_iht_r0.5", "cpu", False, tiny_zoo)
    kept, total = catalog.kept_weights(model)
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
    comp = _compare(["bicubic"], image=image, mode=compare.MODE_LR)
    assert comp.results["bicubic"].shape == (32, 40, 3)
    assert comp.results["bicubic"].dtype == np.uint8
    if image.mode == "RGBA":
        assert comp.lr.min() == 255  # transparent pixels become white
    assert "converted" in comp.message


def test_size_cap_downscales_with_message() -> None:
    big = Image.new("RGB", (compare.MAX_SIDE[compare.MODE_HR] * 2, 40), (120, 80, 40))
    comp = _compare(["bicubic"], image=big, mode=compare.MODE_HR)
    assert max(comp.hr.shape[:2]) == compare.MAX_SIDE[compare.MODE_HR]
    assert "cap" in comp.message and "downscaled" in comp.message


def test_lr_inputs_are_upscaled_whole() -> None:
    """An LR input wider than 512 px (a cap once) comes back whole, at scale times its size."""
    lr = Image.new("RGB", (700, 40), (120, 80, 40))
    comp = _compare(["bicubic"], image=lr, mode=compare.MODE_LR)
    assert comp.results["bicubic"].shape == (80, 1400, 3) and "cap" not in comp.message


def test_lr_inputs_too_slow_or_large_are_refused_with_the_numbers(
    tiny_zoo: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    image = _photo(96)
    monkeypatch.setattr(compare, "LR_MAX_SECONDS", 1e-9)
    with pytest.raises(
        ValueError, match=r"whole 96x96 LR image to 192x192 .* over this app's 0-minute limit"
    ):
        _compare(["bicubic", "iht"], image=image, mode=compare.MODE_LR, zoo_path=tiny_zoo)
    monkeypatch.setattr(compare, "LR_MAX_SECONDS", 600.0)
    monkeypatch.setattr(compare, "MAX_RESULT_BYTES", 192 * 192 * 3 * 2)  # the LR view and one result
    with pytest.raises(ValueError, match=r"needs 0.0 GiB .* choose at most 1 method"):
        _compare(["bicubic", "iht"], image=image, mode=compare.MODE_LR, zoo_path=tiny_zoo)
    assert _compare(["bicubic"], image=image, mode=compare.MODE_LR).results["bicubic"].shape == (192, 192, 3)


def test_tiles_report_progress_and_stop_keeps_the_finished_methods(tiny_zoo: str) -> None:
    image = Image.fromarray(iss.data.read_image(catalog.EXAMPLES_DIR / "pagoda.png")[:, :220])  # tiled
    heard: list[float] = []
    comp = _compare(["bicubic", "iht"], image=image, mode=compare.MODE_LR, zoo_path=tiny_zoo,
                    progress=lambda fraction, text: heard.append(fraction))  # fmt: skip
    assert len(heard) >= 4 and heard == sorted(heard) and heard[-1] == pytest.approx(1.0)
    stop = threading.Event()

    def stop_after_first_tile(fraction: float, text: str) -> None:
        assert "left" in text and "tile 1 of" in text
        stop.set()

    comp = _compare(["bicubic", "iht"], image=image, mode=compare.MODE_LR, zoo_path=tiny_zoo,
                    progress=stop_after_first_tile, stop=stop)  # fmt: skip
    assert list(comp.results) == ["bicubic"] and "Stopped: 1 of 2 methods finished." in comp.message
    with pytest.raises(ValueError, match="stopped before any method finished"):
        _compare(["iht"], image=image, mode=compare.MODE_LR, zoo_path=tiny_zoo, stop=stop)


def test_inputs_are_described_as_they_were_decoded(tmp_path: Path) -> None:
    """CMYK is converted (no alpha to composite), an animation or a multi-page TIFF says
    which frame is used, and an elongated strip blames the size cap, not a small size."""
    Image.new("CMYK", (32, 32), (0, 50, 100, 0)).save(tmp_path / "cmyk.tiff")
    _, _, note = compare.prepare_input(str(tmp_path / "cmyk.tiff"), compare.MODE_LR, 2)
    assert note == "input mode CMYK converted to 8-bit RGB"
    _, _, note = compare.prepare_input(Image.new("RGBA", (32, 32)), compare.MODE_LR, 2)
    assert note == "input mode RGBA converted to 8-bit RGB (alpha composited on white)"
    frames = [Image.new("RGB", (32, 32), (i * 80, 0, 0)) for i in range(3)]
    for name in ("anim.png", "pages.tiff"):
        frames[0].save(tmp_path / name, save_all=True, append_images=frames[1:])
        lr, _, note = compare.prepare_input(str(tmp_path / name), compare.MODE_LR, 2)
        assert note == "the file holds 3 frames or pages: the first is used" and lr[0, 0, 0] == 0
    strip = Image.new("RGB", (5000, 20))
    with pytest.raises(ValueError, match=r"too elongated for x4: fitting its 5000x20 to the 1024px cap"):
        compare.prepare_input(strip, compare.MODE_HR, 4)
    with pytest.raises(ValueError, match=r"too small for x4: 12x40; use at least 16px per side"):
        compare.prepare_input(Image.new("RGB", (12, 40)), compare.MODE_HR, 4)


def test_user_mistakes_raise_clear_errors(tiny_zoo: str) -> None:
    with pytest.raises(ValueError, match="upload an image"):
        compare.compare(None, "swinir-light", 2, 0.5, ["bicubic"])
    with pytest.raises(ValueError, match="none of the chosen methods"):
        _compare(["iss-p"], zoo_path=tiny_zoo)
    with pytest.raises(ValueError, match="scale"):
        _compare(["bicubic"], scale=5)


def test_pairs_zoom_and_overview(tiny_zoo: str) -> None:
    comp = _compare(["bicubic", "iht"], zoo_path=tiny_zoo)
    assert compare.default_pair(comp) == ("bicubic", "iht")
    left, right = compare.slider_pair(comp, compare.HR_LABEL, compare.LR_LABEL)
    assert left.shape == right.shape == (48, 48, 3)
    with pytest.raises(KeyError):
        compare.slider_pair(comp, "nope", "bicubic")
    box = compare.zoom_box(comp, 47, 0, size=16)
    assert box == (32, 0, 48, 16)  # clamped to the image
    grid = compare.zoom_grid(comp, box, display=64)
    assert [c.split()[0] for _, c in grid] == ["HR", "LR", "bicubic", "iht"]
    region_psnr = iss.data.metrics.psnr_y(comp.results["iht"][0:16, 32:48], comp.hr[0:16, 32:48], 0)
    assert grid[-1][1] == f"iht {region_psnr:.2f}"  # the region's PSNR, not the whole image's
    assert all(tile.shape == (64, 64, 3) for tile, _ in grid)
    marked = compare.overview(comp, box)
    assert tuple(marked[0, 40]) == (255, 0, 0) and not np.array_equal(marked, comp.hr)


def test_zoom_opens_on_the_most_detailed_region(tiny_zoo: str) -> None:
    comp = _compare(["bicubic"], zoo_path=tiny_zoo)
    flat = np.full_like(comp.hr, 128)
    flat[30:42, 4:16] = np.random.default_rng(0).integers(0, 256, (12, 12, 3))  # texture low on the left
    comp = replace(comp, hr=flat)
    x0, y0, x1, y1 = compare.zoom_box(comp, None, None, size=16)
    assert x0 <= 4 and x1 >= 16 and y0 <= 30 and y1 >= 42  # the whole textured patch is in view
    assert compare.zoom_box(comp, 47, 0, size=16) == (32, 0, 48, 16)  # a click still moves it


def test_examples_bundled_and_urban100_crops(tmp_path: Path) -> None:
    bundled = compare.example_images(None)
    assert all(Path(p).is_file() for p, _ in bundled)
    assert [label for _, label in bundled[:4]] == [
        f"Urban100 img_{n} (crop)" for n in ("004", "012", "061", "092")
    ]  # the paper's benchmark first, with no flag
    credits = (catalog.ASSETS / "CREDITS.md").read_text()
    assert all(Path(p).name in credits for p, _ in bundled) and "CC BY 4.0" in credits
    for path, _ in bundled:
        with Image.open(path) as im:
            assert im.format == "PNG" and max(im.size) <= 256
    urban = tmp_path / "data" / "benchmarks" / "Urban100" / "HR"
    urban.mkdir(parents=True)
    flat = np.full((260, 300, 3), 128, np.uint8)
    flat[200:210, 250:260] = 255  # the only detail: the crop moves to hold it
    Image.fromarray(flat).save(urban / f"{compare.URBAN100_MORE[0]}.png")
    found = compare.example_images(tmp_path / "data", cache=tmp_path / "crops")
    assert found[: len(bundled)] == bundled
    path, label = found[-1]
    assert label == f"Urban100 {compare.URBAN100_MORE[0]} (crop)" and Path(path).parent == tmp_path / "crops"
    crop = iss.data.read_image(path)
    assert crop.shape == (240, 240, 3) and crop.max() == 255


def test_extra_crops_go_to_a_new_private_folder_by_default(tmp_path: Path) -> None:
    """Never a fixed name in the temp folder, which another user could plant with symbolic links."""
    urban = tmp_path / "Urban100" / "HR"
    urban.mkdir(parents=True)
    Image.new("RGB", (300, 260), (1, 2, 3)).save(urban / f"{compare.URBAN100_MORE[0]}.png")
    first, second = (Path(compare.example_images(tmp_path)[-1][0]).parent for _ in range(2))
    try:
        assert first != second and (first.stat().st_mode & 0o077) == 0  # mkdtemp: new, owner-only
    finally:
        for folder in (first, second):
            shutil.rmtree(folder)


def test_backbones_are_every_zoo_and_library_backbone(tiny_zoo: str) -> None:
    archs = catalog.backbones(tiny_zoo)
    assert archs[0] == "swinir-light" and set(archs) == set(iss.archs.list_archs())


def test_a_scale_without_checkpoints_says_what_the_zoo_has(tiny_zoo: str) -> None:
    note = catalog.availability("swinir-light", 4, tiny_zoo)
    assert note == "⚠️ No pruned swinir-light x4 checkpoint yet: only bicubic runs (it has x2)."
    assert catalog.availability("swinir-light", 2, tiny_zoo) == ""
    assert catalog.availability("cat-r", 2, tiny_zoo).startswith("⚠️ No cat-r checkpoint yet")
    assert catalog.backbone_label("cat-r", tiny_zoo) == "cat-r (no checkpoints yet)"
    assert catalog.backbone_label("swinir-light", tiny_zoo) == "swinir-light"
    assert catalog.method_choices("swinir-light", 4, None, tiny_zoo) == ["bicubic"]
    comp = compare.compare(_photo(), "swinir-light", 4, None, ["bicubic", "iht"], zoo_path=tiny_zoo)
    assert list(comp.results) == ["bicubic"] and comp.message.count("x4 checkpoint") == 1  # said once
    assert "no swinir-light x4 iht checkpoint in the zoo; it has: swinir-light x2" in comp.rows[1][1]


def test_find_entry_is_driven_by_the_manifest(tiny_zoo: str, tmp_path: Path) -> None:
    assert catalog.find_entry("swinir-light", 2, 0.5, "iht", tiny_zoo).name == "tiny_x2_iht_r0.5"
    manifest = json.loads(Path(tiny_zoo).read_text())
    newer = {**manifest["entries"][0], "name": "newer_x2_iht_r0.5"}
    (tmp_path / "zoo.json").write_text(json.dumps({**manifest, "entries": [*manifest["entries"], newer]}))
    assert catalog.find_entry("swinir-light", 2, 0.5, "iht", str(tmp_path / "zoo.json")).name == newer["name"]
    with pytest.raises(FileNotFoundError, match=r"edsr-l x2 r0\.5 iht"):
        catalog.find_entry("edsr-l", 2, 0.5, "iht", tiny_zoo)
    assert catalog.all_methods(tiny_zoo) == ["bicubic", "iss-p", "iht"]


def _cell(name: str, scale: int, over_bicubic: float, iterations: int = 60_000, **more) -> dict:
    """A bundled SwinIR-light x4 entry re-labelled: ``over_bicubic`` dB over bicubic on Set5 at ``scale``."""
    entries = json.loads((ROOT / "checkpoints" / "zoo.json").read_text())["entries"]
    template = next(e for e in entries if e["arch"] == "swinir-light" and e["scale"] == 4)
    psnr = catalog.bicubic_results(scale)["Set5"]["psnr"] + over_bicubic
    budget = {**template["budget"], "iterations": iterations}
    metrics = {"Set5": {"psnr": psnr, "ssim": 0.9}}
    return {**template, "name": name, "scale": scale, "budget": budget, "metrics": metrics, **more}


def _manifest(path: Path, *entries: dict) -> str:
    path.write_text(json.dumps({"version": 1, "entries": list(entries)}))
    return str(path)


def test_the_tab_opens_at_the_strongest_cell(tmp_path: Path) -> None:
    """Cells whose every method had the full budget first, then the one comparing more methods, x4 (the
    paper's headline) among equals where it beats bicubic, then the larger gain over bicubic on Set5."""
    manifest = tmp_path / "zoo.json"

    def opens(*found: dict, arch: str = "swinir-light") -> int:
        return catalog.default_scale(arch, _manifest(manifest, *found))

    x4 = _cell("x4", 4, -0.3)
    assert opens(x4) == 4  # the only scale, though below bicubic
    assert opens(x4, _cell("x2", 2, 0.5)) == 2  # both fully trained, x4 under bicubic: the larger gain
    assert opens(_cell("x4b", 4, 0.2), _cell("x2", 2, 0.5)) == 4  # both fully trained, x4 over bicubic
    assert opens(x4, _cell("x4b", 4, 1.8), _cell("x2", 2, 0.5)) == 4
    short = _cell("x2-short", 2, 3.0, iterations=6_000, method="scratch")
    assert opens(_cell("x4b", 4, 1.8), _cell("x2", 2, 3.1), short) == 4  # x2 gains more, one method is short
    assert opens(x4, arch="edsr-l") == 4  # no entry: x4
    at_99 = _cell("x2b", 2, -1.0, ratio=0.99)
    opens(x4, _cell("x2", 2, 0.5), at_99)
    assert catalog.ratios("swinir-light", 2, str(manifest)) == [0.95, 0.99]
    assert catalog.default_ratio("swinir-light", 2, str(manifest)) == 0.95  # not the highest: the strongest
    assert catalog.default_ratio("edsr-l", 2, str(manifest)) is None
    compared = [_cell(f"x4-{m}", 4, 1.0, method=m) for m in ("iss-p", "iht", "l1")]
    lone = _cell("x4-r0.9", 4, 2.5, ratio=0.9)  # more over bicubic, but nothing to compare it with yet
    assert opens(*compared, lone, _cell("x3", 3, 2.0, method="iht"), _cell("x3b", 3, 2.2, method="l1")) == 4
    assert catalog.default_ratio("swinir-light", 4, str(manifest)) == 0.95


def test_the_bundled_zoo_opens_at_swinir_light_x4_r095() -> None:
    """The cell whose seven methods all had 60,000 iterations, where ISS-P leads on every bundled example."""
    assert catalog.default_backbone() == "swinir-light"
    assert (catalog.default_scale("swinir-light"), catalog.default_ratio("swinir-light", 4)) == (4, 0.95)
    methods = catalog.method_choices("swinir-light", 4, 0.95)
    assert methods[:3] == ["bicubic", "iss-p", "iht"] and len(methods) == 8
    measured = json.loads((ROOT / "benchmarks" / "results" / "app_examples.json").read_text())
    assert (measured["scale"], measured["ratio"]) == (4, 0.95)
    bundled = [r for r in measured["examples"] if (catalog.EXAMPLES_DIR / r["file"]).is_file()]
    assert len(bundled) == len(compare.example_images()) and all(r["rank"] == 1 for r in bundled)
    urban = [r for r in bundled if r["file"].startswith("urban100_")]
    assert max(urban, key=lambda r: r["over_best_other"])["file"] == compare.FIRST_EXAMPLE


def test_a_weak_cell_says_so_with_the_budget_and_the_papers_figure(tmp_path: Path) -> None:
    assert catalog.cell_note("swinir-light", 4, 0.95) == ""  # bundled: all 60,000 iterations, ISS-P ahead
    weak = [
        _cell("p", 4, 0.3, ratio=0.99),
        _cell("i", 4, 0.4, ratio=0.99, method="iht"),
        _cell("s", 4, -4.2, ratio=0.99, iterations=6_000, method="scratch"),
    ]
    note = catalog.cell_note("swinir-light", 4, 0.99, _manifest(tmp_path / "weak.json", *weak))
    assert note.startswith("⚠️ A weak cell") and "scratch under bicubic (28.43 dB)" in note
    assert "iht ahead (28.83 dB vs ISS-P's 28.73, within the 0.22 dB one seed moves)" in note
    assert "scratch trained 6,000 iterations" in note
    assert "the paper's ISS-P here: 29.67 dB, ours 28.73 dB after 60,000 iterations" in note
    weak[1] = _cell("i", 4, 0.6, ratio=0.99, method="iht")
    note = catalog.cell_note("swinir-light", 4, 0.99, _manifest(tmp_path / "weak.json", *weak))
    assert "iht ahead (29.03 dB vs ISS-P's 28.73);" in note
    short = [_cell("p", 2, 3.1), _cell("s", 2, 0.9, iterations=6_000, method="scratch")]
    note = catalog.cell_note("swinir-light", 2, 0.95, _manifest(tmp_path / "short.json", *short))
    assert note == (
        "⚠️ A weak cell of the zoo (Set5): scratch trained 6,000 iterations, not the zoo's 60,000; "
        "the paper's ISS-P here: 37.46 dB, ours 36.77 dB after 60,000 iterations."
    )


def test_the_first_screen_is_a_finished_comparison(tiny_zoo: str) -> None:
    comp = compare.first_comparison("swinir-light", tiny_zoo)
    assert compare.first_comparison("swinir-light", tiny_zoo) is comp  # computed once per process
    assert list(comp.results) == ["bicubic", "iht"] and comp.hr.shape == (240, 240, 3)
    assert all(isinstance(row[1], float) for row in comp.rows if row[0] in comp.results)
    assert compare.default_pair(comp) == ("bicubic", "iht") and comp.files == []


def test_the_sparse_kernels_default_is_the_same_on_every_load(monkeypatch: pytest.MonkeyPatch) -> None:
    compare.sparse_default.cache_clear()
    first = compare.sparse_default("swinir-light", "cpu")
    flipped = not first
    monkeypatch.setattr(iss.sparse.speed, "sparse_by_default", lambda arch, device: flipped)
    assert compare.sparse_default("swinir-light", "cpu") == first  # measured speeds since change nothing


def test_compare_streams_one_result_per_method(tiny_zoo: str) -> None:
    steps = list(
        compare.compare_steps(
            _photo(), "swinir-light", 2, 0.5, ["bicubic", "iht"], sparse=False, zoo_path=tiny_zoo
        )
    )
    assert [list(s.results) for s in steps] == [["bicubic"], ["bicubic", "iht"]]
    assert "1 of 2 methods done; running iht" in steps[0].message and steps[-1].files


def test_estimate_and_time_bound_crop_the_input(tiny_zoo: str, monkeypatch: pytest.MonkeyPatch) -> None:
    image = _photo(96)
    found = compare.estimate(
        image, "swinir-light", 2, 0.5, ["bicubic", "iht"], zoo_path=tiny_zoo, sparse=False
    )
    assert set(found.seconds) == {"bicubic", "iht"} and found.lr_size == (48, 48) and not found.note
    assert found.describe().startswith("**Expected: ") and "LR 48x48 to 96x96" in found.describe()
    monkeypatch.setattr(compare, "MAX_SECONDS", sum(found.seconds.values()) / 4)
    comp = _compare(["bicubic", "iht"], image=image, zoo_path=tiny_zoo)
    assert comp.lr.shape == (24, 24, 3) and comp.hr.shape == (48, 48, 3)  # the central half of each side
    assert "cropped to its central 24x24" in comp.message
    np.testing.assert_array_equal(
        comp.hr, iss.data.read_image(catalog.EXAMPLES_DIR / "pagoda.png")[24:72, 24:72]
    )


def test_the_estimate_follows_the_machines_load(tiny_zoo: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """On 2 cores where other work keeps 6 threads busy, 4x the idle estimate, and it says why."""
    args = (_photo(96), "swinir-light", 2, 0.5, ["bicubic", "iht"])
    idle = compare.estimate(*args, zoo_path=tiny_zoo, sparse=False)
    monkeypatch.setattr(iss.sparse.speed, "_system", lambda: (6.0, 2, 2))
    monkeypatch.setattr(iss.sparse.speed, "_usage", lambda: (0.0, 6.0, 0.0))
    monkeypatch.setattr(torch, "get_num_threads", lambda: 2)
    busy = compare.estimate(*args, zoo_path=tiny_zoo, sparse=False)
    assert busy.seconds == pytest.approx({name: 4 * t for name, t in idle.seconds.items()})
    assert "about 25% of the CPU" in busy.describe() and "CPU" not in idle.describe()


METHODS = ("iht", "iss-p", "l1", "scratch")


def _hub_zoo(folder: Path, names: list[str]) -> tuple[str, dict[str, bytes]]:
    """A zoo of tiny x2 checkpoints (methods in ``METHODS`` order), bundled and published at
    ``iss-sr/zoo@main``; manifest and files."""
    folder.mkdir(parents=True, exist_ok=True)
    entries, files = [], {}
    for i, name in enumerate(names):
        torch.manual_seed(i)
        method = METHODS[i]  # one entry per method: the app finds checkpoints by method
        model = iss.archs.build("swinir-light", 2, **TINY)
        masks = iss.pruning.build("iht", model, 0.5, prune_iters=0).masks
        meta = {"arch": "swinir-light", "scale": 2, "arch_kwargs": TINY, "method": method, "ratio": 0.5}
        path = iss.checkpoint.save(model, folder / f"{name}.safetensors", meta, masks)
        files[path.name] = path.read_bytes()
        entries.append({
            "name": name, "arch": "swinir-light", "scale": 2, "method": method, "ratio": 0.5,
            "file": path.name, "sha256": hashlib.sha256(files[path.name]).hexdigest(),
            "size_bytes": len(files[path.name]),
            "hub": {"repo_id": "iss-sr/zoo", "revision": "main", "filename": path.name},
        })  # fmt: skip
    (folder / "zoo.json").write_text(json.dumps({"version": 1, "entries": entries}))
    return str(folder / "zoo.json"), files


@pytest.fixture
def hub_endpoint(isolated_hub: Path, fakehub, monkeypatch: pytest.MonkeyPatch):
    """The fake Hub as huggingface_hub's default endpoint (what the app uses); fresh zoo caches."""
    monkeypatch.setattr(constants, "ENDPOINT", fakehub.url)
    monkeypatch.setattr(
        constants, "HUGGINGFACE_CO_URL_TEMPLATE", fakehub.url + "/{repo_id}/resolve/{revision}/{filename}"
    )
    catalog.resolved_zoo.cache_clear()
    catalog.load_model.cache_clear()
    yield fakehub
    catalog.resolved_zoo.cache_clear()
    catalog.load_model.cache_clear()


def test_corrupt_hub_copies_fall_back_then_a_healthy_hub_is_used(hub_endpoint, tmp_path: Path) -> None:
    """In the Compare tab: bundled copies used and the reason said; next start, the Hub."""
    zoo_path, files = _hub_zoo(tmp_path / "zoo", ["a_x2_iht_r0.5", "b_x2_iht_r0.5"])
    for name, data in files.items():
        hub_endpoint.add_file("iss-sr/zoo", name, data)
        hub_endpoint.corrupt.add(name)
    comp = _compare(["iht", "iss-p"], zoo_path=zoo_path)
    assert set(comp.results) == {"iht", "iss-p"}  # every model available
    assert comp.message.count("Hub copy refused") == 2 and "bundled copy used" in comp.message
    assert "/tmp" not in comp.message
    hub_endpoint.corrupt.clear()
    catalog.resolved_zoo.cache_clear()  # a second start
    catalog.load_model.cache_clear()
    comp = _compare(["iht"], zoo_path=zoo_path)
    assert "refused" not in comp.message
    assert catalog.resolved_zoo(zoo_path)["a_x2_iht_r0.5"].source == "hub"


def test_a_hanging_hub_costs_the_first_request_one_deadline(
    hub_endpoint, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """All entries wait for the Hub together, within HF_HUB_ETAG_TIMEOUT (here 1 s)."""
    names = [f"{c}_x2_iht_r0.5" for c in "abcd"]
    zoo_path, files = _hub_zoo(tmp_path / "zoo", names)
    for name, data in files.items():
        hub_endpoint.add_file("iss-sr/zoo", name, data)
    hub_endpoint.delay = 4.0
    monkeypatch.setattr(constants, "HF_HUB_ETAG_TIMEOUT", 1)
    start = time.perf_counter()
    found = catalog.resolved_zoo(zoo_path)  # what the first request waits for
    assert time.perf_counter() - start < 2.5  # one at a time: 4 s of waiting (40 s at the default 10 s)
    assert {f.source for f in found.values()} == {"bundled"}
    assert set(_compare(METHODS, zoo_path=zoo_path).results) == set(METHODS)
    n = len(hub_endpoint.requests)
    _compare(METHODS, zoo_path=zoo_path)
    assert len(hub_endpoint.requests) == n  # later requests do not ask the Hub at all


def test_a_malformed_checkpoint_is_one_unavailable_row(malformed_zoo: str) -> None:
    """Bicubic and the good checkpoint still run; each bad file gets its reason."""
    comp = _compare(["bicubic", "iht", "iss-p", "l1"], zoo_path=malformed_zoo)
    assert set(comp.results) == {"bicubic", "iht"}
    rows = {r[0]: r[1] for r in comp.rows}
    assert rows["iss-p"].startswith("unavailable: ") and "torch.int16" in rows["iss-p"]  # int16 mask
    assert "has no option colour" in rows["l1"]
    assert "/tmp" not in comp.message and "/tmp" not in str(comp.rows)


def test_recent_comparisons_keep_only_the_latest() -> None:
    """Sessions hold keys; the comparisons themselves are bounded by ``size``."""
    recent = compare.RecentComparisons(size=2)
    comps = [compare.Comparison(lr=np.zeros((4, 4, 3), np.uint8), hr=None) for _ in range(3)]
    for i, comp in enumerate(comps):
        assert recent.put(f"k{i}", comp) == f"k{i}"
    assert len(recent) == 2 and recent.get("k0") is None
    assert recent.get("k1") is comps[1] and recent.get("k2") is comps[2]
    recent.put("k1", comps[1])  # streamed again: the newest, so k2 goes next
    recent.put("k3", comps[0])
    assert recent.get("k2") is None and recent.get("k1") is comps[1]
    assert recent.get(None) is None and recent.get(["k1"]) is None
