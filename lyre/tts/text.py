"""Input text for Orpheus: `normalize` turns user text into what the model can say.

Splitting normalised text into segments lives in `lyre.tts.segments`.
"""

from __future__ import annotations

import functools
import re
import unicodedata

from lyre.tts.checkpoints import ALL_TAGS

__all__ = ["DEFAULT_SEGMENT_CHARS", "MAX_INPUT_CHARS", "TextError", "clean", "normalize"]

MAX_INPUT_CHARS = 4096  # the OpenAI speech API's input limit
DEFAULT_SEGMENT_CHARS = 300
_MIN_SEGMENT_CHARS = 20  # below this, cuts would fall inside most words

# ---- normalisation ----------------------------------------------------------

# A run of digits joined by an en dash is a range ("1–5"); elsewhere the dash is a pause.
_RANGE_DASH = re.compile(r"(?<=\d)\u2013(?=\d)")
_TYPOGRAPHIC = str.maketrans(
    {
        **dict.fromkeys("\u2018\u2019\u201a\u201b\u2032\u2035", "'"),
        **dict.fromkeys("\u201c\u201d\u201e\u201f\u2033\u2036", '"'),
        **dict.fromkeys("\u2010\u2011\u2012\u2212", "-"),
        **dict.fromkeys("\u2013\u2014\u2015", " - "),
        **dict.fromkeys("\u2026\u22ef", "..."),
        "\u2044": "/",  # NFKC writes "½" as "1⁄2"; dropping the slash would read "12"
    }
)
# NFKC writes "1½" as "11⁄2": a vulgar fraction after a digit gets a space first ("1 1/2").
_FRACTION_AFTER_DIGIT = re.compile(r"(?<=\d)(?=[\u00bc-\u00be\u2150-\u215e])")
# A tag holds no whitespace, so "a < b and c > d" is prose, not a tag; the known tags that hold a space
# (Korean's "<작은 웃음>") are found by name.
_KNOWN_TAGS = frozenset(tag.lower() for tag in ALL_TAGS)
_TAG = re.compile("(" + "".join(f"{re.escape(t)}|" for t in ALL_TAGS if " " in t) + r"<[^\s<>]+>)")
_ASCII_KEPT = frozenset(".,!?;:'\"-()[]/$%&@#+=")
_KEPT_SYMBOLS = frozenset("°")
# List markers and reference marks: punctuation the model has no sound for.
_DROPPED_PUNCTUATION = frozenset("•‣⁃†‡§¶※⁂⁎")
_SPACES = re.compile(r"\s+")
# Chinese, Japanese and Korean text is punctuated in full width: those marks stay as written, where NFKC would
# make them ASCII, except straight after a Latin letter or a digit ("Ｈｉ！", "3，5": ASCII there). The Chinese
# ellipsis (two or more "…") stays too. Ideographic marks (。、「」《》) and the danda (।॥) NFKC leaves alone.
_WIDE_MARKS = "，！？：；（）［］｛｝"
_WIDE_KEPT = re.compile(f"([{_WIDE_MARKS}]|\u2026{{2,}})")


class TextError(ValueError):
    """Input text that cannot be spoken; the message says what was wrong."""


@functools.lru_cache(maxsize=8192)
def _speakable(ch: str) -> str:
    """What ``ch`` becomes in spoken text: itself, a space, or nothing."""
    if ch.isspace():
        return " "
    if ch.isascii():
        return ch if ch.isalnum() or ch in _ASCII_KEPT else ""
    category = unicodedata.category(ch)
    if category[0] in "LN" or category == "Sc" or ch in _KEPT_SYMBOLS:
        return ch
    if category[0] == "M":
        # Variation selectors and enclosing marks only dress up emoji and keycaps;
        # other marks are vowel signs and accents the word needs.
        selector = "\ufe00" <= ch <= "\ufe0f" or "\U000e0100" <= ch <= "\U000e01ef"
        return "" if selector or category == "Me" else ch
    if category[0] == "P":
        return "" if ch in _DROPPED_PUNCTUATION else ch
    return ""  # control and format characters, unassigned code points, emoji and other symbols


def _keep_tag(tag: str) -> str:
    """An emotive tag (one a known checkpoint was trained on, lyre.tts.checkpoints) in lowercase; every other
    tag (``<|eot_id|>``, ``<b>``) goes."""
    tag = tag.lower()
    return tag if tag in _KNOWN_TAGS else ""


def clean(text: str) -> str:
    """Normalised ``text`` with whitespace runs collapsed but not stripped.

    Cleaning two pieces cut just after whitespace gives the same text as
    cleaning them joined, which lets `IncrementalSplitter` clean as it goes.
    """
    text = _fold(text)
    out: list[str] = []
    last = " "  # the last character kept
    # re.split with a group alternates prose (even indices) and tags (odd).
    for i, part in enumerate(_TAG.split(text)):
        for kept in [_keep_tag(part)] if i % 2 else map(_speakable, part):
            # A mark whose letter was dropped (an accent on an emoji) has nothing to sit on.
            if kept and (not _is_mark(kept) or last.isalnum() or _is_mark(last)):
                out.append(kept)
                last = kept[-1]
    # Dropping a character can bring a letter and its mark together: compose
    # them now, so that normalising twice changes nothing.
    return _SPACES.sub(" ", unicodedata.normalize("NFC", "".join(out)))


def _fold_plain(text: str) -> str:
    text = unicodedata.normalize("NFKC", _FRACTION_AFTER_DIGIT.sub(" ", text))
    return _RANGE_DASH.sub("-", text).translate(_TYPOGRAPHIC)


def _fold(text: str) -> str:
    """NFKC and ASCII punctuation, full-width marks kept. Whether a mark stays depends on the character just
    before it alone, so text cut after any character folds the same in pieces as whole."""
    parts = _WIDE_KEPT.split(text)  # plain text (even indices) and full-width marks (odd)
    out: list[str] = []
    plain: list[str] = []
    for i, part in enumerate(parts):
        before = parts[i - 1][-1:] if i else ""
        if i % 2 and not (part in _WIDE_MARKS and unicodedata.normalize("NFKC", before).isascii()
                          and unicodedata.normalize("NFKC", before).isalnum()):
            out += [_fold_plain("".join(plain)), part]
            plain.clear()
        else:
            plain.append(part)
    return "".join([*out, _fold_plain("".join(plain))])


def _is_mark(ch: str) -> bool:
    return len(ch) == 1 and unicodedata.category(ch)[0] == "M"


def normalize(text: str, max_chars: int = MAX_INPUT_CHARS) -> str:
    """Speakable text for Orpheus, or `TextError` naming what is wrong with ``text``.

    Checks the raw length against ``max_chars``, then applies NFKC (but
    keeps full-width CJK punctuation, "，！？：；（）", as written), maps
    typographic quotes, dashes and ellipses to ASCII, keeps the Orpheus
    emotive tags (lowercased) and drops every other ``<...>`` tag, stray
    angle brackets, control characters, emoji and symbols other than common
    punctuation, currency, ``% & @ # + =`` and ``°``. Letters, digits and
    marks of every script stay. Whitespace collapses to single spaces.
    """
    if max_chars < 1:
        raise ValueError(f"max_chars must be >= 1, got {max_chars}")
    if len(text) > max_chars:
        raise TextError(f"input is {len(text)} characters, over the limit of {max_chars}")
    if not text.strip():
        raise TextError("input is empty")
    cleaned = clean(text).strip()
    if not cleaned:
        raise TextError("input is empty after normalisation (it held no speakable text)")
    return cleaned


# ---- segmentation -----------------------------------------------------------
