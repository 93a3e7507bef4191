"""``python -m iss <command>``: one subcommand per package, each owning its own arguments.

A command module exposes ``add_arguments(parser)`` and ``run(args) -> int``. User mistakes raise
``UsageError`` (or ValueError, FileNotFoundError, KeyError): one line on stderr and exit 2.
"""

from __future__ import annotations

import argparse
import importlib
import sys

COMMANDS = {
    "eval": ("iss.evaluate", "evaluate bicubic, an architecture or a checkpoint on benchmark sets"),
    "train": ("iss.train.cli", "train a sparse SR network with a pruning method"),
    "zoo": ("iss.zoo.cli", "list, fetch, publish or train the checkpoint zoo"),
    "upscale": ("iss.zoo.pretrained", "upscale image files, folders or globs with a zoo model or checkpoint"),
    "export": ("iss.export", "write a zoo model as a spandrel state dict or as ONNX, for other tools"),
    "space": ("iss.space", "write the folder a Hugging Face Space repository holds"),
}


class UsageError(Exception):
    """A mistake in the user's input: reported as one line, without a traceback."""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m iss", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    argv = sys.argv[1:] if argv is None else argv
    modules = {}
    for name, (module_name, help_text) in COMMANDS.items():
        p = sub.add_parser(name, help=help_text, description=help_text)
        if not argv or argv[0] in (name, "-h", "--help"):
            modules[name] = importlib.import_module(module_name)
            modules[name].add_arguments(p)
    args = parser.parse_args(argv)
    try:
        return int(modules[args.command].run(args) or 0)
    except (UsageError, ValueError, FileNotFoundError, KeyError) as e:
        message = e.args[0] if isinstance(e, KeyError) and e.args else e
        print(f"error: {message}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
