"""Requests' own reference voices (``reference_audio`` on ``/v1/audio/speech``): each clip made into a voice
once, and only so many made at a time.

An app that sends the same clip with every request gets its voice from a
cache after the first: keyed by the clip's bytes and its text, it skips the
decode, the transcription (a clip sent without text) and the SNAC encode. The
cache holds the `CACHE_SIZE` voices used last. A clip the cache lacks is made
into a voice by at most ``limit`` requests at once; one more is refused at
once with a 429 and Retry-After rather than queued, so requests' references
never pile up in front of the encoder, nor in front of uploads to
``/v1/audio/voices``, which this limit does not count. A request whose clip
is being made already waits for that one.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections import OrderedDict
from collections.abc import Awaitable, Callable

from prometheus_client import Counter

from lyre.server.admission import Overloaded
from lyre.tts.reference_voices import ReferenceVoice

__all__ = ["CACHE_SIZE", "InlineReferences", "inline_key"]

CACHE_SIZE = 64  # voices; one of 15 s is about 60 KB in memory
_RETRY_AFTER_S = 1  # a clip is made into a voice in about a second


def inline_key(clip: bytes, text: str | None) -> str:
    """What a request's reference is: its clip's bytes and its text (none and blank alike: Whisper hears it)."""
    h = hashlib.sha256(clip)
    h.update(b"\0" + (text or "").strip().encode())
    return h.hexdigest()


class InlineReferences:
    """The cache of requests' reference voices, and the bound on how many are made at once."""

    def __init__(self, limit: int, outcomes: Counter, size: int = CACHE_SIZE) -> None:
        """``outcomes``: counts each request's reference by ``outcome``: made, cached, waited, refused."""
        self.limit = limit
        self._outcomes = outcomes
        self._size = size
        self._cache: OrderedDict[str, ReferenceVoice] = OrderedDict()  # least recently used first
        self._making: dict[str, asyncio.Task[ReferenceVoice]] = {}

    @property
    def making(self) -> int:
        """Voices being made now."""
        return len(self._making)

    async def get(self, key: str, make: Callable[[], Awaitable[ReferenceVoice]]) -> ReferenceVoice:
        """The voice for ``key``: from the cache, from a request making it already, or ``make()``'s. Overloaded
        (a 429) when ``limit`` voices are being made already; ``make``'s own errors otherwise."""
        if (voice := self._cache.get(key)) is not None:
            self._cache.move_to_end(key)
            self._outcomes.labels("cached").inc()
            return voice
        task = self._making.get(key)
        if task is not None:
            self._outcomes.labels("waited").inc()
        elif len(self._making) >= self.limit:
            self._outcomes.labels("refused").inc()
            raise Overloaded(f"{self.limit} requests' own reference clips are being made into voices now, this "
                             "server's limit; retry shortly, or upload the clip once as a voice "
                             "(POST /v1/audio/voices) and name it", _RETRY_AFTER_S)
        else:
            self._outcomes.labels("made").inc()
            # A task of its own: a client that leaves does not cancel the voice others wait for, and what it
            # costs is bounded (a clip of at most 25 s).
            task = self._making[key] = asyncio.create_task(self._make(key, make))
            task.add_done_callback(_retrieved)
        return await asyncio.shield(task)

    async def _make(self, key: str, make: Callable[[], Awaitable[ReferenceVoice]]) -> ReferenceVoice:
        try:
            voice = await make()
        finally:
            del self._making[key]
        self._cache[key] = voice
        if len(self._cache) > self._size:
            self._cache.popitem(last=False)
        return voice


def _retrieved(task: asyncio.Task[ReferenceVoice]) -> None:
    """Its error seen, for when every request that waited on it has gone (else asyncio logs it as lost)."""
    if not task.cancelled():
        task.exception()
