"""English: every rule for reading written English aloud, in this package (numbers, forms, tables, reader).

`lyre.text.front_end` chooses a language's package by the request's language; each package offers the same
four functions: `read_words`, `joins`, `may_continue` and `say_as`.
"""

from __future__ import annotations

import lyre.text.en.forms as forms
import lyre.text.en.numbers as n
from lyre.text.en.reader import joins, may_continue, read_words

__all__ = ["joins", "may_continue", "read_words", "say_as"]

SAY_AS = ("characters", "cardinal", "ordinal", "digits", "date", "time", "telephone")


def say_as(kind: str, text: str, format: str | None = None) -> str | None:
    """SSML's ``<say-as interpret-as=kind>``: ``text`` read as that kind, or None when it is not one (the
    caller reads it as plain text and warns). ``format`` orders a date's parts ("mdy", "dmy", "ymd")."""
    text = text.strip()
    if kind == "characters":
        return forms.spell(text)
    if kind == "digits":
        return n.digits(text) if any(ch.isdigit() for ch in text) else None
    if kind == "cardinal":
        return n.number(text.replace(" ", ""))
    if kind == "ordinal":
        digits = text.rstrip("stndrhSTNDRH.")
        return n.ordinal(digits) if digits.replace(",", "").isdigit() else None
    if kind == "telephone":
        return forms.phone(text) or (", ".join(n.digits(g, zero="oh") for g in text.replace("-", " ").split())
                                     if any(ch.isdigit() for ch in text) else None)
    if kind == "time":
        return forms.time(text.replace(" ", ""))
    if kind == "date":
        return _date(text, format)
    return None


def _date(text: str, format: str | None) -> str | None:
    parts = [p for p in text.replace("/", "-").replace(".", "-").split("-") if p]
    order = (format or "").lower()
    if len(order) == len(parts) == 3 and set(order) == set("dmy") and all(p.isdigit() for p in parts):
        by = dict(zip(order, parts))
        return forms.date(f"{by['y'].zfill(4)}-{by['m']}-{by['d']}") if len(by["y"]) == 4 else \
            forms.date(f"{by['m']}/{by['d']}/{by['y']}")
    return forms.date(text)
