"""How many tokens a segment's words need: the budget that ends a segment when end-of-speech never comes.

The rule: a segment may run for ``LEADING_S`` (the breath and silence the model often opens with) plus its
spoken characters at ``SLOWEST_CHARS_PER_S`` (a slow, deliberate delivery) plus ``TAG_S`` for each emotive tag
(a laugh or a sigh takes time and no characters), in whole frames, and never past the positions a request has
after its prompt. Natural English runs at 13-16 characters a second. benchmarks/speaking_rate.py measures
espeak-ng at 120-175 words a minute on six sentences: medians 12.7-18.8 characters a second over the voiced audio
(13.1-19.6 over Whisper's word times), the slowest clip 10.3 (a short reply at 120 words a minute). A segment
slower than 9 characters a second throughout is a model stuck, not a slow speaker, so the budget cuts it and
the cut is reported (lyre.tts.cuts).

Segments are sized the other way round: the most characters whose budget fits the room a request has, so a
sentence too long for one request is split at a clause or a word, never cut short.
"""

from __future__ import annotations

import math

from lyre.orpheus import EMOTIVE_TAGS, FRAME_TOKENS, TOKENS_PER_SECOND

__all__ = ["LEADING_S", "SLOWEST_CHARS_PER_S", "TAG_S", "chars_within", "speech_seconds", "speech_tokens"]

SLOWEST_CHARS_PER_S = 9.0
LEADING_S = 1.0
TAG_S = 1.5


def _tags(text: str) -> tuple[int, int]:
    """(emotive tags in ``text``, the characters they take)."""
    lowered = text.lower()
    found = [(lowered.count(tag), len(tag)) for tag in EMOTIVE_TAGS]
    return sum(n for n, _ in found), sum(n * size for n, size in found)


def speech_seconds(text: str) -> float:
    """The longest a reasonable delivery of ``text`` (one segment) takes, by the rule above."""
    tags, tag_chars = _tags(text)
    spoken = max(0, len(text.strip()) - tag_chars)
    return LEADING_S + spoken / SLOWEST_CHARS_PER_S + tags * TAG_S


def speech_tokens(text: str, room: int) -> int:
    """``text``'s budget in tokens: whole frames covering `speech_seconds`, at most ``room`` (in whole frames,
    at least one)."""
    frames = math.ceil(speech_seconds(text) * TOKENS_PER_SECOND / FRAME_TOKENS)
    return max(1, min(frames, room // FRAME_TOKENS)) * FRAME_TOKENS


def chars_within(tokens: int) -> int:
    """The most characters (no tags) whose budget fits in ``tokens``; 0 when not even the lead-in fits."""
    return max(0, int((tokens / TOKENS_PER_SECOND - LEADING_S) * SLOWEST_CHARS_PER_S))
