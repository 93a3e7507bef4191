"""The app's limits as a hostile or careless client meets them through the raw HTTP API: bad /train values
get one line naming the field and its range (one server-log line, no traceback)."""

from __future__ import annotations

import json
import math
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from common import ROOT, load_app

from iss.ui import analysis, catalog, compare

pytestmark = pytest.mark.slow  # a server in a background thread

GOOD = ["swinir-light", 2, 0.95, 0.95, 1, 400, 8, 1, [], analysis.RANDOM_INIT]  # /train's inputs, in order
FIELDS = {2: ("Pruning ratio", "a number from 0.5 to 0.99"), 3: ("alpha (ISS-P shrink factor)", "a number "
          "from 0.5 to 0.999"), 6: ("LR patch", f"a whole number from 8 to {analysis.MAX_PATCH}"),
          7: ("Batch", f"a whole number from 1 to {analysis.MAX_BATCH}")}  # fmt: skip
BAD = ["NaN", "abc", "", None, [1], {"a": 1}, True, math.nan, 1e9, -1]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def app_url() -> Iterator[str]:
    """``app.build_demo()`` served in a background thread on a free local port, with the app's limits."""
    app = load_app()
    demo = app.build_demo()
    _, url, _ = demo.launch(
        prevent_thread_lock=True, server_name="127.0.0.1", server_port=_free_port(), quiet=True, **app.LIMITS
    )
    yield url
    demo.close()


def _raw_call(url: str, api_name: str, data: list) -> tuple[str, Any]:
    """POST ``/gradio_api/call/<name>`` as any HTTP client can, read its event stream; (last event, data)."""
    import httpx

    base = url.rstrip("/") + f"/gradio_api/call/{api_name}"
    body = json.dumps({"data": data})  # NaN as JavaScript writes it
    event_id = httpx.post(base, content=body, headers={"content-type": "application/json"}, timeout=30)
    with httpx.stream("GET", f"{base}/{event_id.json()['event_id']}", timeout=180) as response:
        text = "".join(response.iter_text())
    event, payload = re.findall(r"^event: (\w+)\ndata: (.*)$", text, flags=re.M)[-1]
    return event, json.loads(payload)


@pytest.mark.parametrize("index", sorted(FIELDS))
def test_bad_train_values_get_the_field_and_its_range(app_url: str, capfd, caplog, index: int) -> None:
    label, allowed = FIELDS[index]
    capfd.readouterr()
    caplog.clear()
    for bad in BAD:
        event, payload = _raw_call(app_url, "train", [*GOOD[:index], bad, *GOOD[index + 1 :]])
        assert event == "error"
        assert payload["error"] == f"{label} must be {allowed}, got {bad!r:.40}"
    assert "Traceback" not in capfd.readouterr().err
    refused = [r.getMessage() for r in caplog.records if r.name == "iss.app"]
    assert refused == [f"refused: {label} must be {allowed}, got {bad!r:.40}" for bad in BAD]


@pytest.mark.parametrize("bad", [None, "abc", 5, 2.5, True, [2]])
def test_a_bad_train_scale_names_the_scales(app_url: str, capfd, bad: Any) -> None:
    event, payload = _raw_call(app_url, "train", [GOOD[0], bad, *GOOD[2:]])
    assert event == "error" and payload["error"] == f"Scale must be one of 2, 3, 4, got {bad!r}"
    assert "Traceback" not in capfd.readouterr().err


def _post(url: str, api_name: str, data: list) -> str:
    """POST a call and never open its event stream (as a hostile client may); the event id."""
    import httpx

    response = httpx.post(url.rstrip("/") + f"/gradio_api/call/{api_name}", json={"data": data}, timeout=30)
    assert response.status_code == 200, response.text
    return response.json()["event_id"]


def _wait(condition: Any, seconds: float) -> float:
    """Seconds until ``condition()`` held (polling), or fail after ``seconds``."""
    began = time.monotonic()
    while not condition():
        assert time.monotonic() - began < seconds, f"not within {seconds} s"
        time.sleep(0.1)
    return time.monotonic() - began


def test_unheard_train_calls_lock_nobody_out(app_url: str) -> None:
    """Nine /train calls whose streams are never opened: none waits in the queue (one runs, the rest are
    refused at once), everyone else's /layers, /recorded and /upscale go on, and the unheard run stops
    within seconds, freeing its slot for a visitor who listens."""
    from gradio_client import Client, handle_file

    app = load_app()
    long = [*GOOD[:4], 2000, *GOOD[5:]]
    for _ in range(9):
        _post(app_url, "train", long)
    other = Client(app_url, verbose=False)
    assert other.predict("swinir-light", 2, api_name="/layers")
    assert "iterations of each run" in other.predict("swinir-light_x4_r0.95_cpu", [], api_name="/recorded")[3]
    image = handle_file(str(ROOT / "assets" / "examples" / "pagoda.png"))
    outputs = other.predict(image, "swinir-light", 2, None, ["bicubic"], compare.MODE_HR, False,
                            api_name="/upscale")  # fmt: skip
    assert outputs[3]["data"]
    print(f"unheard run stopped after {_wait(lambda: len(app.LIVE) == 0, 60):.1f} s")
    event, outputs = _raw_call(app_url, "train", [*GOOD[:4], 2, *GOOD[5:]])
    assert event == "complete" and "iteration" in outputs[-1], outputs


def _stream(url: str, api_name: str, event_id: str) -> tuple[str, Any]:
    """Read a call's event stream to its end; (last event, its data)."""
    import httpx

    with httpx.stream("GET", url.rstrip("/") + f"/gradio_api/call/{api_name}/{event_id}", timeout=180) as r:
        text = "".join(r.iter_text())
    event, payload = re.findall(r"^event: (\w+)\ndata: (.*)$", text, flags=re.M)[-1]
    return event, json.loads(payload)


def _post_from(url: str, address: str, data: list) -> str:
    """POST an /upscale call as a Space's proxy passes a visitor's request on (``X-Forwarded-For``)."""
    import httpx

    base = url.rstrip("/") + "/gradio_api/call/upscale"
    response = httpx.post(base, json={"data": data}, headers={"x-forwarded-for": f"{address}, 10.0.0.1"})
    assert response.status_code == 200, response.text
    return response.json()["event_id"]


def test_many_comparisons_from_one_visitor_hold_one_place_in_line(app_url: str, monkeypatch) -> None:
    """On a Space (visitors told apart by the proxy's X-Forwarded-For): nine /upscale calls from one visitor
    while the machine is busy. One waits its turn, eight are refused at once; another visitor's call waits
    beside it, and both complete in the order asked once the machine is free."""
    import httpx

    app = load_app()
    monkeypatch.setenv("SPACE_ID", "iss-sr/demo")
    with (ROOT / "assets" / "examples" / "pagoda.png").open("rb") as f:
        uploaded = httpx.post(app_url.rstrip("/") + "/gradio_api/upload", files={"files": f}, timeout=30)
    data = [{"path": uploaded.json()[0]}, "swinir-light", 2, None, ["bicubic"], compare.MODE_HR, False]
    with app.TURNS.join("busy", "198.51.100.7"):  # another comparison running
        mine = [_post_from(app_url, "203.0.113.1", data) for _ in range(9)]
        _wait(lambda: len(app.TURNS) == 2, 30)
        began = time.monotonic()
        refused = [_stream(app_url, "upscale", event_id) for event_id in mine[1:]]
        assert time.monotonic() - began < 10
        assert all(event == "error" for event, _ in refused), refused
        assert refused[0][1]["error"].startswith("you already have a comparison running or waiting")
        theirs = _post_from(app_url, "203.0.113.2", data)
        _wait(lambda: len(app.TURNS) == 3, 30)
    first, second = (_stream(app_url, "upscale", event_id) for event_id in (mine[0], theirs))
    assert first[0] == second[0] == "complete", (first, second)
    assert first[1][5].startswith("swinir-light x2: LR") and len(app.TURNS) == 0


def test_a_visitor_is_the_session_and_the_address_the_proxy_names_on_a_space(monkeypatch) -> None:
    from types import SimpleNamespace

    app = load_app()
    request = SimpleNamespace(
        session_hash="abc",
        client=SimpleNamespace(host="10.0.0.1"),
        headers={"x-forwarded-for": "203.0.113.1, 10.0.0.1"},
    )
    monkeypatch.delenv("SPACE_ID", raising=False)
    assert app._visitor(request) == ("abc", "10.0.0.1")  # elsewhere the header is the client's to forge
    monkeypatch.setenv("SPACE_ID", "iss-sr/demo")
    assert app._visitor(request) == ("abc", "203.0.113.1")


def test_one_live_run_per_visitor_and_cancel_ends_it(app_url: str) -> None:
    from gradio_client import Client

    app = load_app()
    job = Client(app_url, verbose=False).submit(*[*GOOD[:4], 2000, *GOOD[5:]], api_name="/train")
    _wait(lambda: len(app.LIVE) == 1, 60)
    event, payload = _raw_call(app_url, "train", GOOD)  # another session, the same address
    assert event == "error"
    assert (
        payload["error"]
        == "you already have a live run going (one per visitor): press Stop or wait for it to end"
    )
    _wait(lambda: job.status().code.name == "ITERATING", 60)
    job.cancel()
    print(f"cancelled run ended after {_wait(lambda: len(app.LIVE) == 0, 30):.1f} s")


def test_sigterm_mid_compare_and_live_run_exits_cleanly(tmp_path: Path) -> None:
    """A stopped container: SIGTERM while a comparison and a live run compute. The server exits with
    status 0, no abort and no traceback, its cache empty (bound kept generous for a loaded machine)."""
    from gradio_client import Client, handle_file

    cache, port = tmp_path / "cache", _free_port()
    env = {**os.environ, "GRADIO_TEMP_DIR": str(cache), "GRADIO_ANALYTICS_ENABLED": "False"}
    server = subprocess.Popen(
        [sys.executable, "app.py", "--port", str(port)], cwd=ROOT, env=env, stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                client = Client(f"http://127.0.0.1:{port}/", verbose=False, download_files=False)
                break
            except Exception:
                assert server.poll() is None and time.monotonic() < deadline, server.stdout.read()
                time.sleep(1)
        ratio = catalog.default_ratio("swinir-light", 4, None)
        methods = catalog.method_choices("swinir-light", 4, ratio, None)
        image = handle_file(str(ROOT / "assets" / "examples" / "pagoda.png"))
        comparing = client.submit(image, "swinir-light", 4, ratio, methods, compare.MODE_HR, False,
                                  api_name="/upscale")  # fmt: skip
        training = Client(f"http://127.0.0.1:{port}/", verbose=False).submit(
            *[*GOOD[:4], 2000, *GOOD[5:]], api_name="/train"
        )
        _wait(lambda: training.status().code.name == "ITERATING", 120)
        _wait(lambda: any(cache.rglob("*.png")), 120)
        assert not comparing.done()
    finally:
        began = time.monotonic()
        server.send_signal(signal.SIGTERM)
        try:
            output, _ = server.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
            pytest.fail("SIGTERM did not end the server within 30 s")
    print(f"exited {time.monotonic() - began:.1f} s after SIGTERM")
    assert time.monotonic() - began < 10
    assert server.returncode == 0, output[-2000:]
    assert "Traceback" not in output and "terminate called" not in output
    assert [p for p in cache.rglob("*") if p.is_file()] == []


def test_waiting_for_a_turn_shows_the_place_and_ends_on_stop() -> None:
    app, shown, stop = load_app(), [], threading.Event()
    places = iter([2, 1, 0])
    assert app._await_turn(lambda timeout: next(places), stop, lambda f, desc: shown.append(desc))
    assert shown == ["waiting: 2 comparisons ahead of yours", "waiting: 1 comparison ahead of yours"]
    stop.set()
    assert not app._await_turn(lambda timeout: 3, stop, lambda f, desc: shown.append(desc))
