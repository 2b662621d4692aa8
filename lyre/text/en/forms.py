"""English written forms read one at a time: amounts, percentages, times, dates, phone numbers, ranges, web
addresses, numbers inside words. Each function takes a word stripped of its edge punctuation and gives its
spoken words, or None when the word is not of its form; `form` tries them all in a fixed order.

Stated rules:
- A full stop in a number is the decimal point; a comma groups thousands ("1,000" one thousand, "1.000" one
  point zero zero zero).
- Dates written in numbers: year-month-day when the year comes first; with "/" or "-" month first (American
  order) unless the first number cannot be a month (over 12), then day first; with "." day first (as written in
  Europe) unless the second number cannot be a month. Every date is said "December second, twenty twenty six".
- "a/b" without a year is a fraction (the reader makes it a date after "on", "by", "until" and the like).
- h:mm is a time when h <= 24 and mm < 60 ("3:1" is a ratio: "three to one").
"""

from __future__ import annotations

import re

import lyre.text.en.numbers as n
from lyre.text.en.tables import CURRENCY, MONTHS, UNITS, WORD_ACRONYMS

__all__ = ["date", "form", "letters", "money", "phone", "spell", "time"]

_AMPM = r"(?P<ampm>[ap]\.?m\.?)"
_TIME = re.compile(rf"(?P<h>\d{{1,2}}):(?P<m>\d{{2}})(?::(?P<s>\d{{2}}))?{_AMPM}?", re.I)
_HOUR = re.compile(rf"(?P<h>\d{{1,2}}){_AMPM}", re.I)
_ISO_DATE = re.compile(r"(?P<y>\d{4})-(?P<a>\d{1,2})-(?P<b>\d{1,2})")
_DATE = re.compile(r"(?P<a>\d{1,2})(?P<sep>[/.-])(?P<b>\d{1,2})(?P=sep)(?P<y>\d{4}|\d{2})")
_PHONE = re.compile(r"(?:\+(?P<country>\d{1,3})[-. ]?)?\(?(?P<area>\d{3})\)?[-.](?P<ex>\d{3})[-.](?P<line>\d{4})"
                    r"|(?P<ex7>\d{3})-(?P<line7>\d{4})")
_MONEY = re.compile(r"(?P<sign>-?)(?P<sym>[$£€¥₹₩])(?P<num>(?:\d{1,3}(?:,\d{3})+|\d+)?(?:\.\d+)?(?:[kKMB]|bn)?)")
_ORDINAL = re.compile(r"(?P<n>\d{1,3}(?:,\d{3})+|\d+)(?:st|nd|rd|th)", re.I)
_FRACTION = re.compile(r"(?P<n>\d+)/(?P<d>\d+)")
_DECADE = re.compile(r"'?(?P<n>\d0|\d{3}0)'?s")
_BY = re.compile(r"(?P<a>\d+)x(?P<b>\d+)")
_EMAIL = re.compile(r"[\w.+-]+@[\w-]+(?:\.[\w-]+)+")
_URL = re.compile(r"(?:https?://|www\.)\S+|[\w-]+(?:\.[\w-]+)*\.(?:com|org|net|io|ai|dev|edu|gov|co|uk|de|fr|app|"
                  r"info|me|tv|us|ca|ly)(?:/\S*)?", re.I)
_NUMBER_UNIT = re.compile(r"(?P<num>[-+]?(?:\d{1,3}(?:,\d{3})+|\d+)?(?:\.\d+)?)(?P<unit>°[CF]?|[A-Za-z/]+)")
_SPECIAL = {"24/7": "twenty four seven", "50/50": "fifty fifty", "9/11": "nine eleven", "1/1": "one out of one"}
_LETTER_NAMES = {"&": "and", "+": "plus", "=": "equals", "@": "at", "#": "number", "%": "percent", "/": "slash",
                 ".": "dot", "-": "dash", "_": "underscore", ":": "colon", "~": "tilde"}


def spell(text: str) -> str:
    """Letter by letter, digits by name: "CEO": "C E O", "A1": "A one"."""
    return " ".join(n.digits(ch) if ch.isdigit() else _LETTER_NAMES.get(ch, ch.upper()) for ch in text
                    if not ch.isspace())


def letters(word: str) -> str:
    """A run of letters: an all-capital acronym of two to five letters spelled unless it is read as a word
    (WORD_ACRONYMS), with a plural "s" kept ("CEOs": "C E Os"); anything else as written."""
    core, plural = (word[:-1], "s") if len(word) > 2 and word.endswith("s") and word[:-1].isupper() else (word, "")
    if core.isupper() and 2 <= len(core) <= 5 and core.isalpha():
        if core in WORD_ACRONYMS:
            return core.capitalize() + plural
        return spell(core) + plural
    return word


def money(word: str) -> str | None:
    """"$5.20": "five dollars and twenty cents"; "$0.99": "ninety nine cents"; "$2.5M": "two point five
    million dollars"; "-$5": "minus five dollars"."""
    match = _MONEY.fullmatch(word)
    if match is None or not match["num"]:
        return None
    return ("minus " if match["sign"] else "") + amount(match["num"], CURRENCY[match["sym"]])


def amount(written: str, names: tuple[str, str, str, str]) -> str:
    """A written amount (digits, maybe a decimal part or a scale letter) in a currency's names."""
    one, many, hundredth, hundredths = names
    match = n.NUMBER.fullmatch(written)
    assert match is not None
    whole, frac = (match["int"] or "0").replace(",", ""), match["frac"]
    if match["scale"] or (frac is not None and len(frac) > 2):
        return f"{n.number(written)} {many}"
    unit = one if whole == "1" and frac is None else many
    if frac is None:
        return f"{n.cardinal(whole)} {unit}"
    cents = int((frac + "0")[:2])
    small = f"{n.cardinal(cents)} {hundredth if cents == 1 else hundredths}"
    if whole == "0":
        return small if cents else f"zero {many}"
    said = f"{n.cardinal(whole)} {one if whole == '1' else many}"
    return f"{said} and {small}" if cents else said


def time(word: str, ampm_follows: bool = False) -> str | None:
    """"10:30": "ten thirty", "10:05": "ten oh five", "9:00": "nine o'clock", "14:00": "fourteen hundred",
    "10:30pm": "ten thirty p m", "7am": "seven a m"; ``ampm_follows``: "am" or "pm" is the next word."""
    if (hour := _HOUR.fullmatch(word)) is not None and int(hour["h"]) <= 12:
        return f"{n.cardinal(hour['h'])} {_ampm(hour['ampm'])}"
    match = _TIME.fullmatch(word)
    if match is None or int(match["h"]) > 24 or int(match["m"]) > 59:
        return None
    h, m, clock = int(match["h"]), int(match["m"]), match["ampm"] is not None or ampm_follows
    if m == 0:
        said = n.cardinal(h) if clock else f"{n.cardinal(h)} o'clock" if 0 < h <= 12 and match["h"][0] != "0" \
            else f"{n.cardinal(h)} hundred"
    else:
        said = f"{n.cardinal(h)} {'oh ' if m < 10 else ''}{n.cardinal(m)}"
    if match["s"] is not None:
        said += f" and {n.cardinal(match['s'])} seconds"
    return said + (f" {_ampm(match['ampm'])}" if match["ampm"] else "")


def _ampm(written: str) -> str:
    return "a m" if written.lower().startswith("a") else "p m"


def date(word: str) -> str | None:
    """A date in numbers (the orders in the module docstring): "December second, twenty twenty six"."""
    if (iso := _ISO_DATE.fullmatch(word)) is not None:
        return _said_date(int(iso["a"]), int(iso["b"]), iso["y"])
    match = _DATE.fullmatch(word)
    if match is None:
        return None
    a, b = int(match["a"]), int(match["b"])
    day_first = (a > 12) if match["sep"] != "." else (b <= 12)
    month, day = (b, a) if day_first else (a, b)
    return _said_date(month, day, match["y"])


def _said_date(month: int, day: int, year: str) -> str | None:
    if not (1 <= month <= 12 and 1 <= day <= 31):
        return None
    name = list(dict.fromkeys(MONTHS.values()))[month - 1]
    said_year = n.year(year) if len(year) == 4 else ("oh " + n.cardinal(year[1]) if year[0] == "0"
                                                     else n.cardinal(year))
    return f"{name} {n.ordinal(day)}, {said_year}"


def phone(word: str) -> str | None:
    """"+1 415-555-0100" or "(415) 555-0100" joined: digit groups with a pause between ("four one five, five
    five five, oh one oh oh")."""
    match = _PHONE.fullmatch(word)
    if match is None:
        return None
    groups = [g for g in (match["area"], match["ex"] or match["ex7"], match["line"] or match["line7"]) if g]
    said = ", ".join(n.digits(g, zero="oh") for g in groups)
    return f"plus {n.cardinal(match['country'])}, {said}" if match["country"] else said


def web(word: str) -> str | None:
    """An e-mail or web address, its parts as words and its marks by name: "www.example.com": "w w w dot
    example dot com"."""
    if _EMAIL.fullmatch(word) is None and _URL.fullmatch(word) is None:
        return None
    out = []
    for part in re.findall(r"[A-Za-z]+|\d+|[^A-Za-z\d]", word.rstrip("/")):
        if part.isdigit():
            out.append(n.digits(part))
        elif part.isalpha():
            out.append(spell(part).lower() if part.lower() in ("www", "http", "https") or not
                       re.search(r"[aeiouy]", part, re.I) else part.lower())
        else:
            out.append(_LETTER_NAMES.get(part, ""))
    return " ".join(w for w in out if w)


def _range(word: str) -> str | None:
    """"1-5": "one to five", "$5-10": "five to ten dollars", "5-10%": "five to ten percent", "9am-5pm",
    "2020-2025": "twenty twenty to twenty twenty five"."""
    a, dash, b = word.partition("-")
    if not (a and b and (a[-1].isdigit() or a[-1].lower() in "m%")):
        return None
    if re.fullmatch(r"\d{4}", a) and re.fullmatch(r"\d{2}|\d{4}", b) and 1100 <= int(a) <= 2099:
        return f"{n.year(a)} to {n.year(b) if len(b) == 4 else n.cardinal(b)}"
    if a[0] in CURRENCY and b[0].isdigit():  # "$5-10": the currency said once, after the second amount
        left, right = n.number(a[1:]), form(a[0] + b)
    else:
        left, right = form(a), form(b)
    if left is None or right is None or not b[0].isdigit() and b[0] not in CURRENCY:
        return None
    return f"{left} to {right}"


def _joined_unit(word: str) -> str | None:
    """A number with its unit joined on: "5km", "20°C", "3.5GB", "2x"."""
    match = _NUMBER_UNIT.fullmatch(word)
    if match is None or not match["num"] or match["unit"] not in UNITS:
        return None
    singular, plural = UNITS[match["unit"]]
    return f"{n.number(match['num'])} {singular if n.is_one(match['num']) else plural}"


def _mixed(word: str) -> str | None:
    """Letters and digits in one word: "MP3": "M P three", "COVID-19": "Covid nineteen", "4K", "B2B"."""
    parts = re.findall(r"[^\W\d_]+|\d+", word)
    if len(parts) < 2 or not any(p.isdigit() for p in parts) or not any(p.isalpha() for p in parts):
        return None
    said = []
    for part in parts:
        if part.isdigit():
            said.append(n.cardinal(part) if len(part) <= 4 and not part.startswith("0") else n.digits(part, "oh"))
        else:
            said.append(spell(part) if part.isupper() and len(part) <= 3 and part not in WORD_ACRONYMS
                        else letters(part))
    return " ".join(said)


def form(word: str) -> str | None:
    """``word`` (no edge punctuation) said as whichever form it is, or None: a plain word, or a form not
    known here."""
    if word in _SPECIAL:
        return _SPECIAL[word]
    if not any(ch.isdigit() for ch in word):
        return web(word) if "." in word or "@" in word else None
    if re.fullmatch(r"\d+K", word):  # "4K": a resolution; "5k" (and "$5K") is five thousand
        return _mixed(word)
    for read in (money, n.number, time, date, phone):
        if (said := read(word)) is not None:
            return said
    if word.endswith("%") and (said := n.number(word[:-1])) is not None:
        return f"{said} percent"
    if word.endswith("+") and (said := n.number(word[:-1])) is not None:
        return f"{said} plus"
    if (match := _ORDINAL.fullmatch(word)) is not None:
        return n.ordinal(match["n"])
    if (match := _DECADE.fullmatch(word)) is not None:
        value = match["n"]
        said = n.year(value) if len(value) == 4 else n.cardinal(value)
        return re.sub(r"y$", "ie", said) + "s"
    if (match := _FRACTION.fullmatch(word)) is not None:
        return n.fraction(int(match["n"]), int(match["d"]))
    if (match := _BY.fullmatch(word)) is not None:
        return f"{n.cardinal(match['a'])} by {n.cardinal(match['b'])}"
    if re.fullmatch(r"\d+:\d+", word):  # a ratio or a score
        a, b = word.split(":")
        return f"{n.cardinal(a)} to {n.cardinal(b)}"
    if (match := re.fullmatch(r"#(\d+)", word)) is not None:
        return f"number {n.cardinal(match[1])}"
    for read in (web, _range, _joined_unit):
        if (said := read(word)) is not None:
            return said
    if re.fullmatch(r"[\d+\-*/=.,]+", word) and re.search(r"\d[+*/=]", word):  # "1+1=2"
        return " ".join(n.number(p) or _LETTER_NAMES.get(p, "times" if p == "*" else p)
                        for p in re.findall(r"\d+(?:\.\d+)?|[+\-*/=]", word))
    return _mixed(word)
