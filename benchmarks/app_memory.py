"""The app server's memory (RSS) as visitors come and go: N ``/upscale`` requests, each from a new
``gradio_client.Client`` (a new session), then idle; then one heavy live training run, then idle.

The server runs in its own process (``python app.py``, Gradio's cache in a temporary folder), so what is
measured is what a Space holds. RSS is read from ``/proc/<pid>/status`` after each request.

    python benchmarks/app_memory.py --sessions 40 --json benchmarks/results/app_memory.json
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from iss.train.loop import cpu_signature  # noqa: E402
from iss.ui import analysis, catalog, compare  # noqa: E402


def rss_mb(pid: int) -> float:
    """Resident memory of process ``pid`` in MB."""
    status = Path(f"/proc/{pid}/status").read_text().splitlines()
    return int(next(line for line in status if line.startswith("VmRSS:")).split()[1]) / 1024


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(cache: Path, threads: int) -> tuple[subprocess.Popen, str]:
    """``python app.py`` on a free port with Gradio's cache in ``cache``; (process, URL) once it answers."""
    from gradio_client import Client

    port = _free_port()
    env = {**os.environ, "GRADIO_TEMP_DIR": str(cache), "GRADIO_ANALYTICS_ENABLED": "False"}
    server = subprocess.Popen(
        [sys.executable, "app.py", "--port", str(port), "--threads", str(threads)],
        cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}/"
    for _ in range(240):
        try:
            Client(url, verbose=False, download_files=False)
            return server, url
        except Exception:
            time.sleep(0.5)
    server.kill()
    raise RuntimeError("the app did not start within 2 minutes")


def upscale_sessions(url: str, pid: int, sessions: int, image: Path) -> list[float]:
    """RSS after each of ``sessions`` /upscale requests (every zoo method of the example's default cell),
    each from a new client."""
    from gradio_client import Client, handle_file

    arch, scale = "swinir-light", 4
    ratio = catalog.ratios(arch, scale)[0]
    methods = catalog.method_choices(arch, scale, ratio)
    series = []
    for _ in range(sessions):
        client = Client(url, verbose=False, download_files=False)
        client.predict(handle_file(str(image)), arch, scale, ratio, methods, compare.MODE_HR, False,
                       api_name="/upscale")  # fmt: skip
        series.append(round(rss_mb(pid), 1))
    return series


def heavy_training(url: str, pid: int, iterations: int) -> dict:
    """A live run of the heaviest backbone at the largest batch and patch (the app shrinks them to its
    memory bound): the server's peak RSS during it and RSS right after."""
    from gradio_client import Client

    client = Client(url, verbose=False, download_files=False)
    size = (analysis.MAX_PATCH, analysis.MAX_BATCH)
    job = client.submit("cat-r", 4, 0.95, 0.95, iterations, iterations, *size, [], analysis.RANDOM_INIT,
                        api_name="/train")  # fmt: skip
    peak = 0.0
    while not job.done():
        peak = max(peak, rss_mb(pid))
        time.sleep(0.2)
    status = job.outputs()[-1][3] if job.outputs() else str(job.exception())
    return {"peak_mb": round(peak, 1), "after_mb": round(rss_mb(pid), 1), "status": status.splitlines()[0]}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sessions", type=int, default=40)
    p.add_argument("--idle", type=float, default=60.0, help="seconds idle before the after-idle reading")
    p.add_argument("--iterations", type=int, default=3, help="live-run iterations")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--image", default=str(catalog.EXAMPLES_DIR / "launch_towers.png"))
    p.add_argument("--json", default=None)
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory() as cache:
        server, url = start_server(Path(cache), args.threads)
        try:
            started = round(rss_mb(server.pid), 1)
            series = upscale_sessions(url, server.pid, args.sessions, Path(args.image))
            time.sleep(args.idle)
            idle = round(rss_mb(server.pid), 1)
            training = heavy_training(url, server.pid, args.iterations)
            time.sleep(args.idle)
            training["after_idle_mb"] = round(rss_mb(server.pid), 1)
        finally:
            server.send_signal(signal.SIGTERM)
            server.wait(timeout=60)
    result = {
        "cpu": cpu_signature(),
        "sessions": args.sessions,
        "image": Path(args.image).name,
        "rss_started_mb": started,
        "rss_after_first_mb": series[0],
        "rss_after_each_mb": series,
        "rss_after_idle_mb": idle,
        "growth_after_first_mb": round(series[-1] - series[0], 1),
        "training": training,
    }
    print(json.dumps({k: v for k, v in result.items() if k != "rss_after_each_mb"}, indent=1))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
