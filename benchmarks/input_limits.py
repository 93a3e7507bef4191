"""Time and peak memory of the app for the heaviest uploads it accepts (Security and limits, README).

    python benchmarks/input_limits.py [--threads 2] [--out benchmarks/results/input_limits]

Makes each input once (``--inputs``, default a temp folder): 50-megapixel images (the pixel limit) in the
formats and modes that cost the decoder most, each at most 50 MB (the upload limit), and a 12000x12000 PNG
(refused). Starts ``python app.py``
on a free local port (bundled zoo) and sends every input through ``/upscale`` with ``gradio_client``, bicubic
only (the models' time depends on the capped size, not on the upload), in HR and LR mode. Per request: wall
time seen by the client (upload included) and the server's peak RSS above its RSS just before the request
(``VmHWM``, reset through ``/proc/<pid>/clear_refs``; Linux). Writes ``<out>.json`` and ``<out>.md``.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
from PIL import Image

from iss.ui import catalog, compare

ROOT = Path(__file__).resolve().parents[1]
WIDTH, HEIGHT = 8640, 5786  # 49,991,040 pixels: just under iss.data.MAX_PIXELS


def _smooth(channels: int, noise: int = 2, noisy: int = 3, seed: int = 0) -> np.ndarray:
    """A smooth HxWxC uint8 gradient plus uniform noise in [0, ``noise``) in its first ``noisy`` channels:
    photo-like work for the decoder, with the noise chosen per format to stay under the 50 MB upload limit."""
    y, x = np.mgrid[0:HEIGHT, 0:WIDTH].astype(np.float32)
    planes = [x / WIDTH, y / HEIGHT, (x + y) / (WIDTH + HEIGHT), 1 - x / WIDTH][:channels]
    image = (np.stack(planes, -1) * (255 - noise)).astype(np.uint8)
    shape = (HEIGHT, WIDTH, min(noisy, channels))
    image[..., :noisy] += np.random.default_rng(seed).integers(0, noise, shape, dtype=np.uint8)
    return image


INPUTS: dict[str, Callable[[Path], None]] = {
    "PNG RGB": lambda p: Image.fromarray(_smooth(3)).save(p.with_suffix(".png"), compress_level=1),
    "PNG RGBA": lambda p: Image.fromarray(_smooth(4, noisy=2)).save(p.with_suffix(".png"), compress_level=1),
    "PNG palette": lambda p: Image.fromarray(_smooth(1)[:, :, 0]).convert("P").save(p.with_suffix(".png")),
    "PNG 16-bit gray": lambda p: Image.fromarray(_smooth(1)[:, :, 0].astype(np.uint16) * 257).save(
        p.with_suffix(".png")
    ),
    "JPEG progressive 4:4:4 q95": lambda p: Image.fromarray(_smooth(3, noise=32)).save(
        p.with_suffix(".jpg"), quality=95, subsampling=0, progressive=True
    ),
    "JPEG baseline 4:4:4 q95": lambda p: Image.fromarray(_smooth(3, noise=32)).save(
        p.with_suffix(".jpg"), quality=95, subsampling=0
    ),
    "TIFF deflate RGB": lambda p: Image.fromarray(_smooth(3, noisy=2)).save(
        p.with_suffix(".tif"), compression="tiff_adobe_deflate"
    ),
    "PNG 12000x12000 one colour": lambda p: Image.new("RGB", (12000, 12000), (90, 120, 60)).save(
        p.with_suffix(".png")
    ),
}


def make_inputs(folder: Path) -> dict[str, Path]:
    """Each input of ``INPUTS`` as a file in ``folder`` (made once)."""
    folder.mkdir(parents=True, exist_ok=True)
    files = {}
    for name, make in INPUTS.items():
        stem = folder / "".join(c if c.isalnum() else "_" for c in name)
        found = list(folder.glob(stem.name + ".*"))
        if not found:
            make(stem)
            found = list(folder.glob(stem.name + ".*"))
        files[name] = found[0]
    return files


def _status_kib(pid: int, field: str) -> int:
    line = next(x for x in Path(f"/proc/{pid}/status").read_text().splitlines() if x.startswith(field + ":"))
    return int(line.split()[1])


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def measure(files: dict[str, Path], threads: int) -> list[dict]:
    """Send every file through a fresh ``python app.py`` and record time and peak memory per request."""
    from gradio_client import Client, handle_file

    port = _free_port()
    env = {**os.environ, "GRADIO_ANALYTICS_ENABLED": "False", "PYTHONPATH": str(ROOT)}
    server = subprocess.Popen(
        [sys.executable, str(ROOT / "app.py"), "--port", str(port), "--threads", str(threads)],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        client = _connect(f"http://127.0.0.1:{port}", Client)
        example = handle_file(str(catalog.EXAMPLES_DIR / "pagoda.png"))  # a warm-up request
        client.predict(example, "swinir-light", 4, None, ["bicubic"], compare.MODE_HR, False,
                       api_name="/upscale")  # fmt: skip
        inputs = {"240x240 example (reference)": catalog.EXAMPLES_DIR / "pagoda.png", **files}
        return [_request(client, server.pid, name, path, mode) for name, path in inputs.items()
                for mode in compare.MODES]  # fmt: skip
    finally:
        server.terminate()
        server.wait(30)


def _request(client: object, pid: int, name: str, path: Path, mode: str) -> dict:
    """One bicubic ``/upscale`` of ``path``: client wall time, server peak RSS above its RSS before."""
    from gradio_client import handle_file

    Path(f"/proc/{pid}/clear_refs").write_text("5")  # peak RSS := current RSS
    before = _status_kib(pid, "VmRSS")
    start = time.perf_counter()
    try:
        out = client.predict(handle_file(str(path)), "swinir-light", 4, None, ["bicubic"], mode, False,
                             api_name="/upscale")  # fmt: skip
        result = out[5].splitlines()[0]
    except Exception as e:  # a refusal is a result too: its message
        result = f"refused: {e}"
    row = {
        "input": name, "file_mb": round(path.stat().st_size / 1e6, 1), "mode": mode.split(":")[0],
        "seconds": round(time.perf_counter() - start, 2),
        "peak_mb_above_before": round((_status_kib(pid, "VmHWM") - before) / 1024), "result": result,
    }  # fmt: skip
    print(row, flush=True)
    return row


def _connect(url: str, client_type: type, timeout: float = 180) -> object:
    """A gradio_client for ``url`` once the server answers."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return client_type(url, verbose=False, download_files=False)
        except Exception:
            if time.monotonic() > deadline:
                raise
            time.sleep(1)


def write(rows: list[dict], out: Path, threads: int) -> None:
    """``out``.json and a markdown table ``out``.md."""
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps({"threads": threads, "rows": rows}, indent=2) + "\n")
    lines = [
        f"`python benchmarks/input_limits.py --threads {threads}` (bicubic only, x4; upload included)",
        "",
        "| input | file MB | mode | seconds | server peak above before (MB) | result |",
        "|---|---|---|---|---|---|",
        *(
            f"| {r['input']} | {r['file_mb']} | {r['mode']} | {r['seconds']} | {r['peak_mb_above_before']} "
            f"| {r['result']} |"
            for r in rows
        ),
    ]
    out.with_suffix(".md").write_text("\n".join(lines) + "\n")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--inputs", type=Path, default=Path(tempfile.gettempdir()) / "iss-sr-input-limits")
    p.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "input_limits")
    args = p.parse_args(argv)
    files = make_inputs(args.inputs)
    for name, path in files.items():
        print(f"{name}: {path.name}, {path.stat().st_size / 1e6:.1f} MB")
    write(measure(files, args.threads), args.out, args.threads)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
