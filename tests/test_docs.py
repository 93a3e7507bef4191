"""Every fenced ``python`` and ``bash`` block of README.md and docs/*.md runs as written.

Each block runs in its own temporary folder that stands for the repository root: the root's entries are
symbolic links there (snippets read ``checkpoints/``, ``benchmarks/``, ``assets/``, ``app.py``), what a
snippet writes stays in the temporary folder, ``../shared/data`` beside it is the data, and ``photo.jpg`` /
``photo.png`` (a 96x96 crop of a bundled example) stand for the reader's own photo. Python blocks run with
this interpreter, bash blocks with ``bash -e -o pipefail -c``, both with this checkout first on PYTHONPATH.
Blocks that use the app read ``$ISS_APP_URL``: one ``python app.py`` started for the module on a free port.
The Hub is off (``HF_HUB_OFFLINE=1``): zoo models resolve to the bundled, sha256-checked copies.

A block that cannot run in a test is marked by an HTML comment on the line before it,
``<!-- not run: <reason> -->``; every other block runs, and ``test_every_block_is_run_or_marked`` checks
that the fences found are exactly the blocks run plus the few marked ones.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

import pytest
from common import ROOT
from PIL import Image

pytestmark = pytest.mark.slow  # subprocesses, the app, small trainings: about two minutes in all

DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LANGUAGES = ("python", "bash")
MAX_MARKED = 10  # blocks that cannot run in a test: set-up lines, GPU machines, hours of training
FENCE = re.compile(r"^(?P<indent> *)```(?P<info>.*)$")
MARK = re.compile(r"^\s*<!-- not run: (?P<reason>.*\S)\s*-->\s*$")
LINK = re.compile(r"\]\((?P<target>[^)\s#]*)(?:#(?P<anchor>[^)\s]*))?\)")
BLOCK_TIMEOUT = 300  # seconds: a block taking that long does not belong in the docs unmarked


class Block(NamedTuple):
    path: Path
    line: int  # 1-based line of the opening fence
    language: str
    code: str
    reason: str | None  # why it is not run, from the comment before it; None: it runs

    @property
    def name(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"


def blocks(path: Path) -> list[Block]:
    """The fenced blocks of one Markdown file, dedented, with the not-run reason of each (or None)."""
    lines = path.read_text().splitlines()
    found, i = [], 0
    while i < len(lines):
        opening = FENCE.match(lines[i])
        if not opening:
            i += 1
            continue
        indent, info = opening["indent"], opening["info"].strip()
        end = next((j for j in range(i + 1, len(lines)) if lines[j].rstrip() == f"{indent}```"), None)
        assert end is not None, f"{path.name}:{i + 1}: fence never closed"
        code = "\n".join(line[len(indent) :] for line in lines[i + 1 : end]) + "\n"
        before = next((lines[j] for j in range(i - 1, -1, -1) if lines[j].strip()), "")
        mark = MARK.match(before)
        found.append(Block(path, i + 1, info.split()[0] if info else "", code, mark and mark["reason"]))
        i = end + 1
    return found


ALL = [block for path in DOCS for block in blocks(path)]
RUN = [block for block in ALL if block.reason is None]


def test_every_block_is_run_or_marked() -> None:
    """The fences found are the blocks run plus the marked ones; each is python or bash; few are marked."""
    fences = sum(1 for path in DOCS for line in path.read_text().splitlines() if FENCE.match(line))
    assert fences == 2 * len(ALL), "a fence the block parser missed"
    assert len(DOCS) > 5 and len(RUN) > 15
    assert [b.name for b in ALL if b.language not in LANGUAGES] == []
    marked = [f"{b.name}: {b.reason}" for b in ALL if b.reason is not None]
    assert len(marked) <= MAX_MARKED, "\n".join(marked)
    orphans = [
        f"{path.name}:{n}" for path in DOCS for n, line in enumerate(path.read_text().splitlines(), 1)
        if MARK.match(line) and not any(b.path == path and b.reason and b.line > n for b in ALL)
    ]  # fmt: skip
    assert orphans == [], "a not-run comment before no block"


def _anchors(path: Path) -> set[str]:
    """GitHub's anchors for the headings of a Markdown file (lower case, punctuation dropped, spaces to -)."""
    headings = re.findall(r"^#+ (.+)$", path.read_text(), re.M)
    return {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-") for h in headings}


def test_relative_links_resolve() -> None:
    """Every relative link of README.md and docs/*.md names a file of the repository, and its #anchor a
    heading there."""
    broken = []
    for path in DOCS:
        for m in LINK.finditer(path.read_text()):
            if "://" in m["target"]:
                continue
            target = path.parent / m["target"] if m["target"] else path
            if not target.exists():
                broken.append(f"{path.relative_to(ROOT)}: {m['target']}")
            elif m["anchor"] and (target.suffix != ".md" or m["anchor"] not in _anchors(target)):
                broken.append(f"{path.relative_to(ROOT)}: {m['target']}#{m['anchor']}")
    assert broken == []


def test_readme_is_short_and_keeps_the_test_command() -> None:
    """The README stays under 300 lines, with the exact command CI runs."""
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 300
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    command = ci[ci.index("# The README's test command, verbatim:") + 1]
    assert f"```bash\n{command}\n```" in readme


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _environment(**extra: str) -> dict[str, str]:
    env = dict(os.environ, HF_HUB_OFFLINE="1", GRADIO_ANALYTICS_ENABLED="False", PYTHONUNBUFFERED="1")
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])
    env.update(extra)
    return env


@pytest.fixture(scope="module")
def app_url(data_root: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """``python app.py --data-dir ... --port N`` in its own process, as the README runs it."""
    port, log = _free_port(), tmp_path_factory.mktemp("app") / "app.log"
    with open(log, "w") as out:
        server = subprocess.Popen(
            [sys.executable, "app.py", "--data-dir", str(data_root), "--port", str(port)],
            cwd=ROOT, env=_environment(), stdout=out, stderr=subprocess.STDOUT,
        )  # fmt: skip
    url, deadline = f"http://127.0.0.1:{port}", time.monotonic() + 180
    try:
        while True:
            assert server.poll() is None, f"the app exited:\n{log.read_text()[-3000:]}"
            assert time.monotonic() < deadline, f"the app did not answer:\n{log.read_text()[-3000:]}"
            try:
                with urllib.request.urlopen(url, timeout=5):
                    break
            except OSError:
                time.sleep(1)
        yield url
    finally:
        server.terminate()
        try:
            server.wait(30)
        except subprocess.TimeoutExpired:
            server.kill()


def _folder(tmp_path: Path, data_root: Path) -> Path:
    """A stand-in for the repository root inside ``tmp_path``, with ``../shared/data`` and a photo."""
    (tmp_path / "shared").mkdir()
    (tmp_path / "shared" / "data").symlink_to(data_root.resolve(), target_is_directory=True)
    work = tmp_path / "repo"
    work.mkdir()
    for entry in ROOT.iterdir():
        if not entry.name.startswith(".") and entry.name not in ("runs", "__pycache__"):
            (work / entry.name).symlink_to(entry, target_is_directory=entry.is_dir())
    with Image.open(ROOT / "assets" / "examples" / "launch_towers.png") as im:
        photo = im.convert("RGB").crop((72, 40, 168, 136))
    photo.save(work / "photo.png")
    photo.save(work / "photo.jpg", quality=95)
    return work


@pytest.mark.parametrize("block", RUN, ids=[b.name for b in RUN])
def test_block_runs(block: Block, request: pytest.FixtureRequest, tmp_path: Path, data_root: Path) -> None:
    work = _folder(tmp_path, data_root)
    extra = {"ISS_APP_URL": request.getfixturevalue("app_url")} if "ISS_APP_URL" in block.code else {}
    if block.language == "python":
        (tmp_path / "block.py").write_text(block.code)
        command = [sys.executable, str(tmp_path / "block.py")]
    else:
        command = [shutil.which("bash") or "bash", "-e", "-o", "pipefail", "-c", block.code]
    result = subprocess.run(
        command, cwd=work, env=_environment(**extra), capture_output=True, text=True, timeout=BLOCK_TIMEOUT
    )
    assert result.returncode == 0, (
        f"{block.name} exited {result.returncode}\n--- code\n{block.code}--- stdout\n{result.stdout[-3000:]}"
        f"--- stderr\n{result.stderr[-5000:]}"
    )
