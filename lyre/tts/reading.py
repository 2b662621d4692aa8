"""How a speech stream reads its text: normalised or not, in which language, plain or SSML.

    options = TextOptions(language="en", ssml=True)
    items, warnings = ssml_items(document, front, options, max_chars=300)   # Said blocks and Pauses

A plain stream's segments are read one at a time as they are spoken (`TextFront.read`); an SSML document is
read whole, before any work, into blocks already read (say-as and sub fixed), cut to segment size, and pauses.
"""

from __future__ import annotations

from dataclasses import dataclass

from lyre.text.front_end import TextFront, rules_for
from lyre.text.said import Pause, Said
from lyre.text.ssml import Boundary, Fixed, Text, is_ssml, parse_ssml
from lyre.tts.budget import chars_for_script
from lyre.tts.intake import TextIntake
from lyre.tts.text import TextError, clean

__all__ = ["SsmlIntake", "TextFront", "TextOptions", "split_said", "ssml_items"]

_SENTENCE_END = (".", "!", "?", '."', '!"', '?"')


@dataclass(frozen=True)
class TextOptions:
    """How one request's text is read: ``normalize`` (numbers, amounts, dates... as words), ``language``
    (a BCP-47 tag choosing the rules; None: English), ``ssml`` (the text is an SSML document)."""

    normalize: bool = True
    language: str | None = None
    ssml: bool = False

    def __post_init__(self) -> None:
        rules_for(self.language)  # ValueError naming a malformed language tag

    @classmethod
    def of(cls, text: str, normalize: bool = True, language: str | None = None, ssml: bool = False) -> TextOptions:
        """A request's options: SSML when asked for, or when ``text`` starts with ``<speak``."""
        return cls(normalize, language, ssml or is_ssml(text))


def split_said(said: Said, max_chars: int) -> list[Said]:
    """``said`` cut into pieces whose written text fits ``max_chars``: after the last sentence end that fits,
    else between words (a word longer than ``max_chars`` stays whole)."""
    pieces: list[Said] = []
    words = list(said.words)
    while words:
        length, fit, cut = -1, 0, 0
        for i, (written, _) in enumerate(words):
            length += len(written) + 1
            if length > max_chars:
                break
            fit = i + 1
            if written.endswith(_SENTENCE_END):
                cut = i + 1
        else:
            fit = cut = len(words)
        cut = cut or fit or 1
        pieces.append(Said(tuple(words[:cut])))
        words = words[cut:]
    return pieces


def ssml_items(document: str, front: TextFront, options: TextOptions, max_chars: int,
               ) -> tuple[list[Said | Pause], list[str]]:
    """An SSML document's segments (read, each within ``max_chars``) and pauses, and its warnings.
    SSMLError (a ValueError) naming the problem with a malformed document."""
    pieces, warnings = parse_ssml(document, rules_for(options.language))
    items: list[Said | Pause] = []
    words: list[str] = []
    fixed: dict[int, str] = {}
    previous: object = None

    def close_block() -> None:
        if words:
            said = front.read_words(words, options.language, options.normalize, fixed)
            # Sized for English: fewer characters of a slower script (lyre.tts.budget).
            items.extend(split_said(said, chars_for_script(" ".join(words), max_chars)))
        words.clear()
        fixed.clear()

    for piece in pieces:
        glued = isinstance(previous, Fixed) and bool(words) and len(words) - 1 in fixed
        previous = piece
        if isinstance(piece, Text):
            more = clean(piece.text).split()
            if more and glued and not piece.text[0].isspace():
                # "<sub ...>W3C</sub>," : the comma belongs to the word before, in writing and in speech
                words[-1] += more[0]
                fixed[len(words) - 1] += more.pop(0)
            words.extend(more)
        elif isinstance(piece, Fixed):
            if written := clean(piece.written).strip():  # one word, spaces and all: its times span the reading
                fixed[len(words)] = clean(piece.spoken).strip()
                words.append(written)
        else:
            close_block()
            if isinstance(piece, Pause) and piece.ms:
                items.append(piece)
        assert not isinstance(piece, Boundary) or not words
    close_block()
    return items, warnings


class SsmlIntake(TextIntake):
    """An SSML stream's intake: its text is held until `end`, then read whole into segments and pauses."""

    def __init__(self, front: TextFront, options: TextOptions, max_chars: int, segment_chars: int,
                 flush_after_s: float, idle_timeout_s: float | None = None) -> None:
        super().__init__(max_chars, segment_chars, flush_after_s, idle_timeout_s)
        self._front = front
        self._options = options
        self._document: list[str] = []

    def push(self, text: str) -> None:
        self.accept(len(text))
        self._document.append(text)

    def end(self) -> None:
        """Read the document (TextError naming what is wrong with it), then end as a plain intake does."""
        if not self.ended:
            try:
                items, self.warnings = ssml_items("".join(self._document), self._front, self._options,
                                                  self.segment_chars)
            except ValueError as exc:
                raise TextError(str(exc)) from None
            if not items:
                raise TextError("input is empty (the SSML holds no speakable text)")
            chars, self.chars = self.chars, 0  # the document's characters were counted as they came
            for item in items:
                self.add(item)
            self.chars = chars
        super().end()
