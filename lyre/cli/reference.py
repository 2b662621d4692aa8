"""The configuration reference page (docs/, built with the site): every setting of ``lyre serve`` and ``lyre
route`` (lyre.cli.settings), read from their parsers when the site is built, so it cannot drift from them."""

from __future__ import annotations

import argparse
import json

from lyre.cli import build_parser
from lyre.cli.settings import COMMANDS, SECRETS, command_settings, subparser

__all__ = ["reference_markdown"]


def reference_markdown() -> str:
    """The configuration reference: every setting of ``lyre serve`` and ``lyre route``, from their parsers."""
    parser = build_parser()
    out = ["# Configuration reference", "",
           "Every flag of `lyre serve` and `lyre route` is a setting, which can also come from an environment "
           "variable or the TOML file (see [Settings](../settings.md)). Where one is given in several places, "
           "the first of these wins: **flag > environment > file > default**. Any setting's value can be read "
           "from a file named by its variable with `_FILE` (or its key with `_file`).", "",
           "This page is generated from the commands' own parsers when the site is built.", ""]
    for command in COMMANDS:
        sub = subparser(parser, command)
        settings = command_settings(sub)
        out += [f"## lyre {command}", "", (sub.description or sub.format_usage().strip()).replace("\n", " "), ""]
        for group in sub._action_groups:
            rows = [s for s in settings.values() if s.action in group._group_actions]
            if not rows:
                continue
            title = group.title if group.title not in ("options", "optional arguments") else "general"
            out += [f"### {title[0].upper() + title[1:]}", "", "| Flag | Variable · key | Takes | Default | What it does |",
                    "|---|---|---|---|---|"]
            for s in rows:
                flags = " ".join(f"`{f}`" for f in s.action.option_strings)
                default = s.action.default
                shown = "—" if default in (None, [], argparse.SUPPRESS) else f"`{json.dumps(default)}`"
                text = (s.action.help or "").replace("|", "\\|").replace("\n", " ")
                text = text.replace("%(default)s", str(default)).replace("%%", "%")
                secret = " (secret: masked in `--print-config`)" if s.name in SECRETS else ""
                out.append(f"| {flags} | `{s.variable}` · `{s.name}` | {s.kind} | {shown} | {text}{secret} |")
            out.append("")
    return "\n".join(out)
