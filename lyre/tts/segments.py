"""Splitting normalised text into sentence-aligned segments of bounded length.

`split_segments` cuts a whole text, so a long input is spoken as several short
generations; `IncrementalSplitter` does the same for text that arrives piece by
piece from a language model.
"""

from __future__ import annotations

import re
import unicodedata

from lyre.tts.checkpoints import ALL_TAGS
from lyre.text.front_end import TextFront
from lyre.tts.budget import chars_for_script
from lyre.tts.text import _MIN_SEGMENT_CHARS, DEFAULT_SEGMENT_CHARS, clean

__all__ = ["IncrementalSplitter", "split_segments"]


_TERMINATORS = frozenset(".!?")  # end a sentence before a space, or before a letter of a script without spaces
_CJK_TERMINATORS = frozenset("。！？\u0964\u0965")  # CJK marks and the danda: with or without a space after
_CLOSERS = frozenset("\"')]}»›」』）】》〉")  # may follow a terminator inside the sentence
_CLAUSE_MARKS = frozenset(",;:")
_CJK_CLAUSE_MARKS = frozenset("、，；：")
_ABBREVIATIONS = frozenset(
    "mr mrs ms dr prof sr jr st mt vs cf e.g i.e a.m p.m u.s u.k approx inc ltd co gen col lt sgt capt rev".split()
)  # "etc." is left out: it ends sentences more often than not
_WORD_OPENERS = "\"'([{¿¡"
_EMOTIVE = re.compile("|".join(map(re.escape, ALL_TAGS)), re.IGNORECASE)
_LONGEST_TAG = max(map(len, ALL_TAGS))


def _is_ideograph(ch: str) -> bool:
    """Han or kana, or CJK punctuation: text cut between any two of them splits no word."""
    return (
        "\u3000" <= ch <= "\u30ff"
        or "\u3400" <= ch <= "\u9fff"
        or "\uf900" <= ch <= "\ufaff"
        or "\U00020000" <= ch <= "\U0002ffff"
    )


def _is_cjk(ch: str) -> bool:
    """Han, kana, hangul, Devanagari or CJK punctuation: scripts whose text needs no space after ``. ! ? ,``."""
    return _is_ideograph(ch) or "\uac00" <= ch <= "\ud7af" or "\u0900" <= ch <= "\u097f"


def _abbreviation(text: str, dot: int) -> bool:
    """Whether the word ending at index ``dot`` (a full stop) is an abbreviation or an initial."""
    start = dot
    while start > 0 and not text[start - 1].isspace():
        start -= 1
    word = text[start:dot].lstrip(_WORD_OPENERS).lower()
    # An initial is a letter with case: Korean "네." ("yes.") is a word of one syllable.
    return word in _ABBREVIATIONS or (len(word) == 1 and word.isalpha() and word != word.upper())


def _sentence_end(text: str, p: int, final: bool) -> bool:
    """Whether a sentence ends just before index ``p``; ``final`` says the text ends at its end."""
    if p < len(text):
        if text[p] in _CLOSERS or text[p] in _TERMINATORS or text[p] in _CJK_TERMINATORS:
            return False  # the run of end marks goes on
    elif not final:
        return False  # a streamed "3." may yet become "3.5"
    q = p
    while q > 0 and text[q - 1] in _CLOSERS:
        q -= 1
    mark = text[q - 1] if q else ""
    if mark in _CJK_TERMINATORS:
        return True
    if mark not in _TERMINATORS:
        return False
    if p < len(text) and not (text[p].isspace() or (_is_cjk(text[p]) and not text[q - 2: q - 1].isdigit())):
        return False  # "3.5", "e.g"; but "요.다음", "吧!今天"
    return not (mark == "." and _abbreviation(text, q - 1))


def _clause_end(text: str, p: int) -> bool:
    """Whether a clause ends just before index ``p`` (which must be inside ``text``)."""
    mark, after = text[p - 1], text[p]
    if mark in _CJK_CLAUSE_MARKS:
        return True
    if mark in _CLAUSE_MARKS:
        return after.isspace() or _is_cjk(after)
    return mark == "-" and after.isspace() and p >= 2 and text[p - 2].isspace()


def _any_word_end(text: str, p: int) -> bool:
    return text[p].isspace() and not text[p - 1].isspace()


def _word_end(text: str, p: int) -> bool:
    """A word ends before ``p``, and the word after it is not read with it ("5 km", "10:30 am", "Dr. Smith")."""
    if not _any_word_end(text, p):
        return False
    left, right = text[:p].rsplit(None, 1)[-1], text[p:].split(None, 1)
    return not (right and TextFront.joins(left, right[0]))


def _in_word(text: str, p: int) -> bool:
    """Whether ``p`` falls inside a word or a number ("3,5", "1.000"): between two letters, digits or marks, not
    next to Han or kana (Chinese and Japanese may be cut before or after any of theirs)."""
    def part(ch: str) -> bool:
        return ch.isalnum() or unicodedata.category(ch)[0] == "M"

    left, right = text[p - 1], text[p]
    if part(left) and part(right):
        return not (_is_ideograph(left) or _is_ideograph(right))
    if left in ".,:":
        return right.isdigit() and p >= 2 and text[p - 2].isdigit()
    return right in ".,:" and left.isdigit() and text[p + 1: p + 2].isdigit()


def _hard_cut(text: str, p: int) -> int:
    """Cut at ``p``: moved back to the start of the word or number it falls in, where one starts after the text's
    start (else inside the word, off combining marks), and out of emotive tags."""
    start = p
    while start > 0 and _in_word(text, start):
        start -= 1
    if start > 0:
        p = start
    while p > 1 and unicodedata.category(text[p])[0] == "M":
        p -= 1
    for tag in _EMOTIVE.finditer(text, max(0, p - _LONGEST_TAG), p + _LONGEST_TAG):
        if tag.start() < p < tag.end():
            p = tag.start()
    return p


def _best_cut(text: str, max_chars: int) -> int:
    """Where to end the first segment of ``text`` (longer than ``max_chars``, no leading space).

    The last sentence end that keeps the segment within ``max_chars``, else
    the last clause end, else the last word end not inside a unit ("5 km"), else any word end, else inside
    a word.
    """
    window = range(max_chars, 0, -1)
    for p in window:
        if _sentence_end(text, p, final=True):
            return p
    for fits in (_clause_end, _word_end, _any_word_end):
        for p in window:
            if fits(text, p):
                return p
    return _hard_cut(text, max_chars)


def _limit(text: str, max_chars: int) -> int:
    """The characters a segment starting ``text`` may hold: ``max_chars`` are sized for English's speaking rate
    (lyre.tts.budget), fewer for a slower script (Mandarin, Korean, Hindi) so its budget fits the same room."""
    return chars_for_script(text[:max_chars], max_chars)


def _check_max_chars(max_chars: int) -> None:
    if max_chars < _MIN_SEGMENT_CHARS:
        raise ValueError(f"max_chars must be >= {_MIN_SEGMENT_CHARS}, got {max_chars}")


def split_segments(text: str, max_chars: int = DEFAULT_SEGMENT_CHARS) -> list[str]:
    """Cut normalised ``text`` into segments of at most ``max_chars`` characters.

    ``max_chars`` is sized for English; text mostly in a slower script
    (Han, Hangul, Devanagari) gets fewer, in proportion to its speaking rate
    (lyre.tts.budget). Sentences (ending in ``. ! ? ...`` before a space or
    a letter of those scripts, or ``。！？`` and the danda ``। ॥`` before
    anything; not after abbreviations, initials or inside numbers) are
    merged greedily while they fit. A sentence too long for one segment is
    cut at clause marks (``, ; :`` and `` - ``, ``，、；：`` before anything),
    then between words, and only inside a word that is itself longer than
    the segment (between any two Han characters, but not inside a number or
    a Latin word among them); never inside an emotive tag.
    ``" ".join(segments)`` is ``text`` up to whitespace at the cuts.
    """
    _check_max_chars(max_chars)
    segments = []
    rest = text.strip()
    while len(rest) > (limit := _limit(rest, max_chars)):
        p = _best_cut(rest, limit)
        segments.append(rest[:p].rstrip())
        rest = rest[p:].lstrip()
    if rest:
        segments.append(rest)
    return segments


# ---- streaming --------------------------------------------------------------

_TAG_OPENERS = "<\ufe64\uff1c"  # NFKC turns the small and fullwidth forms into "<"
_TAG_CLOSERS = ">\ufe65\uff1e"


def _in_open_tag(raw: str) -> bool:
    """Whether the end of ``raw`` may lie inside a tag whose ``>`` has not arrived."""
    for ch in reversed(raw):
        if ch.isspace() or ch in _TAG_CLOSERS:
            return False
        if ch in _TAG_OPENERS:
            return True
    return False


def _stable_end(raw: str, start: int) -> int:
    """The last cut in ``raw`` at or after ``start`` that later text cannot change the cleaning of.

    That is just after whitespace, or just after a CJK mark or a danda
    outside a possible tag; 0 when there is none.
    """
    for b in range(len(raw), max(start, 0), -1):
        ch = raw[b - 1]
        if ch.isspace() or (ch in "。！？，、；：\u0964\u0965" and not _in_open_tag(raw[:b])):
            return b
    return 0


class IncrementalSplitter:
    """`split_segments` for text that arrives in pieces, such as a language model's output.

    Pieces are joined exactly as received ("Hel" + "lo."), normalised as
    `normalize` would, and cut by the rules of `split_segments`. `push`
    returns segments as soon as they are complete: a sentence end followed
    by whitespace has arrived, or the pending text is over ``max_chars``.
    A complete segment shorter than ``min_chars`` is held back to merge with
    the next sentence, until `flush`. With ``min_chars == max_chars`` the
    segments are exactly those of `split_segments` on the whole text.
    """

    def __init__(self, max_chars: int = DEFAULT_SEGMENT_CHARS, min_chars: int = 0) -> None:
        _check_max_chars(max_chars)
        if not 0 <= min_chars <= max_chars:
            raise ValueError(f"min_chars must be in [0, max_chars={max_chars}], got {min_chars}")
        self.max_chars = max_chars
        self.min_chars = min_chars
        self._raw = ""  # received, not yet cleaned: what follows may change its cleaning
        self._text = ""  # cleaned, not yet emitted; never starts with a space

    def push(self, piece: str) -> list[str]:
        """Add ``piece``; return the segments it completes (often none)."""
        start = len(self._raw)
        self._raw += piece
        b = _stable_end(self._raw, start)
        if b:
            self._append(clean(self._raw[:b]))
            self._raw = self._raw[b:]
        return self._drain(final=False)

    def settle(self) -> list[str]:
        """A pause in the text: the remaining segments, as `flush`, but for the last word when words still to
        come may change how it is read ("$" before "3.50", "5" before "km"): it stays, to join what comes next.
        `held` says whether one did."""
        whole = (self._text + clean(self._raw)).rstrip()
        start = max(whole.rfind(" ") + 1, 0)
        growing = bool(self._raw) and not self._raw[-1].isspace()  # the last word's end has not come
        if not whole or not (growing or TextFront.may_continue(whole[start:])):
            return self.flush()
        self._text, self._raw = whole[:start], ""
        segments = self.flush()
        self._raw = whole[start:] + ("" if growing else " ")
        return segments

    @property
    def held(self) -> bool:
        """Whether text is waiting for more (after `settle`, or pushed since)."""
        return bool(self._raw.strip() or self._text.strip())

    def flush(self) -> list[str]:
        """End of text: return every remaining segment and start afresh."""
        self._append(clean(self._raw))
        self._raw = ""
        segments = self._drain(final=True)
        self._text = ""
        return segments

    def _append(self, cleaned: str) -> None:
        if not self._text or (self._text.endswith(" ") and cleaned.startswith(" ")):
            cleaned = cleaned.lstrip()
        self._text += cleaned

    def _drain(self, final: bool) -> list[str]:
        segments: list[str] = []
        while self._text.strip():
            text = self._text
            limit = _limit(text, self.max_chars)  # final once max_chars characters have come
            if (final or len(text.rstrip()) > self.max_chars) and len(text.rstrip()) > limit:
                # Enough text to decide the cut exactly as split_segments would.
                p = _best_cut(text, limit)
            elif final:
                p = len(text)
            else:
                ends = range(min(len(text), limit), 0, -1)
                p = next((p for p in ends if _sentence_end(text, p, final=False)), 0)
                if not p or p < self.min_chars:
                    break
            segments.append(text[:p].strip())
            self._text = text[p:].lstrip()
        return segments
