"""English pronunciations in ARPAbet (the phone set of pocketsphinx's acoustic model), for forced alignment.

    pronouncer = Pronouncer(decoder.lookup_word)
    pronouncer.pronounce("read")     # ["R EH D", "R IY D"]: the dictionary's, alternatives too
    pronouncer.pronounce("pipecat")  # ["P IH P EH K AH T"]: a word the dictionary lacks, from a G2P

Known words come from CMUdict (the copy pocketsphinx ships); any other word from
gruut's English grapheme-to-phoneme model (a CRF, shipped in gruut-lang-en, loaded
on the first word that needs it), its IPA mapped to ARPAbet.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

__all__ = ["MAX_PRONUNCIATIONS", "Pronouncer"]

MAX_PRONUNCIATIONS = 4  # per word: alternatives past these are rare and widen the search for nothing

# gruut's English IPA to ARPAbet; stress and length marks are dropped first.
_IPA_TO_ARPABET = {
    "ɑ": "AA", "ɒ": "AA", "a": "AA", "æ": "AE", "ʌ": "AH", "ə": "AH", "ɐ": "AH", "ɔ": "AO", "aʊ": "AW",
    "aɪ": "AY", "ɛ": "EH", "e": "EH", "ɚ": "ER", "ɝ": "ER", "ɜ": "ER", "eɪ": "EY", "ɪ": "IH", "ᵻ": "IH",
    "i": "IY", "oʊ": "OW", "o": "OW", "ɔɪ": "OY", "ʊ": "UH", "u": "UW", "b": "B", "tʃ": "CH", "d": "D",
    "ð": "DH", "f": "F", "ɡ": "G", "g": "G", "h": "HH", "dʒ": "JH", "k": "K", "l": "L", "m": "M", "n": "N",
    "ŋ": "NG", "p": "P", "ɹ": "R", "r": "R", "s": "S", "ʃ": "SH", "t": "T", "ɾ": "T", "ʔ": "T", "θ": "TH",
    "v": "V", "w": "W", "j": "Y", "z": "Z", "ʒ": "ZH", "l̩": "AH L", "n̩": "AH N", "m̩": "AH M", "ɫ": "L",
}
_MARKS = re.compile("[ˈˌːˑ]")


class Pronouncer:
    """Pronunciations of lower-case English words; see the module docstring. Not thread-safe: one
    aligner's worker uses it."""

    def __init__(self, lookup: Callable[[str], str | None]) -> None:
        """``lookup``: the dictionary (pocketsphinx's ``Decoder.lookup_word``: ``word`` or ``word(2)`` to
        its phones, or None)."""
        self._lookup = lookup
        self._g2p: Any = None
        self.guessed = 0  # words the dictionary lacked

    def pronounce(self, word: str) -> list[str]:
        """``word``'s pronunciations, the dictionary's first; [] for a word with no sound (no letters)."""
        found = []
        for n in range(1, MAX_PRONUNCIATIONS + 1):
            phones = self._lookup(word if n == 1 else f"{word}({n})")
            if phones is None:
                break
            found.append(phones)
        if found or not any(ch.isalpha() for ch in word):
            return found
        self.guessed += 1
        guess = self._guess(word)
        return [guess] if guess else []

    def _guess(self, word: str) -> str:
        if self._g2p is None:
            from gruut.g2p import GraphemesToPhonemes
            from gruut_lang_en import get_lang_dir

            self._g2p = GraphemesToPhonemes(get_lang_dir() / "g2p" / "model.crf")
        phones = []
        for ipa in self._g2p(word):
            arpabet = _IPA_TO_ARPABET.get(_MARKS.sub("", ipa))
            if arpabet is not None:  # a sign the acoustic model has no phone for is left out
                phones.append(arpabet)
        return " ".join(phones)
