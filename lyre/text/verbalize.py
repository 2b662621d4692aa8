"""How a written English word is said: digits, money, percentages, ordinals and abbreviations as words.

    readings("42")     # [("forty", "two")]
    readings("$4.50")  # [("four", "dollars", "fifty"), ("four", "fifty"), ...]
    readings("1999")   # [("nineteen", "ninety", "nine"), ("one", "thousand", "nine", "hundred", ...)]
    readings("Dr.")    # [("doctor",), ("drive",)]
    readings("hello,") # [("hello",)]

A speech model reads a number the way people do, and where there is more than
one way ("1999" as a year or a count, "Dr." as doctor or drive) every reading
is given, the likeliest first: the forced aligner lets the audio choose. Number
words are the text front end's (`lyre.text.en.numbers`), so the aligner expects
what the model was given to say; text the front end has read reaches the aligner
as its spoken words already (`lyre.text.said.Said.timed`).
"""

from __future__ import annotations

import re

import lyre.text.en.numbers as numbers

__all__ = ["readings"]

# Written abbreviations and what they are said as (lower case, with their dot).
ABBREVIATIONS: dict[str, tuple[str, ...]] = {
    "dr.": ("doctor", "drive"), "mr.": ("mister",), "mrs.": ("missus",), "ms.": ("miz",), "st.": ("street", "saint"),
    "jr.": ("junior",), "sr.": ("senior",), "prof.": ("professor",), "ave.": ("avenue",), "rd.": ("road",),
    "vs.": ("versus",), "etc.": ("et cetera",), "approx.": ("approximately",), "dept.": ("department",),
    "no.": ("number", "no"), "min.": ("minutes", "minute"), "sec.": ("seconds", "second"), "e.g.": ("for example",),
    "i.e.": ("that is",), "a.m.": ("a m",), "p.m.": ("p m",), "&": ("and",), "+": ("plus",), "=": ("equals",),
    "@": ("at",), "%": ("percent",), "#": ("number", "hash"),
}
_CURRENCY = {"$": ("dollar", "dollars", "cent", "cents"), "£": ("pound", "pounds", "penny", "pence"),
             "€": ("euro", "euros", "cent", "cents")}
_NUMBER = re.compile(r"(?P<sign>[-+]?)(?P<int>\d{1,3}(?:,\d{3})+|\d+)(?:\.(?P<frac>\d+))?")
_ORDINAL = re.compile(r"(\d+)(st|nd|rd|th)")
_EDGE_PUNCTUATION = "\"'()[]{},;:!?.…"


def _cardinal(digits: str) -> tuple[str, ...]:
    """A count as said in American English: "one hundred twenty", no "and" (the front end's words)."""
    return tuple(numbers.cardinal(digits).split())


def _number(match: re.Match[str]) -> list[tuple[str, ...]]:
    """A number's readings: a count, and for a plausible year the year; decimals digit by digit after the point."""
    whole = match["int"].replace(",", "")
    sign = ("minus",) if match["sign"] == "-" else ("plus",) if match["sign"] == "+" else ()
    if match["frac"] is not None:
        point = (*_cardinal(whole), "point", *(w for d in match["frac"] for w in _cardinal(d)))
        return [(*sign, *point)]
    out = [(*sign, *_cardinal(whole))]
    if not sign and "," not in match["int"] and len(whole) == 4 and 1100 <= int(whole) <= 2099:
        out.insert(0, tuple(numbers.year(whole).split()))
    if len(whole) > 1 and whole.startswith("0"):  # a code or a phone number: digit by digit
        out.insert(0, tuple(w for d in whole for w in (("oh",) if d == "0" else _cardinal(d))))
    return out


def _money(symbol: str, rest: str) -> list[tuple[str, ...]] | None:
    match = _NUMBER.fullmatch(rest)
    if match is None or match["sign"]:
        return None
    one, many, small_one, small_many = _CURRENCY[symbol]
    whole = match["int"].replace(",", "")
    unit = one if whole == "1" else many
    amount = _cardinal(whole)
    if match["frac"] is None:
        return [(*amount, unit)]
    cents = int((match["frac"] + "0")[:2])
    small = small_one if cents == 1 else small_many
    said = _cardinal(str(cents))
    return [(*amount, unit, "and", *said, small), (*amount, unit, *said), (*amount, *said)]


def readings(word: str) -> list[tuple[str, ...]]:
    """The ways ``word`` (as written, punctuation attached) may be said, likeliest first, each as plain
    lower-case words; [] when it says nothing (punctuation alone)."""
    key = word.lower().strip()
    abbreviation = key.lstrip(_EDGE_PUNCTUATION).rstrip(_EDGE_PUNCTUATION.replace(".", ""))  # keeps "dr."
    if abbreviation in ABBREVIATIONS:
        return [tuple(r.split()) for r in ABBREVIATIONS[abbreviation]]
    stripped = key.strip(_EDGE_PUNCTUATION)
    if not any(ch.isalnum() for ch in stripped):
        return []
    if stripped[0] in _CURRENCY and (money := _money(stripped[0], stripped[1:])) is not None:
        return money
    if stripped.endswith("%") and (number := _NUMBER.fullmatch(stripped[:-1])) is not None:
        return [(*r, "percent") for r in _number(number)]
    if (ordinal := _ORDINAL.fullmatch(stripped)) is not None:
        return [tuple(numbers.ordinal(ordinal[1]).split())]
    if (number := _NUMBER.fullmatch(stripped)) is not None:
        return _number(number)
    if re.search(r"\d", stripped):  # digits among letters ("4pm", "mp3", "covid-19"): each part as said
        parts = [p for p in re.split(r"(\d+)|[^\w']+", stripped) if p]
        return [tuple(w for p in parts for w in (_cardinal(p) if p.isdigit() else (p,)))]
    return [tuple(w for w in re.split(r"[^\w']+", stripped) if w)]
