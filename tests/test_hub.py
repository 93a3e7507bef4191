"""iss.hub, fully offline: benchmark downloads and safe extraction (hand-built Hub cache, local server).

Nothing here may reach huggingface.co: the ``isolated_hub`` fixture (conftest.py) puts the Hub cache, HF_HOME
and tokens in tmp_path, points the default endpoint at a closed local port, and refuses name resolution for
any non-loopback host.
"""

from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path

import numpy as np
import pytest
from fakehub import COMMIT, FakeHub, cache_put
from PIL import Image

from iss import hub

pytestmark = pytest.mark.usefixtures("isolated_hub")


# -------------------------------------------------------------------------------------------------- builders


def png_bytes(seed: int, size: tuple[int, int] = (12, 10)) -> bytes:
    """A small random RGB PNG."""
    rng = np.random.default_rng(seed)
    buf = io.BytesIO()
    Image.fromarray(rng.integers(0, 256, (*size, 3), dtype=np.uint8)).save(buf, format="PNG")
    return buf.getvalue()


def make_tarball(members: list[tarfile.TarInfo | tuple[str, bytes]]) -> bytes:
    """A .tar.gz from ``(name, data)`` files and raw TarInfo members (links, devices...)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for member in members:
            if isinstance(member, tarfile.TarInfo):
                tar.addfile(member)
            else:
                info = tarfile.TarInfo(member[0])
                info.size = len(member[1])
                tar.addfile(info, io.BytesIO(member[1]))
    return buf.getvalue()


def set5_tarball() -> bytes:
    """Like eugenesiow's Set5_HR.tar.gz: a ``Set5_HR/`` folder of five PNGs (plus macOS litter to skip)."""
    names = ["baby", "bird", "butterfly", "head", "woman"]
    folder = tarfile.TarInfo("Set5_HR")
    folder.type = tarfile.DIRTYPE
    return make_tarball([folder, *((f"Set5_HR/{n}.png", png_bytes(i)) for i, n in enumerate(names)),
                         ("Set5_HR/._baby.png", b"junk"), ("Set5_HR/readme.txt", b"text")])  # fmt: skip


# -------------------------------------------------------------------------------------------- (a) fake cache


def test_fetch_benchmark_offline_from_a_hand_built_cache(
    tmp_path: Path, isolated_hub: Path, offline: None
) -> None:
    cache_put(isolated_hub, "eugenesiow/Set5", "data/Set5_HR.tar.gz", set5_tarball(), repo_type="dataset")
    root = hub.fetch_benchmark("Set5", cache_dir=tmp_path / "ours")
    assert root == tmp_path / "ours" / "benchmarks"
    hr = sorted(p.name for p in (root / "Set5" / "HR").iterdir())
    assert hr == ["baby.png", "bird.png", "butterfly.png", "head.png", "woman.png"]
    assert np.asarray(Image.open(root / "Set5" / "HR" / "bird.png")).shape == (12, 10, 3)
    source = json.loads((root / "Set5" / "source.json").read_text())
    assert source["commit"] == COMMIT and source["revision"] == "main" and source["images"] == 5
    # Extracted once: later calls need neither the Hub nor its cache.
    for path in sorted(isolated_hub.rglob("*"), reverse=True):
        path.unlink() if not path.is_dir() or path.is_symlink() else path.rmdir()
    assert hub.fetch_benchmark("Set5", cache_dir=tmp_path / "ours") == root


def test_fetched_benchmark_is_what_benchmarkset_reads(
    tmp_path: Path, isolated_hub: Path, offline: None
) -> None:
    data = pytest.importorskip("iss.data")
    cache_put(isolated_hub, "eugenesiow/Set5", "data/Set5_HR.tar.gz", set5_tarball(), repo_type="dataset")
    root = hub.fetch_benchmark("Set5", cache_dir=tmp_path / "ours")
    samples = data.BenchmarkSet(root, "Set5", 2)
    assert len(samples) == 5 and samples[0].hr.shape == (12, 10, 3) and samples[0].lr.shape == (6, 5, 3)


def test_fetch_benchmark_names(tmp_path: Path, offline: None) -> None:
    with pytest.raises(ValueError, match=r"Manga109 .* pass a local benchmarks folder"):
        hub.fetch_benchmark("Manga109")
    with pytest.raises(ValueError, match=r"unknown benchmark 'Set6'"):
        hub.fetch_benchmark("Set6")
    with pytest.raises(FileNotFoundError, match=r"could not download B100 .* --data-dir"):
        hub.fetch_benchmark("bsd100", cache_dir=tmp_path)  # alias accepted, then nothing cached offline
    assert hub.PINNED == {"Set5": "main", "Set14": "main", "B100": "main", "Urban100": "main"}


def _link(name: str, target: str, kind: bytes) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.linkname = kind, target
    return info


@pytest.mark.parametrize(
    ("member", "message"),
    [
        (("../evil.png", b"x"), "unsafe path '../evil.png'"),
        (("Set5_HR/../../evil.png", b"x"), "unsafe path"),
        (("/tmp/evil.png", b"x"), "unsafe path '/tmp/evil.png'"),
        (_link("Set5_HR/link.png", "/etc/passwd", tarfile.SYMTYPE), "link or special file"),
        (_link("Set5_HR/hard.png", "Set5_HR/baby.png", tarfile.LNKTYPE), "link or special file"),
        (_link("Set5_HR/dev.png", "", tarfile.CHRTYPE), "link or special file"),
        (_link("Set5_HR/fifo.png", "", tarfile.FIFOTYPE), "link or special file"),
    ],
)
def test_unsafe_tarballs_are_refused_and_nothing_is_written(
    tmp_path: Path, isolated_hub: Path, offline: None, member, message: str
) -> None:
    good = [(f"Set5_HR/{n}.png", png_bytes(i)) for i, n in enumerate("abcd")]
    cache_put(isolated_hub, "eugenesiow/Set5", "data/Set5_HR.tar.gz", make_tarball([*good, member]),
              repo_type="dataset")  # fmt: skip
    ours = tmp_path / "deep" / "ours"
    before = set(tmp_path.rglob("*"))
    with pytest.raises(ValueError, match=message):
        hub.fetch_benchmark("Set5", cache_dir=ours)
    assert set(tmp_path.rglob("*")) == before  # nothing extracted, no evil.png anywhere
    assert not Path("/tmp/evil.png").exists()


def test_wrong_image_count_is_refused(tmp_path: Path) -> None:
    tarball = tmp_path / "t.tar.gz"
    tarball.write_bytes(make_tarball([("Set5_HR/a.png", png_bytes(0))]))
    with pytest.raises(ValueError, match=r"expected 5 images, found 1"):
        hub.extract_images(tarball, tmp_path / "HR", expected=5)
    assert not (tmp_path / "HR").exists()


def test_unreadable_or_truncated_tarball_is_a_value_error(tmp_path: Path) -> None:
    tarball = tmp_path / "t.tar.gz"
    tarball.write_bytes(b"this is not a tarball")
    with pytest.raises(ValueError, match=r"not a readable \(or a truncated\) tar archive"):
        hub.extract_images(tarball, tmp_path / "HR")
    tarball.write_bytes(set5_tarball()[:300])
    with pytest.raises(ValueError, match=r"not a readable"):
        hub.extract_images(tarball, tmp_path / "HR")
    assert not (tmp_path / "HR").exists()


def test_clashing_names_cannot_be_flattened(tmp_path: Path) -> None:
    tarball = tmp_path / "t.tar.gz"
    tarball.write_bytes(make_tarball([("x/a.png", png_bytes(0)), ("y/a.png", png_bytes(1))]))
    with pytest.raises(ValueError, match=r"share a file name"):
        hub.extract_images(tarball, tmp_path / "HR")


# ------------------------------------------------------------------------------------------ (b) local server


def test_fetch_benchmark_through_the_server(tmp_path: Path, fakehub: FakeHub) -> None:
    commit = fakehub.add_file("eugenesiow/Set5", "data/Set5_HR.tar.gz", set5_tarball(), repo_type="dataset")
    root = hub.fetch_benchmark("Set5", cache_dir=tmp_path, endpoint=fakehub.url, timeout=5)
    assert len(list((root / "Set5" / "HR").glob("*.png"))) == 5
    assert json.loads((root / "Set5" / "source.json").read_text())["commit"] == commit
    assert ("HEAD", "/datasets/eugenesiow/Set5/resolve/main/data/Set5_HR.tar.gz") in fakehub.requests


def test_fetch_benchmark_404_says_what_to_do(tmp_path: Path, fakehub: FakeHub) -> None:
    fakehub.repo("eugenesiow/Urban100", "dataset")
    with pytest.raises(
        FileNotFoundError, match=r"could not download Urban100 .*HTTP 404.* --data-dir or ISS_DATA_DIR"
    ):
        hub.fetch_benchmark("Urban100", cache_dir=tmp_path, endpoint=fakehub.url)
