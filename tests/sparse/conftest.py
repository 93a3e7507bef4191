"""Each sparse test measures its own dense-or-sparse choices: none remembered from another test or run."""

from pathlib import Path

import pytest

from iss.sparse import kernels


@pytest.fixture(autouse=True)
def own_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A cache folder of this test's own for the timed choices; the compiled kernels, built once per
    process, stay where they are."""
    kernels.load()
    monkeypatch.setenv("ISS_CACHE_DIR", str(tmp_path / "iss-cache"))
    return tmp_path / "iss-cache"
