"""The words of a text as word times give them back: as written, punctuation attached, emotion tags left out.

    written_words("Hello, <laugh> world!")   # ["Hello,", "world!"]
    written_words("今日は、晴れです。")          # ["今", "日", "は、", "晴", "れ", "で", "す。"]
    written_words("Use the <b> tag")         # ["Use", "the", "<b>", "tag"]: only Orpheus's tags are not words

Words are split on whitespace; in Chinese and Japanese, which write none, each
character is a word (as Whisper's word timestamps count them). A piece with no
letter or digit (a dash, a lone quote, 。) is joined to the word before it, or at
the start to the word after it.
"""

from __future__ import annotations

import re

from lyre.orpheus import EMOTIVE_TAGS

__all__ = ["written_words"]

_EMOTIVE = re.compile("|".join(re.escape(tag) for tag in EMOTIVE_TAGS), re.IGNORECASE)
# Scripts written without spaces between words: kana, CJK ideographs, and their punctuation and full-width forms.
_UNSPACED = "\u3000-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uff00-\uffef"
_PIECE = re.compile(f"[{_UNSPACED}]|[^\\s{_UNSPACED}]+|\\s+")


def written_words(text: str) -> list[str]:
    """``text``'s words as written; see the module docstring."""
    words: list[str] = []
    leading = ""
    spaced = True  # whitespace came before this piece
    for piece in _PIECE.findall(_EMOTIVE.sub(" ", text)):
        if piece.isspace():
            spaced = True
            continue
        gap = " " if spaced else ""
        if any(ch.isalnum() for ch in piece):
            words.append(leading + (gap if leading else "") + piece)
            leading = ""
        elif words:
            words[-1] += gap + piece
        else:
            leading += (gap if leading else "") + piece
        spaced = False
    return words
