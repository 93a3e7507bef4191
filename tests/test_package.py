"""The package: lazily exported names resolve, ``import iss`` stays cheap, the layout is a pipeline
(at most 8 modules directly in ``iss/``, no import cycles between modules, lazy imports included)."""

import ast
import subprocess
import sys
from pathlib import Path

import pytest
from common import ROOT

import iss


@pytest.mark.parametrize("name", iss.__all__)
def test_exported_names_resolve(name: str) -> None:
    assert getattr(iss, name) is not None


def test_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        iss.nope  # noqa: B018


def test_import_stays_cheap_and_functions_are_not_shadowed_by_their_modules() -> None:
    code = (
        "import sys, iss; assert 'torch' not in sys.modules, 'import iss loaded torch'; "
        "import iss.zoo.pretrained; assert callable(iss.upscale) and callable(iss.load), iss.upscale"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path, modules: set[str]) -> set[str]:
    """The ``iss`` modules ``path`` imports anywhere (``from pkg import mod`` counts as ``mod``)."""
    name = _module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([node.module] if node.module else []))
            submodules = {f"{base}.{a.name}" for a in node.names} & modules
            found.update(submodules or {base})
    return (found & modules) - {name, "iss"}


def test_the_layout_has_few_top_level_modules_and_no_import_cycles() -> None:
    files = sorted((ROOT / "iss").rglob("*.py"))
    assert len([f for f in files if f.parent == ROOT / "iss"]) <= 8
    modules = {_module_name(f) for f in files}
    graph = {_module_name(f): _imports(f, modules) for f in files}
    state: dict[str, int] = {}  # 1: on the current path, 2: done

    def visit(node: str, path: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(graph[node]):
            assert state.get(nxt) != 1, "import cycle: " + " -> ".join([*path[path.index(nxt) :], nxt])
            if nxt not in state:
                visit(nxt, [*path, nxt])
        state[node] = 2

    for module in sorted(graph):
        if module not in state:
            visit(module, [module])
