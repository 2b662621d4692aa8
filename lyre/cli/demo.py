"""``lyre demo-model``: write the tiny random demo model's folders."""

from __future__ import annotations

import argparse
from pathlib import Path

__all__ = ["add_parser", "run"]


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    demo = sub.add_parser("demo-model", help="write the tiny random demo model (Orpheus + SNAC folders) to DIR")
    demo.add_argument("dir", type=Path)
    demo.add_argument("--seed", type=int, default=0)
    demo.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from lyre.models.demo import write_demo_model

    paths = write_demo_model(args.dir, seed=args.seed)
    print(f"model: {paths.model}\ncodec: {paths.codec}")
    return 0
