"""Docs, code comments, docstrings and plans say what is true now: no issue numbers, no story of past runs.

How the project got here belongs in ``CHANGELOG.md`` and git history, not in the files a maintainer reads.
"""

from __future__ import annotations

import re
from pathlib import Path

from common import ROOT

HISTORY = re.compile(
    r"\bissues? #?\d+"  # the tracker is not part of the repository
    r"|\b(?:first|second|third|fourth|fifth|earlier|later|next|last) (?:round|lease)s?\b"
    r"|\b(?:first|second|third|fourth|fifth|sixth|seventh|eighth|ninth|tenth|eleventh|twelfth|thirteenth"
    r"|fourteenth|fifteenth|sixteenth|seventeenth|eighteenth|earlier|previous|this) sessions?\b"
    r"|\bsession work\b",
    re.IGNORECASE,
)
SUFFIXES = {".md", ".py", ".sh", ".json", ".toml", ".txt", ".c", ".h"}
SKIP = {"CHANGELOG.md", "checkpoints/zoo.json", "tests/test_present_tense.py"}
SKIP_DIRS = ("assets/recordings/", "benchmarks/results/")


def files() -> list[Path]:
    """The repository's own text files, less the changelog, the manifest's records and measured results."""
    found = []
    for path in sorted(ROOT.rglob("*")):
        rel = path.relative_to(ROOT).as_posix()
        if path.suffix not in SUFFIXES or rel in SKIP or rel.startswith(SKIP_DIRS) or not path.is_file():
            continue
        if any(part.startswith(".") or part == "build" for part in path.relative_to(ROOT).parts):
            continue
        found.append(path)
    return found


def test_the_checked_files_include_docs_code_and_tests() -> None:
    names = {p.relative_to(ROOT).as_posix() for p in files()}
    assert {"README.md", "docs/training.md", "iss/zoo/factory.py", "tests/test_app.py"} <= names


def test_no_issue_numbers_or_stories_of_past_runs() -> None:
    hits = []
    for path in files():
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            if match := HISTORY.search(line):
                hits.append(f"{path.relative_to(ROOT)}:{number}: {match.group(0)!r}")
    assert not hits, "history where the present should be:\n" + "\n".join(hits)


def test_the_pattern_catches_what_it_is_for() -> None:
    for text in ["see issue 32", "Issue 26:", "the second round's cells", "the third lease",
                 "2026-11-27, twelfth session", "beside session work"]:  # fmt: skip
        assert HISTORY.search(text), text
    for text in ["round to nearest", "a session cookie", "the issue tracker", "rounded"]:
        assert not HISTORY.search(text), text
