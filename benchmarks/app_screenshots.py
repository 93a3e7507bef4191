"""Screenshots of every tab of a running app, taken in headless Debian Chromium (Playwright, no downloads).

Compare as it opens (the finished first comparison, no click) and for a backbone without checkpoints, Analysis
before and after a short live run stopped with Stop, the recorded runs, and Sparsity as it opens. Start the
app first (``python app.py --port 7860``)::

    python benchmarks/app_screenshots.py --url http://127.0.0.1:7860 --out /tmp/screens [--tabs compare]
"""

from __future__ import annotations

import argparse
import re
import time
from pathlib import Path

from playwright.sync_api import Page, sync_playwright

CHROMIUM = "/usr/bin/chromium"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run"]


def shoot(page: Page, out: Path, name: str) -> None:
    """Save a full-page PNG as ``out/name.png`` and say where."""
    path = out / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    print(path)


def compare_tab(page: Page, out: Path, timeout_ms: int) -> None:
    """Wait for the comparison the tab opens on (no click), shoot; then pick the first backbone the zoo has
    no checkpoint of (the dropdown marks it), if one is left."""
    page.get_by_text("method(s) ran").first.wait_for(timeout=timeout_ms)
    time.sleep(3)
    shoot(page, out, "compare")
    page.get_by_label("Backbone").click()
    empty = page.get_by_role("option", name=re.compile("no checkpoints yet"))
    if not empty.count():
        print("every backbone has checkpoints: no compare_no_checkpoint shot")
        return
    empty.first.click()
    page.get_by_text("checkpoint yet").first.wait_for(timeout=timeout_ms)
    time.sleep(2)
    shoot(page, out, "compare_no_checkpoint")


def analysis_tab(page: Page, out: Path, seconds: float, timeout_ms: int) -> None:
    """The Analysis tab as it opens (a recorded run drawn whole), then after a live run stopped after
    ``seconds``."""
    page.get_by_role("tab", name="Analysis").click()
    page.wait_for_selector("#recorded-mask .js-plotly-plot .scatterlayer .trace", timeout=timeout_ms)
    time.sleep(3)
    shoot(page, out, "analysis_recorded")
    page.get_by_role("button", name="Train ISS-P vs IHT").click()
    page.wait_for_selector("#live-mask .js-plotly-plot .scatterlayer .trace", timeout=timeout_ms)
    time.sleep(seconds)
    page.get_by_role("button", name="Stop").click(force=True)  # the page redraws plots each second
    page.get_by_text("stopped at iteration").first.wait_for(timeout=timeout_ms)
    time.sleep(2)
    shoot(page, out, "analysis_stopped")


def sparsity_tab(page: Page, out: Path) -> None:
    """The Sparsity tab as it opens (its plots are drawn without pressing anything)."""
    page.get_by_role("tab", name="Sparsity").click()
    page.wait_for_selector("#sparsity-structure .js-plotly-plot", timeout=60_000)
    time.sleep(3)
    shoot(page, out, "sparsity")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--url", default="http://127.0.0.1:7860")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--live-seconds", type=float, default=20.0, help="how long the live run goes before Stop")
    p.add_argument("--timeout", type=float, default=300.0, help="seconds to wait for each result")
    p.add_argument("--tabs", default="compare,analysis,sparsity", help="which tabs to shoot, comma-separated")
    args = p.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    timeout_ms = int(args.timeout * 1000)
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            page.goto(args.url)
            tabs = args.tabs.split(",")
            if "compare" in tabs:
                compare_tab(page, args.out, timeout_ms)
            if "analysis" in tabs:
                analysis_tab(page, args.out, args.live_seconds, timeout_ms)
            if "sparsity" in tabs:
                sparsity_tab(page, args.out)
        finally:
            browser.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
