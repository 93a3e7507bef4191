"""The app on 127.0.0.1, driven with gradio_client (API) and with Playwright in Debian's Chromium."""

from __future__ import annotations

import hashlib
import json
import os
import re
import socket
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import gradio
import pytest
from common import ROOT, TINY, bad_uploads, load_app
from PIL import Image

import iss
from iss.ui import analysis, catalog, compare

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
    "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-dev-shm-usage",
]  # fmt: skip

pytestmark = pytest.mark.slow  # starting the server and loading models takes a few seconds


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def zoo_path(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A zoo manifest with one tiny pruned x4 SwinIR-light checkpoint (bundled copy, no Hub entry)."""
    folder = tmp_path_factory.mktemp("zoo")
    model = iss.archs.build("swinir-light", 4, **TINY)
    pruner = iss.pruning.build("iss-p", model, 0.9, prune_iters=0)
    meta = {"arch": "swinir-light", "scale": 4, "arch_kwargs": TINY, "method": "iss-p", "ratio": 0.9}
    path = iss.checkpoint.save(model, folder / "tiny.safetensors", meta, pruner.masks)
    entry = {
        "name": "tiny_x4_iss-p_r0.9", "arch": "swinir-light", "scale": 4, "method": "iss-p", "ratio": 0.9,
        "file": path.name, "sha256": hashlib.sha256(path.read_bytes()).hexdigest(),
        "size_bytes": path.stat().st_size,
    }  # fmt: skip
    (folder / "zoo.json").write_text(json.dumps({"version": 1, "entries": [entry]}))
    return str(folder / "zoo.json")


def _launch(demo: Any, app: ModuleType) -> str:
    """Serve ``demo`` in a background thread on a free local port, with the app's limits; returns its URL."""
    _, url, _ = demo.launch(
        prevent_thread_lock=True, server_name="127.0.0.1", server_port=_free_port(), quiet=True, **app.LIMITS
    )
    return url


@pytest.fixture(scope="module")
def app_url(zoo_path: str) -> Iterator[str]:
    """``app.build_demo()`` on the tiny zoo, launched in a background thread on a free local port."""
    app = load_app()
    demo = app.build_demo(zoo_path=zoo_path)
    yield _launch(demo, app)
    demo.close()


@pytest.fixture
def client(app_url: str, tmp_path: Path):
    from gradio_client import Client

    return Client(app_url, verbose=False, download_files=str(tmp_path))


def test_api_names_and_types(client) -> None:
    """What ``view_api`` tells a client: named parameters with their types, named outputs."""
    endpoints = client.view_api(print_info=False, return_format="dict")["named_endpoints"]
    assert {"/upscale", "/train", "/recorded", "/sparsity", "/layers"} <= set(endpoints)
    upscale = endpoints["/upscale"]
    params = {p["parameter_name"]: p for p in upscale["parameters"]}
    assert list(params) == ["image", "backbone", "scale", "ratio", "methods", "mode", "sparse"]
    assert params["scale"]["python_type"]["type"] == "int"
    assert params["ratio"]["python_type"]["type"] == "float"
    train = {p["parameter_name"]: p for p in endpoints["/train"]["parameters"]}
    assert train["layers"]["python_type"]["type"] == "list[str]"
    assert train["iterations"]["type"]["type"] == "integer"
    assert train["backbone"]["parameter_default"] == "swinir-light"
    for name, endpoint in endpoints.items():
        labels = [r["label"] for r in endpoint["returns"]]
        assert not [label for label in labels if label.startswith("value_")], (name, labels)


@pytest.mark.parametrize("scale", [4, "4"], ids=["int", "text"])
def test_upscale_returns_pngs_and_a_table(client, zoo_path: str, scale) -> None:
    from gradio_client import handle_file

    methods = catalog.method_choices("swinir-light", 4, 0.9, zoo_path)  # what the UI selects by default
    assert methods == ["bicubic", "iss-p"]
    example = catalog.EXAMPLES_DIR / "pagoda.png"
    slider, region, grid, table, files, status, left, _right = client.predict(
        handle_file(str(example)), "swinir-light", scale, 0.9, methods, compare.MODE_HR, False,
        api_name="/upscale",
    )  # fmt: skip
    for path in [*slider, region]:
        with Image.open(path) as im:
            assert im.format == "PNG" and im.size == (240, 240)
    assert all(str(item["image"]).endswith(".png") for item in grid)
    assert table["headers"] == compare.TABLE_HEADERS
    rows = {row[0]: row for row in table["data"]}
    assert set(rows) == set(methods) and float(rows["bicubic"][1]) > 15
    assert float(rows["iss-p"][1]) > 0 and "%" in rows["iss-p"][3]
    assert len(files) == 2
    assert all(str(f).endswith(".png") for f in files)
    assert left["value"] == "bicubic"  # the pair dropdowns get new choices: an update
    assert "swinir-light x4" in status and "2 method(s) ran" in status


def test_sessions_keep_keys_and_the_app_keeps_a_bounded_number_of_comparisons(app_url: str) -> None:
    """New sessions beyond ``RECENT.size`` do not grow what the server keeps."""
    from gradio_client import Client, handle_file

    app = load_app()
    image = handle_file(str(catalog.EXAMPLES_DIR / "pagoda.png"))
    for _ in range(app.RECENT.size + 3):
        client = Client(app_url, verbose=False, download_files=False)
        client.predict(
            image, "swinir-light", 4, None, ["bicubic"], compare.MODE_LR, False, api_name="/upscale"
        )
    assert len(app.RECENT) == app.RECENT.size
    with pytest.raises(gradio.Error, match="no longer kept"):
        app._kept("a key that was dropped")


def test_upscale_at_a_scale_without_checkpoints_says_so(client, zoo_path: str) -> None:
    from gradio_client import handle_file

    *_, table, _files, status, _left, _right = client.predict(
        handle_file(str(catalog.EXAMPLES_DIR / "pagoda.png")), "swinir-light", 2, None, ["bicubic", "iss-p"],
        compare.MODE_HR, False, api_name="/upscale",
    )  # fmt: skip
    assert status.count("No pruned swinir-light x2 checkpoint yet: only bicubic runs (it has x4).") == 1
    assert [row[0] for row in table["data"]] == ["bicubic", "iss-p"]
    assert table["data"][1][1].startswith("unavailable: no swinir-light x2 iss-p checkpoint")


def _peak_rss_reset() -> int:
    """Reset this process's peak RSS (the server runs in it) and return the current RSS, in bytes."""
    Path("/proc/self/clear_refs").write_text("5")
    return _status_bytes("VmRSS")


def _status_bytes(field: str) -> int:
    """A memory figure of this process from /proc/self/status, in bytes."""
    line = next(x for x in Path("/proc/self/status").read_text().splitlines() if x.startswith(field + ":"))
    return int(line.split()[1]) * 1024


def test_hostile_uploads_get_one_line_each_and_the_server_stays_up(client, tmp_path: Path, capfd) -> None:
    """Every file of the corpus gets its reason and the input policy, within time and memory."""
    from gradio_client import handle_file
    from gradio_client.exceptions import AppError

    baseline = _peak_rss_reset()
    for name, (content, expected) in bad_uploads().items():
        (tmp_path / name).write_bytes(content)
        start = time.perf_counter()
        with pytest.raises(AppError) as err:
            client.predict(handle_file(str(tmp_path / name)), "swinir-light", 4, None, ["bicubic"],
                           compare.MODE_HR, False, api_name="/upscale")  # fmt: skip
        message = str(err.value)
        assert message.startswith(f"{name}: ") and expected in message, message
        assert compare.INPUT_POLICY in message and "\n" not in message and "/tmp" not in message
        assert time.perf_counter() - start < 15
    assert _status_bytes("VmHWM") - baseline < 300e6  # nothing was decoded at full size
    assert "Traceback" not in capfd.readouterr().err
    example = catalog.EXAMPLES_DIR / "pagoda.png"  # the next normal request works
    result = client.predict(handle_file(str(example)), "swinir-light", 4, None, ["bicubic"], compare.MODE_HR,
                            False, api_name="/upscale")  # fmt: skip
    assert result[5].startswith("swinir-light x4: LR 60x60 to 240x240")


def _raw_call(app_url: str, api_name: str, data: list) -> tuple[str, Any]:
    """Call a named endpoint as any HTTP client can, without gradio_client (which adds ``meta`` to file
    records): POST ``/gradio_api/call/<name>``, read its event stream; (last event, its data)."""
    import httpx

    base = app_url.rstrip("/") + f"/gradio_api/call/{api_name}"
    event_id = httpx.post(base, json={"data": data}, timeout=30).json()["event_id"]
    with httpx.stream("GET", f"{base}/{event_id}", timeout=180) as response:
        text = "".join(response.iter_text())
    event, payload = re.findall(r"^event: (\w+)\ndata: (.*)$", text, flags=re.M)[-1]
    return event, json.loads(payload)


def _raw_upload(app_url: str, path: Path) -> str:
    """Upload a file through Gradio's upload route; the server-side path it was stored at."""
    import httpx

    with path.open("rb") as f:
        response = httpx.post(app_url.rstrip("/") + "/gradio_api/upload", files={"files": f}, timeout=30)
    return response.json()[0]


@pytest.mark.parametrize("meta", [False, True], ids=["bare", "with-meta"])
def test_upscale_opens_only_uploaded_files_through_the_raw_http_api(
    app_url: str, tmp_path: Path, meta: bool
) -> None:
    """A file record naming any server path, existing or not, image or not, relative, or a
    symlink planted in the upload cache, gets one and the same answer; an uploaded file works. A record
    with ``meta`` is refused by Gradio itself (``{"error": null}``) before the app sees it; a bare one by
    the app, with its one line."""
    app = load_app()
    secret = tmp_path / "secret.png"
    Image.new("RGB", (64, 64), "red").save(secret)
    cache = Path(gradio.utils.get_upload_folder())
    planted = cache / f"planted-{os.getpid()}-{meta}.png"
    planted.symlink_to(secret)
    outside = [
        str(secret), "/etc/hostname", "/no/such/file.png", "../../../../../../etc/passwd",
        os.path.relpath(secret), str(planted), "a\x00b",
    ]  # fmt: skip
    args = ["swinir-light", 4, None, ["bicubic"], compare.MODE_HR, False]

    def call(path: str) -> tuple[str, Any]:
        record = {"path": path} | ({"meta": {"_type": "gradio.FileData"}} if meta else {})
        return _raw_call(app_url, "upscale", [record, *args])

    try:
        answers = [call(path) for path in outside]
    finally:
        planted.unlink()
    assert len(set(map(json.dumps, answers))) == 1  # nothing tells one path from another
    event, payload = answers[0]
    assert event == "error" and payload["error"] == (None if meta else app.NOT_UPLOADED)
    event, payload = call(str(cache))  # in the cache, but not a file
    assert event == "error" and payload["error"] == app.NOT_UPLOADED
    event, outputs = call(_raw_upload(app_url, secret))
    assert event == "complete" and outputs[5].startswith("swinir-light x4: LR 16x16 to 64x64")
    table = next(o for o in outputs if isinstance(o, dict) and "headers" in o)
    assert table["headers"] == compare.TABLE_HEADERS and len(table["data"][0]) == len(compare.TABLE_HEADERS)


@pytest.mark.parametrize("iterations", ["abc", 2.5])
def test_train_refuses_non_whole_iterations_through_the_raw_http_api(app_url: str, iterations) -> None:
    """Text or a fraction gets the field's one line (not Gradio's generic error, no
    rounding)."""
    args = ["swinir-light", 2, 0.95, 0.95, iterations, 400, 8, 1, [], analysis.RANDOM_INIT]
    event, payload = _raw_call(app_url, "train", args)
    assert event == "error" and payload["error"] == f"Iterations must be a whole number, got {iterations!r}"


def test_recorded_and_resumed_runs_through_the_raw_http_api(app_url: str) -> None:
    """The bundled x4 recording (thinned, 60,000 iterations) through ``/recorded``, and a live run resumed
    from its state through ``/train``, as any HTTP client calls them."""
    event, outputs = _raw_call(app_url, "recorded", ["swinir-light_x4_r0.95_cpu", []])
    assert event == "complete"
    assert "60000 iterations of each run" in outputs[3]
    assert "Each point is the mean of 10 iterations." in outputs[3]
    start = "swinir-light_x4_r0.95_cpu @ 22500"
    event, outputs = _raw_call(app_url, "train", ["swinir-light", 2, 0.95, 0.95, 1, 10, 8, 1, [], start])
    assert event == "complete" and "Now at training iteration 22,501" in outputs[-1]


def test_the_estimate_opens_only_uploaded_files(zoo_path: str, tmp_path: Path) -> None:
    """The estimate shown before a run takes the same unprocessed record: the same check, the same line."""
    app = load_app()
    cache = tmp_path / "cache"
    cache.mkdir()
    Image.new("RGB", (64, 64)).save(tmp_path / "outside.png")
    Image.new("RGB", (64, 64)).save(cache / "inside.png")
    args = ("swinir-light", 4, None, ["bicubic"], compare.MODE_HR, False)
    for path in (tmp_path / "outside.png", cache / "../outside.png", tmp_path / "missing.png"):
        text = app._estimate({"path": str(path)}, *args, zoo_path=zoo_path, cache=str(cache))
        assert text == f"⚠️ {app.NOT_UPLOADED}"
    inside = app._estimate({"path": str(cache / "inside.png")}, *args, zoo_path=zoo_path, cache=str(cache))
    assert "Expected" in inside and "LR 16x16 to 64x64" in inside


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        ({"image": None}, "upload an image or pick an example first"),
        ({"methods": None}, "methods must be a list of method names"),
        ({"methods": "bicubic"}, "methods must be a list of method names"),
        ({"methods": []}, "choose at least one method"),
        ({"scale": 5}, "scale must be one of 2, 3, 4, got 5"),
        ({"scale": None}, "scale must be one of 2, 3, 4, got None"),
        ({"mode": "x"}, "unknown input mode 'x'"),
        ({"sparse": "yes"}, "sparse must be true or false"),
        ({"backbone": "resnet"}, "backbone must be one of"),
        ({"ratio": "high"}, "ratio must be a number in [0, 1), got 'high'"),
    ],
)
def test_api_mistakes_get_one_line_and_no_server_traceback(
    client, capfd, change: dict, expected: str
) -> None:
    """A client's mistake is answered in one line, the server console stays clean."""
    from gradio_client import handle_file
    from gradio_client.exceptions import AppError

    args = {"image": handle_file(str(catalog.EXAMPLES_DIR / "pagoda.png")), "backbone": "swinir-light",
            "scale": 4, "ratio": None, "methods": ["bicubic"], "mode": compare.MODE_HR,
            "sparse": False} | change  # fmt: skip
    with pytest.raises(AppError, match=re.escape(expected)):
        client.predict(*args.values(), api_name="/upscale")
    assert "Traceback" not in capfd.readouterr().err


@pytest.mark.parametrize(
    ("name", "layer", "expected"),
    [("nope", None, "no zoo entry 'nope'; the zoo has: tiny_x4_iss-p_r0.9"), (5, None, "must be names")],
)
def test_sparsity_mistakes_get_one_line_and_no_server_traceback(client, capfd, name, layer, expected) -> None:
    from gradio_client.exceptions import AppError

    with pytest.raises(AppError, match=re.escape(expected)):
        client.predict(name, layer, api_name="/sparsity")
    assert "Traceback" not in capfd.readouterr().err
    kept, _hist, _layers = client.predict("tiny_x4_iss-p_r0.9", None, api_name="/sparsity")
    assert kept["type"] == "plotly"


def test_upscale_downloads_are_deleted_with_gradios_cache(zoo_path: str) -> None:
    """The PNGs live in Gradio's cache, so its cleaning (here at shutdown) removes them."""
    from gradio_client import Client, handle_file

    app = load_app()
    demo = app.build_demo(zoo_path=zoo_path)
    before = set(Path(tempfile.gettempdir()).glob("iss-sr-*"))
    client = Client(_launch(demo, app), verbose=False, download_files=False)
    try:
        image = handle_file(str(catalog.EXAMPLES_DIR / "pagoda.png"))
        files = client.predict(image, "swinir-light", 4, 0.9, ["bicubic", "iss-p"], compare.MODE_LR, False,
                               api_name="/upscale")[4]  # fmt: skip
        paths = [Path(f["path"]) for f in files]
        assert len(paths) == 2 and all(p.is_file() for p in paths)
        assert all(p.parent.parent == Path(gradio.utils.get_upload_folder()) for p in paths)
    finally:
        demo.close()
    assert not any(p.exists() for p in paths)
    assert set(Path(tempfile.gettempdir()).glob("iss-sr-*")) <= before  # nothing left outside the cache


def test_train_streams_then_stops_on_cancel(client) -> None:
    job = client.submit(
        "swinir-light", 2, 0.95, 0.95, 500, 400, 8, 1, [], analysis.RANDOM_INIT, api_name="/train"
    )  # 500 iterations would take minutes: only the cancel can end it within the test
    deadline = time.monotonic() + 300
    while len(job.outputs()) < 3 and time.monotonic() < deadline and not job.done():
        time.sleep(0.5)
    assert len(job.outputs()) >= 3, job.status()
    flips, _grads, _training, status = job.outputs()[-1]
    assert "iterations of both runs" in status and flips["type"] == "plotly"
    job.cancel()
    deadline = time.monotonic() + 60
    while not job.done() and time.monotonic() < deadline:
        time.sleep(0.5)
    assert job.done()
    seen = len(job.outputs())
    time.sleep(3)
    assert len(job.outputs()) == seen  # nothing streams after the cancel
    assert "500 / 500" not in job.outputs()[-1][3]


def test_train_layers_follow_the_backbone(client) -> None:
    names = client.predict("edsr-baseline", 2, api_name="/layers")
    assert names == analysis.prunable_layers("edsr-baseline", 2) and "body.0.conv1.weight" in names
    layers = ["body.0.conv1.weight", "conv_last.weight"]
    flips, *_, status = client.predict(
        "edsr-baseline", 2, 0.9, 0.95, 1, 10, 8, 1, layers, analysis.RANDOM_INIT, api_name="/train"
    )
    assert "1 / 1" in status and "edsr-baseline x2" in status
    assert "body.0.conv1: mask flips" in flips["plot"] and "conv_last: mask flips" in flips["plot"]


def test_typed_inputs_refuse_nonsense_with_a_message() -> None:
    """NaN (gradio_client cannot send it) and text where numbers go: a message, not ``{"error": null}``."""
    import gradio as gr

    app = load_app()
    count = app.WholeNumber(5, precision=0, label="Iterations")
    with pytest.raises(gr.Error, match="Iterations must be a finite whole number"):
        count.preprocess(float("nan"))
    assert count.preprocess(7.0) == 7 and count.preprocess("12") == 12
    for bad in ("abc", 2.5, "2.5", True, [3]):
        with pytest.raises(gr.Error, match="Iterations must be a whole number, got"):
            count.preprocess(bad)
    ratio = app.NumberDropdown([0.95], value=0.95, label="Pruning ratio", allow_custom_value=True)
    assert ratio.preprocess("0.9") == 0.9
    with pytest.raises(gr.Error, match="Pruning ratio must be a number"):
        ratio.preprocess("high")
    scale = app.IntRadio([2, 3, 4], value=4, label="Scale")
    assert scale.preprocess("3") == 3 and scale.api_info()["type"] == "integer"


@pytest.mark.browser
def test_browser_compare_analysis_stop_and_sparsity(app_url: str) -> None:
    """A user's session: compare (every zoom tile visible, no cell wrapped), train then Stop (plots kept,
    "stopped at iteration N", no error badge), and the Sparsity tab drawn on opening."""
    if not CHROMIUM.exists():
        if os.environ.get("CI"):
            pytest.fail(f"{CHROMIUM} is missing on CI (.ci/run installs Debian's chromium)")
        pytest.skip(f"{CHROMIUM} not installed (apt-get install chromium); never `playwright install`")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            page.goto(app_url)
            page.get_by_text("method(s) ran").first.wait_for(timeout=120_000)  # the first screen, filled
            page.locator("input[type=file]").first.set_input_files(
                str(catalog.EXAMPLES_DIR / "skyline_gray.png")  # 240x180: not the first screen's 240x240
            )
            page.get_by_text("Expected: ").first.wait_for(timeout=120_000)  # before running
            page.get_by_role("button", name="Compare", exact=True).click()
            page.get_by_text(re.compile(r"to 240x180, \d+ method\(s\) ran")).first.wait_for(timeout=120_000)
            assert page.locator("#zoom-gallery .thumbnail-item").count() == 4  # HR, LR, bicubic, iss-p
            assert page.evaluate(TILES_VISIBLE), "a zoom tile is cut off"
            assert page.evaluate(CELLS_WHOLE), "a table cell wraps or is truncated"
            assert page.get_by_text(compare.ZOOM_NOTE).is_visible()  # region PSNR vs whole-image PSNR
            page.get_by_role("tab", name="Analysis").click()
            page.wait_for_selector("#recorded-mask .js-plotly-plot .scatterlayer .trace", timeout=60_000)
            assert page.get_by_text("ISS-P moved further").first.is_visible()  # drawn before any click
            page.get_by_text("Expected on this CPU").first.wait_for(timeout=60_000)
            page.get_by_role("button", name="Train ISS-P vs IHT").click()
            page.wait_for_selector("#live-mask .js-plotly-plot .scatterlayer .trace", timeout=180_000)
            page.get_by_role("button", name="Stop").click(force=True)  # plots redraw each second
            page.get_by_text("Stopped at iteration").first.wait_for(timeout=120_000)
            assert page.locator("[id^=live-] .js-plotly-plot").count() == 3  # the live plots stay
            assert page.get_by_text("Error", exact=True).count() == 0
            page.get_by_role("tab", name="Sparsity").click()  # no button to press
            page.wait_for_selector("#sparsity-structure .js-plotly-plot .heatmaplayer", timeout=60_000)
        finally:
            browser.close()


def test_browser_opens_on_a_finished_comparison_whose_table_fits(app_url: str) -> None:
    """With no click: the example in the image box, the slider on bicubic vs the checkpoint, the zoom tiles
    and the table filled, every column of it inside its panel."""
    if not CHROMIUM.exists():
        pytest.skip(f"{CHROMIUM} not installed (apt-get install chromium); never `playwright install`")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            page.goto(app_url)
            page.get_by_text("method(s) ran").first.wait_for(timeout=120_000)
            assert page.locator("#zoom-gallery .thumbnail-item").count() == 4  # HR, LR, bicubic, iss-p
            assert page.locator("#results-table").get_by_text("iss-p", exact=True).count() >= 1
            assert page.evaluate(TABLE_FITS), "the results table is wider than its panel"
        finally:
            browser.close()


TABLE_FITS = """() => {
    const table = document.querySelector('#results-table table');
    const panel = document.querySelector('#results-table');
    return table.getBoundingClientRect().right <= panel.getBoundingClientRect().right + 1;
}"""
TILES_VISIBLE = """() => {
    const wrap = document.querySelector('#zoom-gallery .grid-wrap').getBoundingClientRect();
    return [...document.querySelectorAll('#zoom-gallery .thumbnail-item')].every(t => {
        const r = t.getBoundingClientRect();
        return r.top >= wrap.top - 1 && r.bottom <= wrap.bottom + 1;
    });
}"""
CELLS_WHOLE = """() => [...document.querySelectorAll('#results-table td .cell-wrap')].every(
    c => getComputedStyle(c).whiteSpace === 'nowrap' && c.scrollWidth <= c.clientWidth + 1
)"""


class _Server:
    """``python app.py`` in a subprocess on a free port, with ``GRADIO_TEMP_DIR`` set to ``cache``."""

    def __init__(self, cache: Path, *args: str) -> None:
        import subprocess

        port = _free_port()
        env = {**os.environ, "GRADIO_TEMP_DIR": str(cache), "GRADIO_ANALYTICS_ENABLED": "False"}
        self.url = f"http://127.0.0.1:{port}/"
        self.process = subprocess.Popen(
            [sys.executable, "app.py", "--port", str(port), *args], cwd=ROOT, env=env,
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        )  # fmt: skip

    def client(self, deadline_s: float = 300) -> Any:
        """A ``gradio_client.Client`` once the server answers (it computes the first screen, then serves)."""
        from gradio_client import Client

        deadline = time.monotonic() + deadline_s
        while True:
            try:
                return Client(self.url, verbose=False, download_files=False)
            except Exception:
                assert self.process.poll() is None and time.monotonic() < deadline, self.process.stdout.read()
                time.sleep(1)

    def stop(self) -> str:
        """SIGTERM, as a Space or container is stopped; the output, after checking it exited cleanly."""
        import signal

        self.process.send_signal(signal.SIGTERM)
        output, _ = self.process.communicate(timeout=60)
        assert self.process.returncode == 0 and "Traceback" not in output, output
        return output


def _example_records(url: str) -> list[dict]:
    """The file records a browser sends when each example of the Compare tab is clicked."""
    import httpx

    config = httpx.get(url.rstrip("/") + "/config", timeout=30).json()
    dataset = next(c for c in config["components"] if c.get("type") == "dataset")
    return [{"path": sample[0]["path"]} for sample in dataset["props"]["samples"]]


def test_a_second_copy_started_and_stopped_beside_changes_nothing_for_the_first(
    zoo_path: str, tmp_path: Path
) -> None:
    """Each app process keeps its cache in a folder of its own and removes only that one at exit: the first
    copy's examples still work after a second one, on the same cache folder, started and stopped."""
    cache = tmp_path / "cache"
    first = _Server(cache, "--zoo", zoo_path)
    try:
        first.client()
        second = _Server(cache, "--zoo", zoo_path)
        second.client()
        second.stop()
        records = _example_records(first.url)
        assert len(records) == len(compare.example_images())
        for record in records:
            args = [record, "swinir-light", 4, None, ["bicubic"], compare.MODE_HR, False]
            event, outputs = _raw_call(first.url, "upscale", args)
            assert event == "complete", (record, outputs)
    finally:
        first.stop()
    assert [p for p in cache.rglob("*") if p.is_file()] == []  # each removed its own folder


def test_a_taken_port_gets_one_line_naming_the_port_option(tmp_path: Path) -> None:
    import subprocess

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        env = {**os.environ, "GRADIO_TEMP_DIR": str(tmp_path / "cache"), "GRADIO_ANALYTICS_ENABLED": "False"}
        done = subprocess.run(
            [sys.executable, "app.py", "--port", str(port), "--zoo", str(tmp_path / "none.json")], cwd=ROOT,
            env=env, capture_output=True, text=True, timeout=300,
        )  # fmt: skip
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert f"port {port} on 127.0.0.1 is taken: start with --port N" in done.stderr
    assert [p for p in (tmp_path / "cache").rglob("*") if p.is_file()] == []


def test_sigterm_deletes_the_uploads_and_results(tmp_path: Path) -> None:
    """A stopped server (SIGTERM, as a Space or container is stopped) leaves no uploads,
    results or example copies in its cache."""
    from gradio_client import handle_file

    cache = tmp_path / "cache"
    server = _Server(cache)
    try:
        client = server.client()
        client.predict(handle_file(str(catalog.EXAMPLES_DIR / "pagoda.png")), "swinir-light", 4, None,
                       ["bicubic"], compare.MODE_HR, False, api_name="/upscale")  # fmt: skip
        assert any(p.name == "bicubic_x4.png" for p in cache.rglob("*"))
    finally:
        server.stop()
    assert [p for p in cache.rglob("*") if p.is_file()] == []
