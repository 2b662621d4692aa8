"""English text read word by word, each word with the words around it: what `forms` cannot tell alone.

Context rules, as stated to users:
- "Dr." and "St." are titles (doctor, saint) before a capitalised name, and a road (drive, street) after a
  capitalised word or a number, or before a word that is not capitalised ("Dr. Smith lives on Elm St.": "Doctor Smith lives on Elm Street."); "ft." is feet after a number.
- A unit is read after a number, singular after exactly one ("1 km", "5 km": "one kilometer", "five kilometers");
  a letter that is also a word ("in", "s", "C") only when joined to the number ("5s", "20C").
- A four-digit number from 1100 to 2099 is a year after a month, a day of a month or a word such as "in", "since",
  "by"; before a plain lower-case word that is not a function word it is a count ("1500 people"); otherwise a year.
- An all-capital word of two to five letters is spelled ("CEO": "C E O") unless it is read as a word ("NASA"),
  or the words beside it are all capitals too (shouting: read as words).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

import lyre.text.en.forms as forms
import lyre.text.en.numbers as n
from lyre.text.en.tables import (
    ABBREVIATIONS,
    CODES,
    CURRENCY,
    JOINED_ONLY,
    MONTHS,
    PLACES,
    SCALE_WORDS,
    SYMBOLS,
    TITLES,
    UNITS,
    YEAR_CUES,
)

__all__ = ["joins", "may_continue", "read_words"]

_LEAD = "\"'([{¿¡"
_TRAIL = "\"')]}.,;:!?"
_TAG = re.compile(r"(<[a-z]+>)")
_INTEGER = re.compile(r"[-+]?(?:\d{1,3}(?:,\d{3})+|\d+)")
_AMOUNT = re.compile(r"[-+]?(?:\d{1,3}(?:,\d{3})+|\d+)?(?:\.\d+)?")
_DAY = re.compile(r"(?P<d>[1-9]|[12]\d|3[01])(?:st|nd|rd|th)?")
_MONEY_BARE = re.compile(r"-?[$£€¥₹₩](?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?")
_AMPM_WORDS = frozenset({"am", "pm", "a.m.", "p.m.", "a.m", "p.m"})
_DATE_CUES = frozenset({"on", "by", "until", "till", "from", "since", "before", "after", "due", "dated"})
_FUNCTION_WORDS = frozenset(
    "a an the and or but to of in on at by for with from as is was were are be been it its we they he she i you "
    "this that these those there then so if when while".split())


def _edges(word: str) -> tuple[str, str, str]:
    """``word`` as (leading punctuation, core, trailing punctuation)."""
    start, end = 0, len(word)
    while start < end and word[start] in _LEAD:
        start += 1
    while end > start and word[end - 1] in _TRAIL:
        end -= 1
    return word[:start], word[start:end], word[end:]


def _core(word: str | None) -> str:
    return _edges(word)[1] if word else ""


def _is_number(core: str) -> bool:
    return bool(core) and _AMOUNT.fullmatch(core) is not None and any(ch.isdigit() for ch in core)


def _is_capitalised(core: str) -> bool:
    return bool(core) and core[0].isupper()


def _unit(core: str, after: str) -> tuple[str, str] | None:
    """``core``'s unit names when it follows the number ``after`` (spaced)."""
    if not _is_number(after) or core in JOINED_ONLY:
        return None
    return UNITS.get(core)


def _month(core: str) -> str | None:
    return MONTHS.get(core.lower().rstrip("."))


def joins(left: str, right: str) -> bool:
    """Whether the words ``left`` and ``right`` (as written, side by side) are read as one: a cut between them
    would change how either is said."""
    a, b = _core(left), _core(right)
    if not a or not b:
        return False
    if re.fullmatch(r"\d{3}", a) and re.fullmatch(r"\d{3}-\d{4}", b):
        return True  # an area code and the number
    if forms.time(a) is not None:
        return b.lower() in _AMPM_WORDS
    if _is_number(a) or _MONEY_BARE.fullmatch(a):
        return (b in UNITS or b.lower() in _AMPM_WORDS or b.lower() in SCALE_WORDS or b in CODES
                or "/" in b or _month(b) is not None or b.lower() in TITLES or b.lower() + "." in PLACES)
    if a in CODES or _month(a) is not None:
        return b[0].isdigit()
    if (a + "." if left.rstrip(_TRAIL[:5]).endswith(".") else a).lower() in TITLES:
        return _is_capitalised(b)
    return a.lower() in ("no", "#") and b[0].isdigit()


def may_continue(word: str) -> bool:
    """Whether a word at the end of text so far may yet be read with a word to come (see `joins`)."""
    a = _core(word)
    return bool(a) and (_is_number(a) or bool(_MONEY_BARE.fullmatch(a)) or a in CODES or _month(a) is not None
                        or (a + ".").lower() in TITLES or a.lower() == "no" or bool(forms.time(a)))


def read_words(words: Sequence[str], fixed: Mapping[int, str] | None = None) -> list[str]:
    """What each of ``words`` (cleaned text split on whitespace) says, in order: one string per word (empty
    when it says nothing of its own, as "USD" in "USD 5"). ``fixed``: words whose reading is given (SSML)."""
    fixed = fixed or {}
    out: list[str] = []
    suffix: dict[int, str] = {}  # words said after a later word's own ("million" + " dollars")
    for i, word in enumerate(words):
        if i in fixed:
            out.append(fixed[i])
            continue
        prev = words[i - 1] if i else None
        after = words[i + 1] if i + 1 < len(words) else None
        said = _read(word, prev, after, words[i - 2] if i >= 2 else None, suffix, i)
        out.append(said + (" " + suffix.pop(i) if i in suffix else ""))
    return out


def _read(word: str, prev: str | None, after: str | None, before_prev: str | None,
          suffix: dict[int, str], i: int) -> str:
    if _TAG.search(word):  # an emotive tag stays as it is; what is joined to it is read alone
        return "".join(p if _TAG.fullmatch(p) else _read(p, None, None, None, {}, 0) if p else ""
                       for p in _TAG.split(word))
    lead, core, trail = _edges(word)
    if not core:
        return SYMBOLS.get(word, word) if word in "&+=@#%" else word
    if core[0].isdigit() and lead.endswith("'"):
        lead = lead[:-1]  # "'90s"
    a, b = _core(prev), _core(after)
    said, trail = _in_context(core, trail, a, b, _core(before_prev), suffix, i, prev)
    return lead + said + trail


def _in_context(core: str, trail: str, a: str, b: str, aa: str, suffix: dict[int, str], i: int,
                prev: str | None) -> tuple[str, str]:
    """``core``'s reading between the cores ``a`` (before it; ``aa`` before that) and ``b`` (after it), and
    the trailing punctuation to keep."""
    dotted = trail.startswith(".")
    key = (core + ".").lower() if dotted else core.lower()
    if key in TITLES or key in PLACES:
        place = key in PLACES and (_is_number(a) or (_is_capitalised(a) and prev is not None
                                                    and not prev.endswith(".")) or key not in TITLES
                                       or not _is_capitalised(b))
        if place and key == "ft." and not _is_number(a):
            place = False  # "Ft. Worth": a fort
        said = PLACES[key] if place else TITLES[key]
        keep_dot = place and (not b or _is_capitalised(b))
        return (said.capitalize() if core[0].isupper() else said), trail[0 if keep_dot else 1:]
    if key == "no." and b[:1].isdigit():
        return "number", trail[1:]
    if dotted and key not in ABBREVIATIONS and core.lower() in ABBREVIATIONS:
        key, dotted = core.lower(), False  # "9 am.": the full stop ends the sentence
    if key in ABBREVIATIONS:
        if key in ("am", "pm") and not (_is_number(a) or forms.time(a)) or key in ("no.", "nos."):
            return core, trail  # "I am", "No. I won't"
        end = dotted and (not b or _is_capitalised(b)) and key not in ("u.s.", "u.k.")
        return ABBREVIATIONS[key], trail[0 if end or not dotted else 1:]
    if (month := _month(core)) is not None and (_DAY.fullmatch(b) or _DAY.fullmatch(a)):
        return month, trail[1:] if dotted and core.lower() != "may" else trail
    if core in CODES and _is_number(b):
        return "", trail  # the amount after it says the currency
    if (units := _unit(core, a)) is not None:
        return units[0] if n.is_one(a) else units[1], trail
    if core in CODES and _is_number(a):
        return "", trail
    if core.lower() in SCALE_WORDS and _MONEY_BARE.fullmatch(a):
        return f"{core.lower()} {CURRENCY[a.lstrip('-')[0]][1]}", trail
    if core.isalpha() or core in SYMBOLS:
        ended = (prev or "").rstrip(_TRAIL[:5]).endswith((".", "!", "?"))
        return _word(core, "" if ended else a, "" if any(ch in ".!?" for ch in trail) else b), trail
    return _numeric(core, a, b, aa, suffix, i), trail


def _word(core: str, a: str, b: str) -> str:
    if core in SYMBOLS:
        return SYMBOLS[core]
    shouting = any(x.isalpha() and x.isupper() and len(x) > 1 for x in (a, b))
    return core if shouting else forms.letters(core)


def _numeric(core: str, a: str, b: str, aa: str, suffix: dict[int, str], i: int) -> str:
    """A word with digits or symbols, read with its neighbours: a code's amount, a year, a day, a time
    before "am", an amount before "million", a fraction after a whole number."""
    if b in ("AD", "BC", "BCE", "CE") and core.isdigit():
        return n.year(core) if len(core) == 4 or len(core) == 3 and core[1:] != "00" else n.cardinal(core)
    if b in CODES and _is_number(core):
        return forms.amount(core, CODES[b])
    if a in CODES and _is_number(core):
        return forms.amount(core, CODES[a])
    if _MONEY_BARE.fullmatch(core) and b.lower() in SCALE_WORDS:
        return n.number(core.replace("$", "").lstrip("£€¥₹₩")) or core  # the currency comes after the scale
    if b.lower() in _AMPM_WORDS and (said := forms.time(core, ampm_follows=True) or
                                     (n.cardinal(core) if core.isdigit() and int(core) <= 12 else None)):
        return said
    if (day := _DAY.fullmatch(core)) is not None:
        if _month(a) is not None:
            return n.ordinal(day["d"])
        if _month(b) is not None:
            return f"the {n.ordinal(day['d'])} of"
    if re.fullmatch(r"\d{4}", core) and 1100 <= int(core) <= 2099 and _is_year(a, b, aa):
        return n.year(core)
    if (fraction := re.fullmatch(r"(\d+)/(\d+)", core)) is not None:
        top, bottom = int(fraction[1]), int(fraction[2])
        if a.lower() in _DATE_CUES and 1 <= top <= 12 and 1 <= bottom <= 31:
            return f"{list(dict.fromkeys(MONTHS.values()))[top - 1]} {n.ordinal(bottom)}"
        if _INTEGER.fullmatch(a) and top < bottom:
            said = n.fraction(top, bottom)
            return "and " + ("a " + said[4:] if said.startswith("one ") else said)
    if re.fullmatch(r"\d{3}", core) and re.fullmatch(r"\d{3}-\d{4}", b):  # an area code: "(415) 555-0100"
        return n.digits(core, zero="oh")
    if (said := forms.form(core)) is not None:
        return said
    return _symbols(core)


def _is_year(a: str, b: str, aa: str) -> bool:
    if a.lower() in YEAR_CUES or _month(a) is not None or (_DAY.fullmatch(a) and _month(aa) is not None):
        return True
    if b in UNITS or b in CODES or b.lower() in SCALE_WORDS:
        return False
    return not (b.isalpha() and b.islower() and b not in _FUNCTION_WORDS)


def _symbols(core: str) -> str:
    """Letters joined by symbols: "R&D": "R and D", "#lyre": "hashtag lyre", "@lyre": "at lyre", "and/or"."""
    if re.fullmatch(r"[A-Za-z]+(?:&[A-Za-z]+)+", core):
        return " and ".join(forms.letters(p) if len(p) > 1 else p for p in core.split("&"))
    if re.fullmatch(r"#[A-Za-z]\w*", core):
        return "hashtag " + core[1:]
    if re.fullmatch(r"@\w+", core):
        return "at " + core[1:]
    if re.fullmatch(r"[a-z]+/[a-z]+", core):
        return "and or" if core == "and/or" else core.replace("/", " or ")
    if re.fullmatch(r"[A-Za-z]+/[A-Za-z]+", core):
        return " ".join(forms.letters(p) for p in core.split("/"))
    return core
