"""benchmarks/device_tree.sh: a GPU round's device call leaves the bundled checkpoints and recordings behind,
and the checkout gets its index and ignore rules back afterwards."""

from __future__ import annotations

import subprocess
from pathlib import Path

from common import ROOT

SCRIPT = ROOT / "benchmarks" / "device_tree.sh"


def _git(repo: Path, *args: str) -> str:
    command = ["git", "-c", "user.name=t", "-c", "user.email=t@t", *args]
    return subprocess.run(command, cwd=repo, capture_output=True, text=True, check=True).stdout


def _script(repo: Path, verb: str) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(SCRIPT), verb], cwd=repo, capture_output=True, text=True)


def test_slim_leaves_checkpoints_and_recordings_behind_and_restore_puts_all_back(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    files = {
        "iss/train.py": 1000,
        "checkpoints/zoo.json": 100,
        "checkpoints/edsr-l_x2_iss-p_r0.95.safetensors": 3 * 2**20,
        "assets/recordings/x4/series.npz": 2 * 2**20,
        "assets/app.png": 1000,
    }
    for name, size in files.items():
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / name).write_bytes(b"x" * size)
    _git(repo, "init", "-q")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", "tree")
    exclude = repo / ".git" / "info" / "exclude"
    exclude.write_text("/runs/\n")

    assert _script(repo, "size").stdout.startswith("5.0 MiB would travel")
    slim = _script(repo, "slim")
    assert slim.returncode == 0, slim.stderr
    assert slim.stdout.startswith("0.0 MiB would travel")
    travelling = ["assets/app.png", "checkpoints/zoo.json", "iss/train.py"]
    assert sorted(_git(repo, "ls-files").split()) == travelling
    assert _git(repo, "ls-files", "--others", "--exclude-standard") == ""  # left on disk, ignored
    assert all((repo / name).is_file() for name in files)
    _script(repo, "slim")  # twice: one block of rules
    assert exclude.read_text().count("/assets/recordings/") == 1

    restore = _script(repo, "restore")
    assert restore.returncode == 0, restore.stderr
    assert sorted(_git(repo, "ls-files").split()) == sorted(files)
    assert _git(repo, "status", "--porcelain") == ""
    assert exclude.read_text() == "/runs/\n"
    assert _script(repo, "nonsense").returncode == 2
