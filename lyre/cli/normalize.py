"""``lyre normalize TEXT``: print what the text front end makes of text, the words the model is given to say."""

from __future__ import annotations

import argparse
import json
import sys

__all__ = ["add_parser", "run"]


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("normalize", help="print the spoken form of text: numbers, amounts, dates, times, units, "
                                         "abbreviations and symbols read as words (no model is loaded)")
    p.add_argument("text", nargs="?", help="the text (default: read from stdin)")
    p.add_argument("--language", default=None, help="the text's language tag, choosing its rules (default: en)")
    p.add_argument("--ssml", action="store_true", help="the text is SSML (also when it starts with <speak>)")
    p.add_argument("--words", action="store_true", help="print each written word and what it says, as JSON lines")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from lyre.text.said import Pause
    from lyre.tts import TextFront, TextOptions
    from lyre.tts.reading import ssml_items
    from lyre.tts.text import DEFAULT_SEGMENT_CHARS, normalize

    text = args.text if args.text is not None else sys.stdin.read()
    options = TextOptions.of(text, True, args.language, args.ssml)
    front = TextFront()
    if options.ssml:
        items, warnings = ssml_items(text, front, options, DEFAULT_SEGMENT_CHARS)
        for warning in warnings:
            print(f"lyre: warning: {warning}", file=sys.stderr)
    else:
        items = [front.read(normalize(text, max(len(text), 1)), options.language)]
    for item in items:
        if isinstance(item, Pause):
            print(f"[pause {item.ms} ms]")
        elif args.words:
            for written, spoken in item.words:
                print(json.dumps({"written": written, "spoken": spoken}, ensure_ascii=False))
        else:
            print(item.spoken)
    return 0
