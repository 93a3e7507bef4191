"""iss/__init__.py: every lazily exported name resolves; unknown names fail as attributes do."""

import pytest

import iss


@pytest.mark.parametrize("name", iss.__all__)
def test_exported_names_resolve(name: str) -> None:
    assert getattr(iss, name) is not None


def test_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        iss.nope  # noqa: B018
