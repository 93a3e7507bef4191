"""iss/__init__.py: every lazily exported name resolves; unknown names fail as attributes do."""

import subprocess
import sys

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
        "import iss.pretrained; assert callable(iss.upscale) and callable(iss.load), iss.upscale"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)
