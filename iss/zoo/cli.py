"""``python -m iss zoo ...``: list, fetch, publish and upgrade the zoo (:mod:`.manifest`), and the factory's
commands (train, cell, status, add, budget, pack, export: :mod:`.factory`)."""

from __future__ import annotations

import argparse
from pathlib import Path

from huggingface_hub.errors import HTTPError

from iss.cli import UsageError
from iss.hub import describe_error

from . import factory
from .manifest import DEFAULT_ZOO, load_zoo, locate_all, upgrade_bundled
from .publish import push_zoo, stage_push
from .tables import format_table, glance_table, human_size, markdown_table, overview_table

TABLES = {"--overview": overview_table, "--glance": glance_table, "": markdown_table}  # zoo table's kinds


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """``zoo list|fetch|push`` arguments, and the factory's ``train|cell|status|add`` (:mod:`.factory`)."""
    sub = parser.add_subparsers(dest="zoo_command", required=True)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--manifest", type=Path, default=None, help=f"zoo manifest (default {DEFAULT_ZOO})")
    cached = argparse.ArgumentParser(add_help=False, parents=[common])
    cached.add_argument(
        "--cache-dir", type=Path, default=None, help="Hugging Face cache (default $HF_HUB_CACHE)"
    )
    sub.add_parser("list", parents=[cached], help="print the zoo table")
    table = sub.add_parser("table", parents=[common], help="markdown tables: metrics, budgets, the paper's")
    kind = table.add_mutually_exclusive_group()
    kind.add_argument("--overview", action="store_true", help="a row per cell: Set5/Urban100 (README)")
    kind.add_argument("--glance", action="store_true", help="a row per cell: how methods rank (docs)")
    table.add_argument(
        "--write", type=Path, metavar="FILE", action="append", default=[],
        help="replace the table between this command's zoo-table markers in FILE instead of printing it",
    )  # fmt: skip
    fetch = sub.add_parser("fetch", parents=[cached], help="resolve every entry (Hub, cache or bundled copy)")
    fetch.add_argument("--offline", action="store_true", help="use only the Hub cache and bundled files")
    fetch.add_argument("--timeout", type=float, default=None, help="seconds to wait for the Hub (default 10)")
    fetch.add_argument("--endpoint", default=None, help="Hub URL (default $HF_ENDPOINT or huggingface.co)")
    push = sub.add_parser("push", parents=[common], help="publish the bundled zoo with a model card")
    push.add_argument("--repo", required=True, help="target model repo, e.g. org/iss-sr-zoo")
    push.add_argument("--revision", default="main", help="branch to commit to (created if missing)")
    push.add_argument("--token", default=None, help="Hub token (default: $HF_TOKEN or the saved login)")
    push.add_argument("--private", action="store_true", help="create the repo private")
    push.add_argument("--endpoint", default=None, help="Hub URL (default $HF_ENDPOINT or huggingface.co)")
    sub.add_parser(
        "upgrade", parents=[common], help="re-save the bundled files in the current format, update sha256"
    )
    push.add_argument(
        "--dry-run", nargs="?", type=Path, const=Path("zoo-push-preview"), default=None, metavar="DIR",
        help="write the files that would be uploaded (card, zoo.json, checkpoints) to DIR instead",
    )  # fmt: skip
    factory.add_commands(sub, common)


def run(args: argparse.Namespace) -> int:
    """Run ``zoo list|fetch|push``, or a factory command."""
    if args.zoo_command in factory.COMMANDS:
        return factory.run(args)
    if args.zoo_command == "list":
        print(format_table(load_zoo(args.manifest), cache_dir=args.cache_dir))
        return 0
    if args.zoo_command == "fetch":
        return _run_fetch(args)
    if args.zoo_command == "upgrade":
        upgraded = upgrade_bundled(args.manifest)
        print(f"upgraded {', '.join(upgraded)}" if upgraded else "every bundled checkpoint is current")
        return 0
    if args.zoo_command == "table":
        entries = load_zoo(args.manifest)
        flag = "--overview" if args.overview else "--glance" if args.glance else ""
        text, command = TABLES[flag](entries), f"python -m iss zoo table {flag}".rstrip()
        for path in args.write:
            replace_marked(path, command, text)
            print(f"{path}: table updated")
        if not args.write:
            print(text)
        return 0
    manifest = args.manifest or DEFAULT_ZOO
    if args.dry_run is not None:
        files = stage_push(manifest, args.repo, args.revision, args.dry_run)
        print(f"dry run: would upload {len(files)} files to {args.repo}@{args.revision}:")
        for f in files:
            print(f"  {f.name}  {human_size(f.stat().st_size)}")
        print(f"written to {args.dry_run}")
        return 0
    try:
        commit = push_zoo(
            manifest, args.repo, revision=args.revision, token=args.token, endpoint=args.endpoint,
            private=args.private or None,
        )  # fmt: skip
    except (HTTPError, ConnectionError, TimeoutError) as e:  # HTTP errors, refused connection, offline mode
        raise UsageError(f"publishing to {args.repo} failed: {describe_error(e)}") from e
    print(f"published {args.repo}@{args.revision}: commit {commit}")
    print(f"pinned every entry of {manifest} to {args.repo}@{commit}")
    return 0


def replace_marked(path: Path, command: str, text: str) -> None:
    """Put ``text`` between the lines ``<!-- zoo-table: COMMAND -->`` and ``<!-- /zoo-table -->`` of a
    markdown file, so the README and docs show the zoo as ``zoo table`` prints it."""
    start, end = f"<!-- zoo-table: {command} -->\n", "<!-- /zoo-table -->"
    doc = path.read_text() if path.is_file() else ""
    if start not in doc or end not in doc[doc.index(start) :]:
        raise UsageError(f"{path} has no '{start.strip()}' ... '{end}' block to write the table into")
    head, rest = doc.split(start, 1)
    path.write_text(f"{head}{start}{text}\n{rest[rest.index(end) :]}")


def _run_fetch(args: argparse.Namespace) -> int:
    """Resolve every entry (at once, within one deadline) and print where each came from; exit 1 if any is
    unavailable or refused."""
    entries = load_zoo(args.manifest)
    found = locate_all(
        entries, offline=args.offline or None, timeout=args.timeout, cache_dir=args.cache_dir,
        endpoint=args.endpoint,
    )  # fmt: skip
    for entry, result in zip(entries, found, strict=True):
        if isinstance(result, Exception):
            print(f"{entry.name}: FAILED: {result}")
        else:
            where = result.detail if result.source == "hub" else f"bundled copy ({result.detail})"
            print(f"{entry.name}: {result.path}  [from {where}]")
    return 1 if any(isinstance(result, Exception) for result in found) else 0
