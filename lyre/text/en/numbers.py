"""English number words: counts, decimals, ordinals, years, digits, fractions and scaled amounts.

num2words (LGPL-2.1, used unmodified as a library) makes the words; this module says how American English
reads each kind of number: no "and" inside a count ("one hundred twenty"), decimals digit by digit after the
point, years in pairs ("nineteen ninety nine", "two thousand five"), codes digit by digit with "oh".
"""

from __future__ import annotations

import re

__all__ = ["NUMBER", "cardinal", "decimal", "digits", "fraction", "is_one", "number", "ordinal", "ordinal_plural", "year"]

# A written number: sign, a whole part grouped by commas in threes or not grouped, a decimal part, a scale letter.
NUMBER = re.compile(r"(?P<sign>[-+]?)(?P<int>\d{1,3}(?:,\d{3})+|\d+)?(?:\.(?P<frac>\d+))?(?P<scale>[kKMB]|bn)?")
_SCALES = {"k": "thousand", "K": "thousand", "M": "million", "B": "billion", "bn": "billion"}
_DIGITS = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine")
# Beyond this a number is read digit by digit (an id, not a count anyone says).
_MAX_COUNT = 10**15
# Fractions said with their own word, not as an ordinal ("one half", not "one second").
_HALVES = {2: ("half", "halves"), 4: ("quarter", "quarters")}


def _say(value: int, to: str = "cardinal") -> str:
    """num2words' words for ``value``; one too long for a count (num2words overflows past about 10**33), digit
    by digit, an ordinal's last digit as an ordinal ("one zero ... zeroth")."""
    if abs(value) >= _MAX_COUNT:
        text = str(abs(value))
        return digits(text) if to != "ordinal" else f"{digits(text[:-1])} {_say(int(text[-1]), to)}"
    from num2words import num2words  # imported on first use: the server imports lyre.text without loading it

    return num2words(value, lang="en", to=to)


def _plain(text: str) -> str:
    """num2words' words as spoken text: hyphens as spaces, no commas, and no "and" inside a count."""
    words = re.sub(r"[^a-z' ]", " ", text.lower()).split()
    return " ".join(w for w in words if w != "and")


def cardinal(value: int | str) -> str:
    """A count: "one hundred twenty"; a negative one with "minus"; one too long for a count, digit by digit."""
    value = int(str(value).replace(",", ""))
    if abs(value) >= _MAX_COUNT:
        return ("minus " if value < 0 else "") + digits(str(abs(value)))
    return ("minus " if value < 0 else "") + _plain(_say(abs(value)))


def digits(text: str, zero: str = "zero") -> str:
    """Each digit of ``text`` said alone ("four one five"); ``zero`` names 0 ("oh" in codes and phone numbers)."""
    return " ".join(zero if d == "0" else _DIGITS[int(d)] for d in text if d.isdigit())


def decimal(whole: str, frac: str) -> str:
    """"3.14": "three point one four"; ".5": "point five"."""
    head = cardinal(whole) + " " if whole else ""
    return f"{head}point {digits(frac)}"


def ordinal(value: int | str) -> str:
    """"21": "twenty first"."""
    return _plain(_say(int(str(value).replace(",", "")), "ordinal"))


def ordinal_plural(value: int) -> str:
    """A denominator over one: "thirds", "eighths", "halves"."""
    if value in _HALVES:
        return _HALVES[value][1]
    return ordinal(value) + "s"


def year(value: int | str) -> str:
    """A year: "1999": "nineteen ninety nine", "2005": "two thousand five", "1905": "nineteen oh five"."""
    return _plain(_say(int(value), "year"))


def fraction(numerator: int, denominator: int) -> str:
    """"3/4": "three quarters", "1/2": "one half", "5/16": "five sixteenths"; a zero denominator: "over"."""
    if denominator == 0:
        return f"{cardinal(numerator)} over zero"
    if denominator == 1:
        return f"{cardinal(numerator)} over one"
    if numerator == 1:
        name = _HALVES[denominator][0] if denominator in _HALVES else ordinal(denominator)
        return f"one {name}"
    return f"{cardinal(numerator)} {ordinal_plural(denominator)}"


def number(text: str) -> str | None:
    """A written number as words ("-1,200.5" "minus one thousand two hundred point five", "2.5M" "two point
    five million"); None when ``text`` is not one. Leading zeros make a code ("007": "oh oh seven"). A comma
    groups thousands; a full stop is always the decimal point (English writing): "1.000" is "one point zero
    zero zero"."""
    match = NUMBER.fullmatch(text)
    if match is None or (match["int"] is None and match["frac"] is None):
        return None
    whole, frac, scale = match["int"] or "", match["frac"], match["scale"]
    sign = {"-": "minus ", "+": "plus "}.get(match["sign"], "")
    if frac is None and len(whole) > 1 and whole.startswith("0") and not scale:
        return sign + digits(whole, zero="oh")
    said = decimal(whole.replace(",", ""), frac) if frac is not None else cardinal(whole)
    return sign + said + (f" {_SCALES[scale]}" if scale else "")


def is_one(text: str) -> bool:
    """Whether a written amount is exactly one (a singular unit follows it: "1 km", "1.0 km" is plural)."""
    return text.lstrip("+") in ("1", "one")
