"""The words of a text as word times give them back: as written, punctuation attached, emotion tags left out.

    written_words("Hello, <laugh> world!")   # ["Hello,", "world!"]
    written_words("今天天气很好。")             # ["今天天气", "很", "好。"]: Mandarin's words, by jieba
    written_words("今日は、晴れです。")          # ["今", "日", "は、", "晴", "れ", "で", "す。"]
    written_words("Use the <b> tag")         # ["Use", "the", "<b>", "tag"]: only Orpheus's tags are not words
    joined(["今天天气", "很", "好。"])          # "今天天气很好。": words back into text, spaced where the script is

Words are split on whitespace. Chinese and Japanese write none: a run of
Chinese characters is split into words by jieba's dictionary, and Japanese
(a text with kana, or ``language`` "ja") by character, as Whisper's word
timestamps count them. A piece with no letter or digit (a dash, a lone quote,
。) is joined to the word before it, or at the start to the word after it.
"""

from __future__ import annotations

import functools
import logging
import re
from collections.abc import Iterable
from typing import Any

from lyre.orpheus import EMOTIVE_TAGS

__all__ = ["UNSPACED_LANGUAGES", "joined", "script_language", "written_words"]

_EMOTIVE = re.compile("|".join(re.escape(tag) for tag in EMOTIVE_TAGS), re.IGNORECASE)
# Scripts written without spaces between words: kana, CJK ideographs, and their punctuation and full-width forms.
_UNSPACED = "\u3000-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uff00-\uffef"
_PIECE = re.compile(f"[{_UNSPACED}]+|[^\\s{_UNSPACED}]+|\\s+")
_ONE_UNSPACED = re.compile(f"[{_UNSPACED}]")
_KANA = re.compile("[\u3040-\u30ff]")
# The language a script implies, the first found in this order (kana before the Han characters Japanese uses too).
_SCRIPTS = (("ja", _KANA), ("ko", re.compile("[\u1100-\u11ff\u3130-\u318f\uac00-\ud7af]")),
            ("zh", re.compile("[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]")), ("hi", re.compile("[\u0900-\u097f]")))
# Whisper's languages written without spaces between words (its word timestamps split them by character).
UNSPACED_LANGUAGES = frozenset({"zh", "ja", "yue", "th", "lo", "my"})


def script_language(text: str) -> str | None:
    """The language ``text``'s script implies, where its letters are not Latin: ja (kana), ko (Hangul),
    zh (Chinese characters, no kana), hi (Devanagari); None otherwise."""
    return next((language for language, script in _SCRIPTS if script.search(text)), None)


def written_words(text: str, language: str | None = None) -> list[str]:
    """``text``'s words as written; see the module docstring. ``language``: "ja" or "zh" where known
    (otherwise a text with kana is Japanese, and other Chinese characters are Mandarin)."""
    japanese = language == "ja" or (language not in ("zh", "yue") and _KANA.search(text) is not None)
    words: list[str] = []
    leading = ""
    spaced = True  # whitespace came before this piece
    for run in _PIECE.findall(_EMOTIVE.sub(" ", text)):
        if run.isspace():
            spaced = True
            continue
        for piece in (_unspaced(run, japanese) if _is_unspaced(run[0]) else [run]):
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


def joined(words: Iterable[str]) -> str:
    """Words (or texts) back into one text: a space between two, except where both sides of the join are
    written without spaces (Chinese, Japanese)."""
    out = ""
    for word in (w.strip() for w in words):
        if not word:
            continue
        if out and not (_is_unspaced(out[-1]) and _is_unspaced(word[0])):
            out += " "
        out += word
    return out


def _is_unspaced(ch: str) -> bool:
    return _ONE_UNSPACED.fullmatch(ch) is not None


def _unspaced(run: str, japanese: bool) -> list[str]:
    """A run of characters written without spaces, as words: by character (Japanese), or jieba's (Chinese)."""
    if japanese:
        return list(run)
    return [w for w in _jieba().cut(run) if w.strip()]


@functools.cache
def _jieba() -> Any:
    """jieba's tokenizer, its dictionary loaded on the first Chinese text (about a second, cached on disk)."""
    import jieba

    jieba.setLogLevel(logging.WARNING)  # not its "Building prefix dict" lines on stderr
    return jieba.Tokenizer()
