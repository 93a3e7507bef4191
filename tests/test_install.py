"""The library stands alone: it imports without the app's packages, and a built wheel works outside the
repository (package data only, no checkout)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from common import ROOT

# Runs in a fresh interpreter: gradio and plotly refuse to import, then every non-UI module is imported.
WITHOUT_APP = textwrap.dedent(
    """
    import importlib, pathlib, sys

    class RefuseAppPackages:
        def find_spec(self, name, path=None, target=None):
            if name.partition(".")[0] in ("gradio", "plotly"):
                raise ModuleNotFoundError(f"No module named {name!r} (refused by the test)")
            return None

    sys.meta_path.insert(0, RefuseAppPackages())
    import iss

    package = pathlib.Path(iss.__file__).parent
    names = []
    for path in sorted(package.rglob("*.py")):
        parts = path.relative_to(package.parent).with_suffix("").parts
        if parts[1] in ("ui", "__main__"):
            continue
        names.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    for name in names:
        importlib.import_module(name)
    try:
        importlib.import_module("iss.ui.figures")
    except ModuleNotFoundError:
        print(len(names), "modules")
    """
)


def test_every_non_ui_module_imports_without_gradio_and_plotly() -> None:
    done = subprocess.run(
        [sys.executable, "-c", WITHOUT_APP], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert int(done.stdout.split()[0]) > 40  # and the refusal works: iss.ui.figures did not import


def test_gradio_and_plotly_are_the_app_extra_and_the_space_installs_both() -> None:
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    core, extras = project["dependencies"], project["optional-dependencies"]
    assert not [d for d in core if d.startswith(("gradio", "plotly"))]
    assert sorted(extras["app"]) == ["gradio>=5.27,<7", "plotly>=5.20"]
    assert "iss-sr[app]" in extras["dev"]
    lines = (ROOT / "requirements.txt").read_text().splitlines()
    assert [line for line in lines if line and not line.startswith("#")] == core + extras["app"]


# Runs in the wheel's venv, in a folder outside the repository.
IN_VENV = textwrap.dedent(
    """
    import sys
    import numpy as np
    import iss

    checkpoint, venv = sys.argv[1:]
    assert iss.__file__.startswith(venv), iss.__file__
    model = iss.load(checkpoint)
    sr = iss.upscale(model, np.full((12, 10, 3), 128, np.uint8))
    assert sr.size == (20, 24), sr.size
    print("upscaled", sr.size)
    """
)


@pytest.mark.slow
def test_a_built_wheel_loads_upscales_and_evaluates_outside_the_repository(
    tmp_path: Path, tiny_zoo: str, data_root: Path
) -> None:
    source, elsewhere = tmp_path / "source", tmp_path / "elsewhere"
    for name in ("pyproject.toml", "README.md"):
        (source / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / name, source / name)
    shutil.copytree(ROOT / "iss", source / "iss", ignore=shutil.ignore_patterns("__pycache__", "*.so"))
    elsewhere.mkdir()

    def run(*command: str | Path) -> str:
        done = subprocess.run(
            [str(c) for c in command], cwd=elsewhere, capture_output=True, text=True, timeout=600,
            env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "ISS_CACHE_DIR": str(tmp_path / "cache")},
        )  # fmt: skip
        assert done.returncode == 0, f"{command}\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
        return done.stdout

    run(sys.executable, "-m", "pip", "wheel", source, "--no-deps", "--no-build-isolation",
        "-w", tmp_path / "w")  # fmt: skip
    (wheel,) = (tmp_path / "w").glob("iss_sr-*.whl")
    venv = tmp_path / "venv"
    run(sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", venv)
    python = venv / "bin" / "python"
    run(python, "-m", "pip", "install", "--no-deps", "--ignore-installed", "--no-index", wheel)
    tiny = Path(tiny_zoo).parent / "tiny_x2_iht.safetensors"
    assert "upscaled" in run(python, "-c", IN_VENV, tiny, venv)
    scores = tmp_path / "bicubic.json"
    run(python, "-m", "iss", "eval", "--model", "bicubic", "--scale", "4", "--datasets", "Set5",
        "--data-dir", data_root / "benchmarks", "--device", "cpu", "--json", scores)  # fmt: skip
    shipped = json.loads((ROOT / "iss" / "data" / "bicubic_x4.json").read_text())["Set5"]
    assert json.loads(scores.read_text())["Set5"] == pytest.approx(shipped)
