"""``python -m iss space export DIR``: the folder a Hugging Face Space repository holds.

The folder has the app and the library (``app.py``, ``iss/``), the example images and recordings the app
reads, ``requirements.txt`` (what a Space installs with pip), ``packages.txt`` (the C compiler ``iss.sparse``
builds its kernels with, installed with apt), a README whose front matter preloads the zoo's checkpoints from
its Hub model repo at build time (``preload_from_hub``), the zoo manifest pinned to that repo, and a
``.gitattributes`` that routes every binary file through Xet/LFS: the Hub refuses binaries pushed as plain git
objects. No checkpoint is copied: the app downloads them (``zoo push`` publishes them). Run it at the root
of a checkout. See docs/deploy.md.
"""

from __future__ import annotations

import argparse
import shutil
from importlib.metadata import version
from pathlib import Path

from huggingface_hub import SpaceCardData

from iss.zoo.manifest import DEFAULT_ZOO, load_zoo

__all__ = ["BINARY_PATTERNS", "PACKAGES", "add_arguments", "export_space", "run"]

# What the Space repo holds, relative to the checkout (folders copied whole, less caches and checkpoints).
CONTENTS = ("app.py", "iss", "assets", "requirements.txt")
SKIPPED = ("__pycache__", "*.pyc", "*.egg-info", "*.so", ".*")
PACKAGES = ("gcc", "libc6-dev")  # iss.sparse compiles its kernels with cc at first use
BINARY_PATTERNS = ("*.png", "*.jpg", "*.jpeg", "*.webp", "*.gif", "*.npz", "*.npy", "*.safetensors",
                   "*.onnx", "*.pth", "*.pt", "*.bin", "*.so", "*.gz", "*.tar", "*.zip",
                   "assets/recordings/**")  # fmt: skip
PYTHON_VERSION = "3.11"  # the version the test suite runs on (Spaces default to 3.10)


def export_space(
    folder: str | Path, *, manifest: str | Path | None = None, title: str = "ISS-SR: sparse super-resolution"
) -> list[Path]:
    """Write the Space repository's files into ``folder`` (which must be empty or absent); returns them.

    ``manifest`` (default ``checkpoints/zoo.json``) must name a Hub location for every entry (``zoo push``
    pins it): its repos are preloaded and it is the Space's zoo manifest.
    """
    folder, manifest = Path(folder), Path(manifest) if manifest is not None else DEFAULT_ZOO
    root = Path.cwd()  # a source checkout's root, where every command runs
    if folder.exists() and (not folder.is_dir() or any(folder.iterdir())):
        raise ValueError(f"{folder} is not an empty folder; the Space is exported into a new one")
    if not (root / "app.py").is_file():
        raise FileNotFoundError(f"no app.py in {root}: run this at the root of an ISS-SR checkout")
    entries = load_zoo(manifest)
    unpublished = [e.name for e in entries if e.hub is None]
    if unpublished:
        raise ValueError(f"{manifest}: {', '.join(unpublished)} not on the Hub; run `python -m iss zoo push`")
    folder.mkdir(parents=True, exist_ok=True)
    for name in CONTENTS:
        source, target = root / name, folder / name
        target.parent.mkdir(parents=True, exist_ok=True)
        if source.is_dir():
            shutil.copytree(source, target, ignore=shutil.ignore_patterns(*SKIPPED))
        else:
            shutil.copyfile(source, target)
    (folder / "checkpoints").mkdir()
    shutil.copyfile(manifest, folder / "checkpoints" / "zoo.json")
    (folder / "packages.txt").write_text("\n".join(PACKAGES) + "\n")
    (folder / ".gitattributes").write_text(
        "".join(f"{pattern} filter=lfs diff=lfs merge=lfs -text\n" for pattern in BINARY_PATTERNS)
    )
    (folder / "README.md").write_text(space_readme(manifest, title))
    return sorted(p for p in folder.rglob("*") if p.is_file())


def space_readme(manifest: Path, title: str) -> str:
    """The Space's README: front matter (gradio version, app file, the zoo repos to preload) and a line."""
    files: dict[tuple[str, str], list[str]] = {}  # (repo, revision) -> file names
    for entry in load_zoo(manifest):
        assert entry.hub is not None  # checked by export_space
        files.setdefault((entry.hub.repo_id, entry.hub.revision), []).append(entry.hub.filename)
    preload = [  # "REPO FILE,FILE [REVISION]", as the Spaces configuration reference writes it
        f"{repo} {','.join(names)}" + ("" if revision == "main" else f" {revision}")
        for (repo, revision), names in files.items()
    ]
    card = SpaceCardData(
        title=title, sdk="gradio", sdk_version=version("gradio"), python_version=PYTHON_VERSION,
        app_file="app.py", license="apache-2.0", models=sorted({repo for repo, _ in files}),
        preload_from_hub=preload,
        emoji="🔍", colorFrom="indigo", colorTo="purple", pinned=False,
        short_description="Compare pruned SwinIR, EDSR and CAT upscalers",
    )  # fmt: skip
    return (
        f"---\n{card.to_yaml()}\n---\n\n# {title}\n\nThe ISS-SR app (ICCV 2023, *Iterative Soft Shrinkage "
        "Learning for Efficient Image Super-Resolution*). The checkpoints come from "
        f"{', '.join(card.models)} (preloaded at build time; pinned in `checkpoints/zoo.json`).\n"
    )


# ---------------------------------------------------------------------------------------------- space command


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """``space export DIR [--manifest PATH]``."""
    sub = parser.add_subparsers(dest="space_command", required=True)
    export = sub.add_parser("export", help="write the Space repository's files into a new folder")
    export.add_argument("folder", type=Path, metavar="DIR", help="new (or empty) folder to write")
    export.add_argument(
        "--manifest", type=Path, default=None,
        help=f"zoo manifest pinned to the Hub by `zoo push` (default {DEFAULT_ZOO})",
    )  # fmt: skip


def run(args: argparse.Namespace) -> int:
    """Export the Space folder and say what to do next."""
    files = export_space(args.folder, manifest=args.manifest)
    size = sum(f.stat().st_size for f in files) / 1e6
    print(f"wrote {len(files)} files ({size:.1f} MB) to {args.folder}")
    print("next: push it to a Space repository with git (LFS installed) or `hf upload`; see docs/deploy.md")
    return 0
