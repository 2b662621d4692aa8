"""The reader German, French, Spanish and Italian share: the same written forms, each language's words.

    class German(Reader): ...          # lyre.text.de: its tables and how it says a count, a date, a time
    German().read_words(["am", "3.", "Mai"])   # ["am", "dritten", "Mai"]

The four write numbers alike ("1.000", "5,20", "-5", "5 %"), dates day first, times as "14:30", and put a
currency before or after an amount; what differs is the words, their gender, and a few forms of one language
("3." an ordinal in German, "14h30" and "1 000" in French, "1.º" in Spanish). A `Reader` holds the forms; a
language's subclass gives its tables and overrides the methods that say a count, an ordinal, a date, a time
and an amount of money. Number words come from num2words (LGPL-2.1, used unmodified as a library).

Rules, as stated to users:
- A full stop between groups of three digits groups thousands ("1.000" is a thousand); any other full stop or
  comma in a number is the decimal mark ("5,20", "3.5"). Leading zeros make a code, read digit by digit.
- A date in numbers is day first ("03.05.2024", "03/05/2024"; "2024-05-03" year first).
- A word of digits says the whole of a number written with spaces between its groups ("1 000"): the
  groups before it say nothing of their own, as a currency symbol beside an amount says nothing of its own.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

__all__ = ["Currency", "Reader", "Unit"]

_LEAD = "\"'([{¿¡«‹「『（【"
_TRAIL = "\"')]}.,;:!?»›」』）】。，！？；："
# A number: thousands grouped by full stops (then a comma is the decimal mark), or not grouped (either mark).
_NUMBER = re.compile(r"(?P<sign>[-+]?)(?:(?P<grouped>\d{1,3}(?:\.\d{3})+)(?:,(?P<gfrac>\d+))?"
                     r"|(?P<int>\d+)(?:[,.](?P<frac>\d+))?)")
_DATE = re.compile(r"(?P<d>\d{1,2})(?P<sep>[./-])(?P<m>\d{1,2})(?P=sep)(?P<y>\d{4}|\d{2})")
_ISO_DATE = re.compile(r"(?P<y>\d{4})-(?P<m>\d{1,2})-(?P<d>\d{1,2})")
_TIME = re.compile(r"(?P<h>\d{1,2}):(?P<m>\d{2})")
_SYMBOLS = frozenset("€$£")
_MAX_COUNT = 10**15  # beyond this a number is an id, read digit by digit


@dataclass(frozen=True)
class Currency:
    """A currency's names: one and many of the unit and of its hundredth, and the unit's gender ("m", "f")."""

    one: str
    many: str
    small_one: str
    small_many: str
    gender: str = "m"


@dataclass(frozen=True)
class Unit:
    """A unit's names after one and after more, and its gender ("m", "f", "n")."""

    one: str
    many: str
    gender: str = "m"


@functools.lru_cache(maxsize=4096)
def words(value: int, lang: str, to: str) -> str:
    """num2words' words for ``value`` (imported on first use: importing lyre.text loads nothing)."""
    from num2words import num2words

    return num2words(value, lang=lang, to=to)


def edges(word: str) -> tuple[str, str, str]:
    """``word`` as (leading punctuation, core, trailing punctuation)."""
    start, end = 0, len(word)
    while start < end and word[start] in _LEAD:
        start += 1
    while end > start and word[end - 1] in _TRAIL:
        end -= 1
    return word[:start], word[start:end].replace("\u2212", "-"), word[end:]


class Reader:
    """Written words to spoken ones by the forms the four languages share; a subclass gives the words."""

    lang = ""  # num2words' language
    minus = point = percent = ""
    digit_by_digit = False  # decimals digit by digit (German) or as a number ("cinq virgule vingt")
    space_groups = False  # "1 000": groups of three digits after a space belong to the number before
    currencies: Mapping[str, Currency] = {}
    units: Mapping[str, Unit] = {}
    months: tuple[str, ...] = ()  # January to December, as said
    month_words: Mapping[str, int] = {}  # written month names and short forms (lower case) -> 1..12
    abbreviations: Mapping[str, str] = {}  # lower case, with their dots ("z. b." for two words)
    titles: frozenset[str] = frozenset()  # abbreviations said before a name: their dot never ends a sentence
    ordinal_form: re.Pattern[str] = re.compile(r"(?!)")  # a written ordinal: groups "n" and "suffix"
    joiners: Mapping[str, str] = {}  # "&" and the like

    # ---- the words a subclass may change

    def cardinal(self, value: int) -> str:
        if abs(value) >= _MAX_COUNT:
            return (self.minus + " " if value < 0 else "") + self.digits(str(abs(value)))
        return (self.minus + " " if value < 0 else "") + words(abs(value), self.lang, "cardinal")

    def count(self, value: int, gender: str) -> str:
        """A count before a noun of ``gender`` ("ein Kilometer", "une heure")."""
        return self.cardinal(value)

    def ordinal(self, value: int, form: str = "m") -> str:
        return words(value, self.lang, "ordinal") if value < _MAX_COUNT else self.digits(str(value))

    def year(self, value: int) -> str:
        return self.cardinal(value)

    def day(self, value: int, before: str) -> str:
        """The day of a date, said before its month; ``before``: the word before the day."""
        return self.cardinal(value)

    def date(self, day: int, month: int, year: str | None, before: str) -> str:
        said = f"{self.day(day, before)} {self.months[month - 1]}"
        return said + (f" {self.year_of(year)}" if year else "")

    def time(self, hours: int, minutes: int) -> str:
        return f"{self.cardinal(hours)} {self.cardinal(minutes)}" if minutes else self.cardinal(hours)

    def money(self, currency: Currency, whole: int, cents: int | None) -> str:
        raise NotImplementedError

    def money_joined(self, currency: Currency, whole: int, cents: int | None, scale: re.Pattern[str], of: str,
                     joined: str) -> str:
        """Spanish's and Italian's amounts: "cinco euros con veinte céntimos", "un millón de euros" (``of``
        after a ``scale`` word), the cents after ``joined``, or the cents alone."""
        small = f"{self.count(cents or 0, 'm')} {currency.small_one if cents == 1 else currency.small_many}"
        if whole == 0 and cents:
            return small
        said = self.count(whole, currency.gender)
        name = currency.one if whole == 1 else currency.many
        said += f" {of} {name}" if scale.search(said) else f" {name}"
        return f"{said} {joined} {small}" if cents else said

    def is_year(self, a: str, aa: str, b: str) -> bool:
        """Whether a plain number from 1100 to 2099 between ``a`` (``aa`` before it) and ``b`` is a year."""
        return self.month(a) is not None

    # ---- shared forms

    def digits(self, text: str) -> str:
        return " ".join(self._digit_names[int(d)] for d in text if d.isdecimal())

    @functools.cached_property
    def _digit_names(self) -> tuple[str, ...]:
        return tuple(self.cardinal(d) for d in range(10))

    def month(self, core: str) -> int | None:
        return self.month_words.get(core.lower().rstrip("."))

    def year_of(self, written: str) -> str:
        return self.year(int(written)) if len(written) == 4 else self.cardinal(int(written))

    def number(self, core: str) -> str | None:
        """A written number as words ("-1.000,5"); None when ``core`` is not one."""
        match = _NUMBER.fullmatch(core)
        if match is None:
            return None
        whole, frac = (match["grouped"] or match["int"]).replace(".", ""), match["gfrac"] or match["frac"]
        sign = {"-": self.minus + " ", "+": "plus "}.get(match["sign"], "")
        if frac is None and len(whole) > 1 and whole.startswith("0") or len(whole) > 15:
            return sign + self.digits(whole)
        said = self.cardinal(int(whole))
        if frac is not None:
            said += f" {self.point} {self.fraction(frac)}"
        return sign + said

    def fraction(self, frac: str) -> str:
        """The digits after the decimal mark: one by one, or leading zeros then the rest as a number."""
        if self.digit_by_digit or len(frac) > 3:
            return self.digits(frac)
        rest = frac.lstrip("0")
        return " ".join([self.cardinal(0)] * (len(frac) - len(rest)) + ([self.cardinal(int(rest))] if rest else []))

    def amount(self, core: str) -> tuple[int, int | None] | None:
        """A written amount of money as (whole, cents), or None when it is not one with at most two decimals."""
        match = _NUMBER.fullmatch(core)
        if match is None or match["sign"]:
            return None
        whole, frac = (match["grouped"] or match["int"]).replace(".", ""), match["gfrac"] or match["frac"]
        if len(whole) > 15 or frac is not None and len(frac) > 2:
            return None
        return int(whole), None if frac is None else int((frac + "0")[:2])

    def said_money(self, symbol: str, core: str) -> str | None:
        sign = core.startswith("-")
        amount = self.amount(core.lstrip("-"))
        if amount is None:
            return None
        return (self.minus + " " if sign else "") + self.money(self.currencies[symbol], *amount)

    def measured(self, core: str, unit: Unit) -> str | None:
        """A number and the unit after it: "ein Kilometer", "5,5 km"."""
        match = _NUMBER.fullmatch(core)
        if match is None:
            return None
        if match["gfrac"] is None and match["frac"] is None and len(core.lstrip("+-").replace(".", "")) <= 15:
            value = int(core.replace(".", ""))
            return f"{self.count(value, unit.gender)} {unit.one if abs(value) == 1 else unit.many}"
        return f"{self.number(core)} {unit.many}"

    # ---- the reader

    def read_words(self, words: Sequence[str], fixed: Mapping[int, str] | None = None) -> list[str]:
        """What each of ``words`` says: one string per word, "" where a word says nothing of its own."""
        fixed = fixed or {}
        parts = [edges(w) for w in words]
        cores = [c for _, c, _ in parts]
        out = list(words)
        i = 0
        while i < len(words):
            if i in fixed:
                out[i] = fixed[i]
                i += 1
                continue
            last = self._span(words, i, fixed)
            if last > i:  # several words read as one: the last says it, the others nothing
                out[i:last] = [""] * (last - i)
                after = cores[last + 1] if last + 1 < len(cores) else ""
                if re.fullmatch(r"-?\d{1,3}", cores[i]):
                    out[last] = self._word(parts[i][0], "".join(cores[i:last + 1]), parts[last][2], cores, i, last)
                else:
                    out[last] = self._abbreviation(words[i:last + 1], last + 1 < len(words), after)
            elif self._said_by_neighbour(parts[i][1], cores[i - 1] if i else "", cores[i + 1:i + 2]):
                out[i] = ""  # its punctuation goes to the amount it names
                if i and i - 1 not in fixed and out[i - 1]:
                    out[i - 1] += parts[i][2]
                else:
                    out[i] = parts[i][0] + parts[i][2]
            else:
                out[i] = self._word(*parts[i], cores, i, i)
            i = last + 1
        return out

    def _span(self, words: Sequence[str], i: int, fixed: Mapping[int, str]) -> int:
        """The index of the last word read together with word ``i`` (``i`` itself when it is read alone)."""
        core = edges(words[i])[1]
        if self.space_groups and re.fullmatch(r"-?\d{1,3}", core) and not edges(words[i])[2]:
            last = i
            while (last + 1 < len(words) and last + 1 not in fixed and re.fullmatch(r"\d{3}(?:,\d+)?",
                   edges(words[last + 1])[1]) and not edges(words[last + 1])[0] and not edges(words[last])[2]):
                last += 1
            if last > i:
                return last
        for k in (3, 2):
            if i + k <= len(words) and not any(j in fixed for j in range(i, i + k)) \
                    and self._abbreviation_key(" ".join(words[i:i + k])) is not None:
                return i + k - 1
        return i

    def _abbreviation_key(self, text: str) -> tuple[str, str, str] | None:
        """(lead, key in ``abbreviations``, what follows it) for ``text`` that is one, else None."""
        lead, core, trail = edges(text)
        candidate = core + trail
        for end in range(len(candidate), len(core) - 1, -1):
            key = candidate[:end].lower()
            rest = candidate[end:]
            if key in self.abbreviations and (key.endswith(".") or end == len(core)) \
                    and not any(ch.isalnum() for ch in rest):
                return lead, key, rest
        return None

    def _abbreviation(self, words: Sequence[str], more: bool, after: str = "") -> str:
        found = self._abbreviation_key(" ".join(words))
        if found is None:
            return " ".join(words)
        lead, key, rest = found
        ends = key.endswith(".") and key not in self.titles and self._ends_sentence(more, after)
        return lead + self.abbreviations[key] + ("." if ends and not rest.startswith(".") else "") + rest

    def _ends_sentence(self, more: bool, after: str) -> bool:
        """Whether an abbreviation's dot also ends the sentence: at the end of the text, or before a capital."""
        return not more or after[:1].isupper()

    def _word(self, lead: str, core: str, trail: str, cores: Sequence[str], i: int, last: int) -> str:
        """Word ``i`` (to ``last`` when several words make one number) read with its neighbours."""
        a = cores[i - 1] if i else ""
        aa = cores[i - 2] if i >= 2 else ""
        b = cores[last + 1] if last + 1 < len(cores) else ""
        bb = cores[last + 2] if last + 2 < len(cores) else ""
        if not core:
            return lead + trail
        if not any(ch.isdigit() for ch in core):
            return self._plain(lead + core + trail, core, a, b, last + 1 < len(cores))
        said, trail = self._numeric(core, trail, a, aa, b, bb)
        return lead + said + trail

    def _said_by_neighbour(self, core: str, a: str, after: Sequence[str]) -> bool:
        """Whether a unit or currency symbol is said by the amount beside it."""
        return (core in self.units or core in _SYMBOLS) and self._is_number(a) or \
            core in _SYMBOLS and bool(after) and self._is_number(after[0])

    def _plain(self, word: str, core: str, a: str, b: str, more: bool) -> str:
        if core == "%" and self._is_number(a):
            return word.replace("%", self.percent, 1)
        if self._abbreviation_key(word) is not None:
            return self._abbreviation([word], more, b)
        if core in self.joiners:
            return self.joiners[core]
        return word

    def _is_number(self, core: str) -> bool:
        return bool(core) and _NUMBER.fullmatch(core) is not None or bool(re.fullmatch(r"\d{1,3}(?: \d{3})+", core))

    def _numeric(self, core: str, trail: str, a: str, aa: str, b: str, bb: str) -> tuple[str, str]:
        """A word with digits: money, a percentage, a measure, a time, a date, an ordinal, a number."""
        if (said := self._form(core, trail, a, aa, b, bb)) is not None:
            return said
        if core[0] in _SYMBOLS and (said := self.said_money(core[0], core[1:])) is not None:
            return said, trail
        if core.startswith("-") and core[1:2] in _SYMBOLS and (said := self.said_money(core[1], "-" + core[2:])):
            return said, trail
        if core[-1] in _SYMBOLS and (said := self.said_money(core[-1], core[:-1])) is not None:
            return said, trail
        if core.endswith("%") and (said := self.number(core[:-1])) is not None:
            return f"{said} {self.percent}", trail
        if (unit := re.fullmatch(r"(?P<n>[-+]?[\d.,]*\d)(?P<u>°C|°|[A-Za-z/]+)", core)) is not None \
                and unit["u"] in self.units and (said := self.measured(unit["n"], self.units[unit["u"]])):
            return said, trail
        if (time := _TIME.fullmatch(core)) is not None and int(time["h"]) <= 24 and int(time["m"]) < 60:
            return self.time(int(time["h"]), int(time["m"])), trail
        if (date := _DATE.fullmatch(core) or _ISO_DATE.fullmatch(core)) is not None \
                and 1 <= int(date["m"]) <= 12 and 1 <= int(date["d"]) <= 31:
            return self.date(int(date["d"]), int(date["m"]), date["y"], a), trail
        if (ordinal := self.ordinal_form.fullmatch(core)) is not None and len(ordinal["n"]) <= 15:
            return self.said_ordinal(int(ordinal["n"]), ordinal["suffix"]), trail
        if _NUMBER.fullmatch(core) is not None:
            return self._in_context(core, a, aa, b, bb), trail
        # digits among letters ("A4", "COVID-19"): each run of digits as a number
        return re.sub(r"\d+", lambda m: f" {self.number(m[0])} ", core).strip().replace("  ", " "), trail

    def _form(self, core: str, trail: str, a: str, aa: str, b: str, bb: str) -> tuple[str, str] | None:
        """A language's own forms, tried first (German "3.", French "14h30"); None: none of them."""
        return None

    def said_ordinal(self, value: int, suffix: str) -> str:
        return self.ordinal(value)

    def _in_context(self, core: str, a: str, aa: str, b: str, bb: str) -> str:
        """A plain number: an amount beside a currency, a measure, a day before its month, a year."""
        for symbol in (b, a if not self._is_number(aa) else ""):
            if symbol in _SYMBOLS:
                return self.said_money(symbol, core) or f"{self.number(core) or core} {self.currencies[symbol].many}"
        if b in self.units and (said := self.measured(core, self.units[b])) is not None:
            return said
        plain = core.isdecimal() and len(core) <= 4 and not core.startswith("0")
        if plain and 1 <= int(core) <= 31 and (self.month(b) is not None or b == "de" and self.month(bb)):
            return self.day(int(core), a)
        if plain and 1100 <= int(core) <= 2099 and self.is_year(a, aa, b):
            return self.year(int(core))
        return self.number(core) or core

    # ---- the seam's other functions

    def joins(self, left: str, right: str) -> bool:
        """Whether ``left`` and ``right`` side by side are read as one (a segment must not end between them)."""
        (_, a, trail), b = edges(left), edges(right)[1]
        if not a or not b:
            return False
        if self._abbreviation_key(f"{left} {right}") is not None:
            return True
        if self._is_number(a) or a[-1].isdigit():
            return (b in self.units or b in _SYMBOLS or b == "%" or self.month(b) is not None
                    or self.space_groups and re.fullmatch(r"\d{3}", b) is not None and not trail)
        if a in _SYMBOLS or self.month(a) is not None:
            return b[0].isdigit()
        return False

    def may_continue(self, word: str) -> bool:
        """Whether a last word may yet be read with a word to come (see `joins`)."""
        _, a, trail = edges(word)
        return bool(a) and (a[-1].isdigit() or a in _SYMBOLS or self.month(a) is not None
                            or any(k.startswith((a + trail).lower() + " ") for k in self.abbreviations))

    def say_as(self, kind: str, text: str, format: str | None = None) -> str | None:
        """SSML's ``<say-as>``: ``text`` read as ``kind``, or None when it is not one."""
        text = text.strip()
        if kind == "characters":
            return " ".join(self.digits(c) if c.isdecimal() else c.upper() for c in text if not c.isspace())
        if kind in ("digits", "telephone"):
            groups = [g for g in re.split(r"[\s\-./()]+", text) if g]
            if not groups or not all(g.lstrip("+").isdecimal() for g in groups):
                return None
            return ", ".join(self.digits(g) for g in groups)
        if kind == "cardinal":
            return self.number(text.replace(" ", ""))
        if kind == "ordinal":
            digits = re.sub(r"\D+$", "", text).replace(".", "")
            return self.ordinal(int(digits)) if digits.isdecimal() and len(digits) <= 15 else None
        if kind == "time":
            match = re.fullmatch(r"(\d{1,2})[:h.](\d{2})", text)
            ok = match is not None and int(match[1]) <= 24 and int(match[2]) < 60
            return self.time(int(match[1]), int(match[2])) if ok and match else None
        if kind == "date":
            parts = [p for p in re.split(r"[./\-\s]+", text) if p]
            order = (format or "dmy").lower()
            numbers = all(p.isdecimal() and len(p) <= 4 for p in parts)
            if len(parts) != 3 or sorted(order) != ["d", "m", "y"] or not numbers:
                return None
            by = dict(zip(order, parts))
            if not (1 <= int(by["m"]) <= 12 and 1 <= int(by["d"]) <= 31 and len(by["y"]) <= 4):
                return None
            return self.date(int(by["d"]), int(by["m"]), by["y"], "")
        return None
