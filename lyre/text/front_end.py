"""The text front end: written text to what it says, by the rules of its language, between the API and the model.

    front = TextFront()
    said = front.read("It costs $5.20.", "en")   # Said: spoken "It costs five dollars and twenty cents."
    front.read("Hola 5", "es")                   # a language with no rules here: said as written
    front.fallbacks                              # texts whose reading failed and were said as written

A language's rules live in one package (`lyre.text.en`), chosen here by the language's primary subtag ("en-GB":
"en"). A language with none is said as written, as is everything when normalising is off. A reading that fails
(a bug in a rule) never fails the speech: the text is said as written, logged, and counted in ``fallbacks``.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping, Sequence
from types import ModuleType

from lyre.text import de, en, es, fr, hi, it, ko, zh
from lyre.text.said import Said

__all__ = ["LANGUAGES", "TextFront", "rules_for"]

log = logging.getLogger("lyre.text")

# A language's package: read_words, joins, may_continue, say_as (see lyre.text.en).
LANGUAGES: dict[str, ModuleType] = {"en": en, "de": de, "fr": fr, "es": es, "it": it, "zh": zh, "cmn": zh, "ko": ko,
                                    "hi": hi}
_LANGUAGE_TAG = re.compile(r"[A-Za-z]{2,3}(?:[-_][A-Za-z0-9]{1,8})*")


def rules_for(language: str | None) -> ModuleType | None:
    """The rules package for ``language`` (a BCP-47 tag such as "en", "en-US"; None: English), or None when
    lyre has none for it. ValueError for something that is not a language tag."""
    if language is None:
        return en
    if not _LANGUAGE_TAG.fullmatch(language):
        raise ValueError(f"language: {language!r} is not a language tag such as 'en' or 'en-US'")
    return LANGUAGES.get(language.split("-")[0].split("_")[0].lower())


class TextFront:
    """One pipeline's reader: what every stream it serves reads its text with, and the count of failures."""

    def __init__(self, normalize: bool = True) -> None:
        """``normalize``: False turns reading off for every request (``--no-normalize``)."""
        self.normalize = normalize
        self.fallbacks = 0  # texts said as written because their reading failed
        self.read_texts = 0

    def read(self, text: str, language: str | None = None, normalize: bool = True) -> Said:
        """``text`` (cleaned, whitespace-separated words) with what each word says. ``normalize``: the
        request's own switch (off here or there: said as written)."""
        return self.read_words(text.split(), language, normalize)

    def read_words(self, words: Sequence[str], language: str | None = None, normalize: bool = True,
                   fixed: Mapping[int, str] | None = None) -> Said:
        """`read` for text already split into words; ``fixed``: words whose reading is given (SSML's say-as
        and sub, whose written words may hold spaces), read so even when normalising is off."""
        rules = rules_for(language) if self.normalize and normalize else None
        self.read_texts += 1
        if rules is None:
            return Said(tuple((w, (fixed or {}).get(i, w)) for i, w in enumerate(words)))
        try:
            spoken = rules.read_words(words, fixed)
            assert len(spoken) == len(words)
        except Exception:  # a rule's bug: this text is said as written and the request goes on
            self.fallbacks += 1
            log.exception("reading %r failed; it is said as written", " ".join(words)[:200])
            return Said(tuple((w, (fixed or {}).get(i, w)) for i, w in enumerate(words)))
        return Said(tuple(zip(words, spoken)))

    @staticmethod
    def rules(language: str | None = None) -> ModuleType | None:
        """The rules package for ``language`` (`rules_for`)."""
        return rules_for(language)

    @staticmethod
    def joins(left: str, right: str, language: str | None = None) -> bool:
        """Whether two written words side by side are read as one (a segment must not end between them)."""
        rules = rules_for(language)
        return rules is not None and rules.joins(left, right)

    @staticmethod
    def may_continue(word: str, language: str | None = None) -> bool:
        """Whether the last word of text so far may yet be read with words still to come."""
        rules = rules_for(language)
        return rules is not None and rules.may_continue(word)
