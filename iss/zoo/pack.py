"""Carrying a training session to a borrowed GPU machine and its results back, within the transfer limits.

The device tool sends the working tree (tracked files and the carried ignored folders, 64 MiB in all) and
returns at most 8 files of 16 MiB each. ``zoo pack`` copies what a plan's training needs into an ignored
folder (default ``.gpu/``): the plan's training folders and as many of its evaluation sets as fit, PNGs
re-encoded as lossless WebP (identical pixels, ~25% smaller; JPEGs as they are), and the git commit.
``zoo export`` packs the cells' results (checkpoint, record, log, recording; never the big ``state.pt``)
into tar files under the size limit, leaving out the recordings' resumable states that do not fit.
"""

from __future__ import annotations

import io
import re
import shutil
import subprocess
import tarfile
from pathlib import Path

from PIL import Image

from iss.data import IMAGE_SUFFIXES, list_images

from .plan import Plan

MIB = 2**20
_EXPORTED = ("cell.json", "log.jsonl", "worker.log", "model.safetensors")
_STATE = re.compile(r"state_(\d+)\.safetensors")  # a recording's resumable state (iss.train.recording)


def pack_data(plan: Plan, data_dir: Path, out: Path, *, budget_mib: float, log=print) -> list[str]:
    """Copy the plan's training folders, then its evaluation sets while they fit in ``budget_mib`` together
    with the tracked files of the checkout in the working directory; returns the evaluation sets left out."""
    repo = checkout()
    tracked = tracked_files(repo)
    left = budget_mib * MIB - sum(tracked.values())
    for folder in plan.train_data:
        left -= _copy_images(data_dir / folder, out / "data" / folder)
    if left < 0:
        largest = sorted(tracked, key=tracked.get, reverse=True)[:3]
        raise ValueError(
            f"the training data and the {sum(tracked.values()) / MIB:.1f} MiB of tracked files exceed the "
            f"{budget_mib} MiB budget by {-left / MIB:.1f} MiB; the largest tracked files: "
            + ", ".join(f"{name} ({tracked[name] / MIB:.1f} MiB)" for name in largest)
            + "; a GPU round needs neither the bundled checkpoints nor the recordings: `bash "
            "benchmarks/device_tree.sh slim` leaves them behind (docs/training.md)"
        )
    skipped = []
    for name in plan.eval:
        images = [p for p in (data_dir / "benchmarks" / name).rglob("*") if _is_image(p)]
        size = sum(_encoded_size(p) if p.parent.name == "HR" else p.stat().st_size for p in images)
        if size > left:
            skipped.append(name)
            continue
        for sub in sorted(p for p in (data_dir / "benchmarks" / name).rglob("*") if p.is_dir()):
            if list_images(sub):  # HR re-encoded; shipped LR files copied as they are (found by name)
                dest = out / "data" / "benchmarks" / sub.relative_to(data_dir / "benchmarks")
                left -= _copy_images(sub, dest, webp=sub.name == "HR")
    commit = subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True)
    (out / "COMMIT").write_text(commit.stdout.strip() or "unknown")
    log(
        f"{out}: {folder_bytes(out) / MIB:.1f} MiB packed, {left / MIB:.1f} MiB of the budget left"
        + (f"; left out (evaluate them here with zoo add): {', '.join(skipped)}" if skipped else "")
    )
    return skipped


def checkout() -> Path:
    """The root of the git checkout the working directory is in (the zoo is trained from one)."""
    top = subprocess.run(["git", "rev-parse", "--show-toplevel"], capture_output=True, text=True, check=True)
    return Path(top.stdout.strip())


def tracked_files(repo: Path) -> dict[str, int]:
    """Bytes of each file git tracks (they always travel with the working tree)."""
    names = subprocess.run(["git", "-C", str(repo), "ls-files", "-z"], capture_output=True, check=True).stdout
    return {n: (repo / n).stat().st_size for n in names.decode().split("\0") if n and (repo / n).is_file()}


def folder_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def _is_image(path: Path) -> bool:
    return path.is_file() and path.suffix.lower() in IMAGE_SUFFIXES


def _encoded_size(path: Path) -> int:
    """Bytes ``path`` takes once packed (PNG as lossless WebP, anything else as it is)."""
    return len(_webp(path)) if path.suffix.lower() == ".png" else path.stat().st_size


def _webp(path: Path) -> bytes:
    """Lossless WebP of an image: the same pixels in fewer bytes."""
    buffer = io.BytesIO()
    with Image.open(path) as im:
        im.save(buffer, "WEBP", lossless=True, quality=50, method=4)
    return buffer.getvalue()


def _copy_images(source: Path, dest: Path, *, webp: bool = True) -> int:
    """Copy the images of one folder (PNG as lossless WebP with the same stem if ``webp``); returns the
    bytes written."""
    dest.mkdir(parents=True, exist_ok=True)
    for path in list_images(source):
        if webp and path.suffix.lower() == ".png":
            (dest / f"{path.stem}.webp").write_bytes(_webp(path))
        else:
            shutil.copyfile(path, dest / path.name)
    return folder_bytes(dest)


def export_cells(
    work: Path, out: Path, *, max_mib: float = 15.0, max_files: int = 8, log=print
) -> list[Path]:
    """Tar the results of every cell in ``work`` (and ``plan.json``) into at most ``max_files`` files of at
    most ``max_mib`` each (what the device tool brings back).

    Checkpoints, records, logs and recorded series must fit (else ``ValueError`` before anything is written).
    Recording states, the largest files and the only ones a live run can do without, follow newest iteration
    first, each iteration's states of all cells together (a recording needs both runs'); those that do not fit
    are left out and named, so a round's checkpoints always come back."""
    limit = max_mib * MIB
    results = [p for p in [work / "plan.json"] if p.is_file()]
    states: dict[int, list[Path]] = {}
    for folder in sorted(p for p in work.iterdir() if (p / "cell.json").is_file()):
        results += [folder / n for n in _EXPORTED if (folder / n).is_file()]
        for path in sorted(p for p in (folder / "recording").glob("*") if p.is_file()):
            match = _STATE.fullmatch(path.name)
            if match:
                states.setdefault(int(match[1]), []).append(path)
            else:
                results.append(path)
    archives = _fill([], results, limit)
    if len(archives) > max_files:
        raise ValueError(
            f"the results need {len(archives)} files of {max_mib} MiB; at most {max_files} come back"
        )
    for iteration in sorted(states, reverse=True):
        try:
            with_states = _fill([list(a) for a in archives], states[iteration], limit)
        except ValueError:  # one state alone over the limit
            with_states = []
        if 0 < len(with_states) <= max_files:
            archives = with_states
        else:
            log(f"left out the recording states at iteration {iteration} ({len(states[iteration])} files): "
                f"no room in {max_files} files of {max_mib} MiB")  # fmt: skip
    out.mkdir(parents=True, exist_ok=True)
    files = []
    for i, members in enumerate(archives):
        files.append(out / f"cells-{i}.tar.gz")
        with tarfile.open(files[-1], "w:gz") as tar:
            for member in members:
                tar.add(member, arcname=str(member.relative_to(work)))
    log(f"{sum(map(len, archives))} files of {work} in {len(files)} archives under {out}")
    return files


def _fill(archives: list[list[Path]], members: list[Path], limit: float) -> list[list[Path]]:
    """``archives`` with ``members`` added, each to the first archive it fits in (else a new one)."""
    for member in members:
        size = member.stat().st_size
        if size > limit:
            raise ValueError(f"{member} is {size / MIB:.1f} MiB, more than one file may bring back")
        room = next((a for a in archives if sum(m.stat().st_size for m in a) + size <= limit), None)
        if room is None:
            archives.append(room := [])
        room.append(member)
    return archives
