"""The package: lazily exported names resolve, ``import iss`` stays cheap, the layout is a pipeline
(at most 8 modules directly in ``iss/``, no import cycles between modules, lazy imports included)."""

import ast
import os
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


THP_MODE = Path("/sys/kernel/mm/transparent_hugepage/enabled")
HUGE_PAGES_OF_A_64MIB_TENSOR = """
import sys
if sys.argv[1] == "iss":
    import iss
import torch

x = torch.ones(16 * 2**20)  # 64 MiB, a fresh mmap at glibc's defaults
start = x.data_ptr()
inside, huge_kib = False, 0
for line in open("/proc/self/smaps"):
    first = line.split()[0]
    if "-" in first and ":" not in first:
        low, high = (int(h, 16) for h in first.split("-"))
        inside = low <= start < high
    elif inside and first == "AnonHugePages:":
        huge_kib = int(line.split()[1])
print(huge_kib)
"""


def _huge_kib(*, import_iss: bool, env: dict[str, str]) -> int:
    """AnonHugePages of a fresh process's 64 MiB tensor."""
    argv = [sys.executable, "-c", HUGE_PAGES_OF_A_64MIB_TENSOR, "iss" if import_iss else "-"]
    out = subprocess.run(argv, check=True, capture_output=True, text=True, cwd=ROOT, env=env).stdout
    return int(out.split()[-1])


@pytest.mark.skipif(
    not THP_MODE.exists() or "[madvise]" not in THP_MODE.read_text(),
    reason="needs transparent huge pages on request (madvise), as this project's machines have",
)
def test_importing_iss_puts_large_tensors_on_huge_pages_unless_the_user_says_no() -> None:
    """glibc maps each buffer over 32 MiB afresh and faults it in 4 KiB at a time, on every layer of a large
    image (sparse EDSR-L x2 ran 1.37x slower): ``import iss`` before the first tensor asks torch for huge
    pages, and ``THP_MEM_ALLOC_ENABLE=0`` still turns them off."""
    env = {k: v for k, v in os.environ.items() if k != "THP_MEM_ALLOC_ENABLE"}
    assert _huge_kib(import_iss=False, env=env) == 0
    assert _huge_kib(import_iss=True, env=env) >= 32 * 1024
    assert _huge_kib(import_iss=True, env={**env, "THP_MEM_ALLOC_ENABLE": "0"}) == 0


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
