"""The reader Mandarin, Korean and Hindi share: numbers read where they stand inside a word.

Chinese is written without spaces, and Korean and Hindi join counters and particles to a number ("2024년에",
"5,000원"), so a word is not a unit here: a language's `InlineReader` finds each number (with its sign,
currency and what follows it) inside the word and puts its words in its place, leaving every other
character as written. Full-width digits ("２０２４") and Devanagari digits ("२०२४") are read as digits.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence

__all__ = ["InlineReader", "read_number"]

_DIGITS = str.maketrans({**{chr(0xFF10 + i): str(i) for i in range(10)}, **{chr(0x0966 + i): str(i) for i in range(10)},
                         "％": "%", "￥": "¥", "＄": "$", "－": "-"})
_WIDE_COLON = re.compile(r"(?<=[0-9])[：:](?=[0-9])")


def read_number(written: str, cardinal: Callable[[int], str], digits: Callable[[str], str], point: str,
                longest: int = 10) -> str:
    """A written number ("1,000", "3.14", "007") in words: ``cardinal`` for its whole part, digit by digit
    (``digits``) where it starts with 0 or is too long to be a count (``longest`` digits and no grouping, or
    over 15), and its decimals digit by digit after ``point`` (the language's word or mark for it)."""
    whole, _, frac = written.replace(",", "").partition(".")
    if len(whole) >= longest and "," not in written or len(whole) > 15 or len(whole) > 1 and whole.startswith("0"):
        said = digits(whole)
    else:
        said = cardinal(int(whole))
    return said + (point + digits(frac) if frac else "")


class InlineReader:
    """A language whose numbers are read inside their words; a subclass gives `form` and `say`."""

    form: re.Pattern[str] = re.compile(r"(?!)")  # one written number and what is read with it
    symbols = "¥$€£₹₩"
    followers: frozenset[str] = frozenset()  # written words read with a number before them (units, currencies)

    def say(self, match: re.Match[str], before: str, after: str) -> str:
        """What ``match`` (of `form`) says; ``before``/``after``: the words beside this one."""
        raise NotImplementedError

    def digits(self, text: str) -> str:
        raise NotImplementedError

    def cardinal(self, value: int) -> str:
        raise NotImplementedError

    def word(self, word: str, before: str = "", after: str = "") -> str:
        """``word`` with each number in it read."""
        text = word.translate(_DIGITS)
        if not any("0" <= ch <= "9" for ch in text):
            return word
        text = _WIDE_COLON.sub(":", text)
        return self.form.sub(lambda m: self.say(m, before, after), text)

    def read_words(self, words: Sequence[str], fixed: Mapping[int, str] | None = None) -> list[str]:
        """What each of ``words`` says, one string per word."""
        fixed = fixed or {}
        return [fixed[i] if i in fixed else self.word(w, words[i - 1] if i else "",
                                                      words[i + 1] if i + 1 < len(words) else "")
                for i, w in enumerate(words)]

    def joins(self, left: str, right: str) -> bool:
        """Whether ``left`` and ``right`` side by side are read as one: a number and its unit or currency."""
        a, b = left.translate(_DIGITS), right.translate(_DIGITS)
        if not a or not b:
            return False
        return (a[-1].isdigit() and (b in self.followers or b[0] in self.symbols or b[0] == "%")
                or a[-1] in self.symbols and b[0].isdigit())

    def may_continue(self, word: str) -> bool:
        """Whether a last word may yet be read with a word to come (see `joins`)."""
        a = word.translate(_DIGITS)
        return bool(a) and (a[-1].isdigit() or a[-1] in self.symbols)

    def say_as(self, kind: str, text: str, format: str | None = None) -> str | None:
        """SSML's ``<say-as>``: cardinal, digits, telephone and characters; None for any other kind."""
        text = text.strip().translate(_DIGITS)
        if kind == "characters":
            return " ".join(self.digits(c) if c.isdigit() else c for c in text if not c.isspace())
        if kind in ("digits", "telephone"):
            groups = [g for g in re.split(r"[\s\-./()+]+", text) if g]
            ok = bool(groups) and all(g.isascii() and g.isdigit() for g in groups)
            return " ".join(self.digits(g) for g in groups) if ok else None
        if kind == "cardinal":
            plain = text.replace(",", "")
            return self.cardinal(int(plain)) if plain.isascii() and plain.isdigit() and len(plain) <= 15 else None
        return None
