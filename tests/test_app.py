"""The app on 127.0.0.1, driven with gradio_client (API) and with Playwright in Debian's Chromium."""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from common import ROOT, TINY
from PIL import Image

import iss
from iss.ui import analysis, compare

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


@pytest.fixture(scope="module")
def app_url(zoo_path: str) -> Iterator[str]:
    """``app.build_demo()`` on the tiny zoo, launched in a background thread on a free local port."""
    os.environ["GRADIO_ANALYTICS_ENABLED"] = "False"
    spec = importlib.util.spec_from_file_location("app", ROOT / "app.py")
    app = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(app)
    demo = app.build_demo(zoo_path=zoo_path)
    _, url, _ = demo.launch(
        prevent_thread_lock=True, server_name="127.0.0.1", server_port=_free_port(), quiet=True
    )
    yield url
    demo.close()


@pytest.fixture
def client(app_url: str, tmp_path: Path):
    from gradio_client import Client

    return Client(app_url, verbose=False, download_files=str(tmp_path))


def test_endpoints_are_named(client) -> None:
    endpoints = client.view_api(print_info=False, return_format="dict")["named_endpoints"]
    assert {"/upscale", "/train", "/recorded", "/sparsity"} <= set(endpoints)


def test_upscale_returns_pngs_and_a_table(client, zoo_path: str) -> None:
    from gradio_client import handle_file

    methods = compare.method_choices("swinir-light", 4, 0.9, zoo_path)  # what the UI selects by default
    assert methods == ["bicubic", "tiny_x4_iss-p_r0.9"]
    example = compare.EXAMPLES_DIR / "pagoda.png"
    slider, region, grid, table, files, _status, left, _right = client.predict(
        handle_file(str(example)), 4, methods, compare.MODE_HR, False, api_name="/upscale"
    )
    for path in [*slider, region]:
        with Image.open(path) as im:
            assert im.format == "PNG" and im.size == (240, 240)
    assert all(str(item["image"]).endswith(".png") for item in grid)
    assert table["headers"] == compare.TABLE_HEADERS
    rows = {row[0]: row for row in table["data"]}
    assert set(rows) == set(methods) and float(rows["bicubic"][1]) > 15
    assert float(rows["tiny_x4_iss-p_r0.9"][1]) > 0 and "%" in rows["tiny_x4_iss-p_r0.9"][3]
    assert len(files) == 2
    assert all(str(f).endswith(".png") for f in files)
    assert left["value"] == "bicubic"  # the pair dropdowns get new choices: an update


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


@pytest.mark.browser
def test_browser_compare_then_analysis_plot(app_url: str, tmp_path: Path) -> None:
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
            page.locator("input[type=file]").first.set_input_files(
                str(compare.EXAMPLES_DIR / "launch_towers.png")
            )
            page.get_by_role("button", name="Compare").click()
            page.wait_for_function(
                "() => [...document.querySelectorAll('img')].filter("
                "i => i.src.includes('gradio_api/file') && i.src.endsWith('.png')).length >= 3",
                timeout=120_000,
            )
            page.get_by_text("bicubic").first.wait_for(timeout=10_000)
            page.get_by_role("tab", name="Analysis").click()
            page.get_by_role("button", name="Train ISS-P vs IHT").click()
            page.wait_for_selector(".js-plotly-plot .scatterlayer .trace", timeout=180_000)
            page.get_by_role("button", name="Stop").click()
        finally:
            browser.close()
