"""The ``lyre`` command: one module per subcommand, each adding its parser and running it."""

from __future__ import annotations

import argparse
import sys

from lyre.cli import bench, chat, demo, evaluate, normalize, route, say, serve, train
from lyre.cli.settings import parse
from lyre.models.choice import resolve_device_args

__all__ = ["build_parser", "main"]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="lyre", description="Serve Orpheus TTS, Whisper and a chat model to real-time voice agents.")
    sub = parser.add_subparsers(dest="command", required=True)
    for command in (say, serve, chat, demo, bench, evaluate, train, route, normalize):
        command.add_parser(sub)  # each sets its own ``run``
    return parser


def main(argv: list[str] | None = None) -> int:
    try:
        args = parse(build_parser(), sys.argv[1:] if argv is None else argv)
        if getattr(args, "print_config", False):
            print(args.settings.report())
            return 0
        resolve_device_args(args)  # "auto" made concrete once, before any config is built from the arguments
        return int(args.run(args))
    except ValueError as exc:  # bad input: say what was wrong, no traceback
        print(f"lyre: error: {exc}", file=sys.stderr)
        return 2
