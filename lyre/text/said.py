"""Text as written beside what it says: the model is given the spoken words, word times keep the written ones.

    said = Said((("It", "It"), ("costs", "costs"), ("$5.20.", "five dollars and twenty cents.")))
    said.spoken        # "It costs five dollars and twenty cents."
    said.timed()       # [("It", ("It",)), ("costs", ("costs",)), ("$5.20.", ("five", ..., "cents."))]
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["Pause", "Said"]

_TAG = re.compile(r"<[a-z]+>")


@dataclass(frozen=True)
class Pause:
    """Silence of ``ms`` milliseconds in the audio at this point (SSML's ``<break>``)."""

    ms: int


@dataclass(frozen=True)
class Said:
    """A text's written words (split on whitespace), each with what it says ("" where it says nothing of its own,
    as "USD" in "USD 5", whose amount says the currency)."""

    words: tuple[tuple[str, str], ...]

    @classmethod
    def as_written(cls, text: str) -> Said:
        """``text`` said as it is written (no normalisation)."""
        return cls(tuple((w, w) for w in text.split()))

    @property
    def written(self) -> str:
        return " ".join(w for w, _ in self.words)

    @property
    def spoken(self) -> str:
        return " ".join(s for _, s in self.words if s)

    @property
    def changed(self) -> bool:
        """Whether any word says something other than itself."""
        return any(w != s for w, s in self.words)

    def timed(self) -> list[tuple[str, tuple[str, ...]]]:
        """The written words as word times give them back, each with the spoken words that say it.

        As `lyre.stt.words.written_words` groups them: emotion tags left out, a piece with no letter or digit
        (a dash, "&") joined to the word before it (at the start, the one after); and a word that says nothing of
        its own joined to the word after it ("USD 5" is one timed word).
        """
        groups: list[tuple[list[str], list[str]]] = []
        carry: tuple[list[str], list[str]] = ([], [])
        for written, spoken in self.words:
            text = _TAG.sub(" ", written).split()
            said = [w for w in _TAG.sub(" ", spoken).split() if any(ch.isalnum() for ch in w)]
            if not text:
                continue
            if not any(ch.isalnum() for ch in written) and groups and not carry[0]:
                groups[-1][0].extend(text)
                groups[-1][1].extend(said)
            elif not said or not any(ch.isalnum() for ch in written):
                carry[0].extend(text)
                carry[1].extend(said)
            else:
                groups.append((carry[0] + text, carry[1] + said))
                carry = ([], [])
        if carry[0]:
            if groups:
                groups[-1][0].extend(carry[0])
                groups[-1][1].extend(carry[1])
            elif carry[1]:
                groups.append(carry)
        return [(" ".join(w), tuple(s)) for w, s in groups if s]
