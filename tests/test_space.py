"""``python -m iss space export``: the Space folder holds no checkpoint, routes binaries through LFS, and its
``app.py`` runs a Compare from the files it downloads from the (fake) Hub the zoo was published to."""

from __future__ import annotations

import json
import os
import random
import re
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from common import ROOT
from fakehub import FakeHub
from huggingface_hub import SpaceCard

from iss import cli, zoo
from iss.ui import compare

pytestmark = pytest.mark.usefixtures("isolated_hub")

MODEL = "swinir-light_x4_iss-p_r0.95"
REPO = "iss-sr/zoo"


def _published_zoo(folder: Path, hub: FakeHub) -> Path:
    """A manifest of one real zoo model, pushed to ``hub`` with ``zoo push`` (which pins it)."""
    raw = json.loads(zoo.DEFAULT_ZOO.read_text())
    raw["entries"] = [e for e in raw["entries"] if e["name"] == MODEL]
    folder.mkdir()
    shutil.copyfile(ROOT / "checkpoints" / raw["entries"][0]["file"], folder / raw["entries"][0]["file"])
    (folder / "zoo.json").write_text(json.dumps(raw))
    push = ["zoo", "push", "--repo", REPO, "--manifest", str(folder / "zoo.json"), "--token", "hf_fake"]
    assert cli.main([*push, "--endpoint", hub.url]) == 0
    return folder / "zoo.json"


def test_the_exported_folder_is_what_a_space_repository_holds(tmp_path: Path, fakehub: FakeHub) -> None:
    manifest = _published_zoo(tmp_path / "zoo", fakehub)
    space = tmp_path / "space"
    assert cli.main(["space", "export", str(space), "--manifest", str(manifest)]) == 0
    files = {p.relative_to(space).as_posix() for p in space.rglob("*") if p.is_file()}
    expected = {"app.py", "iss/__init__.py", "requirements.txt", "packages.txt", "README.md"}
    assert expected | {".gitattributes"} <= files
    assert "checkpoints/zoo.json" in files and not [f for f in files if f.startswith("checkpoints/") and
                                                     f.endswith(".safetensors")]  # fmt: skip
    assert "gcc" in (space / "packages.txt").read_text().split()
    card = SpaceCard.load(space / "README.md")
    commit = fakehub.repos[("model", REPO)].refs["main"]
    assert card.data.sdk == "gradio" and card.data.app_file == "app.py"
    assert card.data.preload_from_hub == [f"{REPO} {MODEL}.safetensors {commit}"]
    attributes = (space / ".gitattributes").read_text().splitlines()
    binaries = [p for p in files if not _is_text(space / p)]
    assert binaries and all(_lfs_routed(p, attributes) for p in binaries), binaries
    assert _lfs_routed("assets/recordings/x/run.json", attributes)  # recordings are never plain git objects


def _is_text(path: Path) -> bool:
    try:
        path.read_text()
    except UnicodeDecodeError:
        return False
    return True


def _lfs_routed(path: str, attributes: list[str]) -> bool:
    """Whether a ``.gitattributes`` line routes ``path`` through LFS (git's wildmatch for these patterns)."""
    from fnmatch import fnmatch

    lfs = [line.split()[0] for line in attributes if "filter=lfs" in line]
    return any(fnmatch(path, p) if "/" in p else fnmatch(Path(path).name, p) for p in lfs)


@pytest.mark.slow
def test_the_exported_app_runs_a_compare_from_the_hub(tmp_path: Path, fakehub: FakeHub) -> None:
    from gradio_client import Client, handle_file

    manifest = _published_zoo(tmp_path / "zoo", fakehub)
    space = tmp_path / "space"
    assert cli.main(["space", "export", str(space), "--manifest", str(manifest)]) == 0
    port = _free_port()
    env = {**os.environ, "HF_ENDPOINT": fakehub.url, "HF_HUB_DISABLE_XET": "1", "GRADIO_ANALYTICS_ENABLED":
           "False", "PYTHONPATH": "", "GRADIO_TEMP_DIR": str(tmp_path / "gradio")}  # fmt: skip
    log = (tmp_path / "app.log").open("w")
    command = [sys.executable, "app.py", "--port", str(port)]
    app = subprocess.Popen(command, cwd=space, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        url = _wait_for(app, port, tmp_path / "app.log")
        client = Client(url, verbose=False, download_files=str(tmp_path / "dl"))
        example = space / "assets" / "examples" / "pagoda.png"
        *_, table, _files, status, _left, _right = client.predict(
            handle_file(str(example)), "swinir-light", 4, 0.95, ["bicubic", "iss-p"], compare.MODE_HR, False,
            api_name="/upscale",
        )  # fmt: skip
    finally:
        app.terminate()
        app.wait(timeout=30)
        log.close()
    rows = {row[0]: row for row in table["data"]}
    assert float(rows["iss-p"][1]) > float(rows["bicubic"][1]) > 15, (status, rows)
    assert ("GET", f"/{REPO}/resolve/{fakehub.repos[('model', REPO)].refs['main']}/{MODEL}.safetensors") in [
        (method, path.split("?")[0]) for method, path in fakehub.requests
    ]
    assert "using the bundled" not in (tmp_path / "app.log").read_text()


def _free_port() -> int:
    """A port in 20000-60000 that nothing listens on now."""
    while True:
        port = random.randint(20000, 60000)
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)):
                return port


def _wait_for(app: subprocess.Popen, port: int, log: Path, timeout: float = 180) -> str:
    """The app's URL once it answers; fails with its log if it exits or does not start in ``timeout``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert app.poll() is None, log.read_text()
        with socket.socket() as s:
            if not s.connect_ex(("127.0.0.1", port)):
                return f"http://127.0.0.1:{port}/"
        time.sleep(0.5)
    pytest.fail(f"the Space app did not start in {timeout} s:\n{log.read_text()}")


def test_the_spaces_paths_never_call_torch_compile() -> None:
    """ZeroGPU Spaces do not support ``torch.compile``: the app, Compare (inference, the zoo, the sparse
    kernels) and the live run (its TrainConfig keeps ``compile=False``) run eager PyTorch only."""
    sources = [ROOT / "app.py", ROOT / "iss" / "infer.py", *(ROOT / "iss" / "ui").rglob("*.py"),
               *(ROOT / "iss" / "zoo").rglob("*.py"), *(ROOT / "iss" / "sparse").rglob("*.py")]  # fmt: skip
    assert [p.name for p in sources if "compile(" in p.read_text().replace("re.compile(", "")] == []
    assert [p.name for p in sources if re.search(r"\bcompile\s*=\s*True", p.read_text())] == []
