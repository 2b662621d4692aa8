"""What the listener heard of a spoken reply cut short: the words that ended by the cut, placed in its audio.

Only the one segment playing at the cut is aligned (the ones before it were heard whole), so a reply
nobody interrupts is never aligned at all.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable, Sequence
from typing import Any

import numpy as np

from lyre.agent.conversation import heard_text
from lyre.stt import AlignedWord, WordAligner, WordTimer
from lyre.stt.words import joined

__all__ = ["SpokenReplies", "heard_words", "word_objects"]

# Natural speech runs at 13-16 characters a second (lyre.tts.budget): where a segment's audio is not all made,
# its words are placed by this, not aligned into the part that exists (which would squeeze them all in).
_CHARS_PER_S = 14.0


async def heard_words(segments: Sequence[Any], pcm: list[np.ndarray], rate: int, heard_ms: float,
                      aligner: WordAligner, session: Hashable,
                      language: str | None = None) -> tuple[str, list[AlignedWord]]:
    """The text heard in the first ``heard_ms`` of audio ``pcm`` (int16 chunks at ``rate``) whose
    ``segments`` (each with ``text``, ``start`` and ``end`` in samples) speak it: each segment heard whole,
    then the words of the one playing at the cut that end by then; and that segment's words with their
    times. If it cannot be aligned, that segment is cut by its text's length instead. Words and segments are
    joined with a space where their script writes one (not between Chinese or Japanese words). ``language``:
    the reply's, where known (None: by its script, else English; see `WordTimer`)."""
    cut = heard_ms * rate / 1000
    heard = [s.text for s in segments if s.end <= cut]
    playing = next((s for s in segments if s.start < cut < s.end), None)
    found: list[AlignedWord] = []
    if playing is not None and not playing.whole:  # still being made: by a natural rate
        expected = len(playing.text) / _CHARS_PER_S * rate
        heard.append(_by_length(playing.text, cut - playing.start, max(playing.end - playing.start, expected)))
    elif playing is not None:
        timer = WordTimer(aligner, session, rate=rate, language=language)
        timer.add(np.concatenate(pcm))
        timer.segment(playing.text, playing.start, playing.end, getattr(playing, "said", None))
        found = [w for words in await timer.rest() for w in words]
        if found:
            heard.append(joined(w.text for w in found if 1000 * w.end <= heard_ms))
        else:  # no words to place (tags only), or no aligner: by the segment's length
            heard.append(_by_length(playing.text, cut - playing.start, playing.end - playing.start))
    return joined(heard), found


def _by_length(text: str, heard: float, total: float) -> str:
    """The part of ``text`` said in ``heard`` of its ``total`` length of audio, by its length (`heard_text`)."""
    return heard_text(text, heard, total)


def word_objects(words: list[AlignedWord]) -> list[dict[str, Any]]:
    """Aligned words as lyre's extras show them: milliseconds from the reply's first audio."""
    return [{"text": w.text, "start_ms": round(1000 * w.start), "end_ms": round(1000 * w.end)} for w in words]


class SpokenReplies:
    """The last ``keep`` replies heard, by item id: their audio, for a later conversation.item.truncate."""

    def __init__(self, keep: int) -> None:
        self._keep = keep
        self._replies: OrderedDict[str, Any] = OrderedDict()

    def add(self, item_id: str, reply: Any) -> None:
        self._replies[item_id] = reply
        while len(self._replies) > self._keep:
            self._replies.popitem(last=False)

    def get(self, item_id: object) -> Any:
        return self._replies.get(item_id) if isinstance(item_id, str) else None
