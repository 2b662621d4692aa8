"""Word times for speech as it is made: each text segment aligned once its audio is complete.

    timer = WordTimer(aligner, session="ctx-1")  # a WordAligner: the server's, a PhoneAligner, a Transcriber
    timer.add(chunk)                       # int16 PCM at 24 kHz, in order, as it streams
    timer.segment("Hello there.", 0, n)    # samples [0, n) of the stream speak this text: aligned now
    timer.follow(stream.spoken)            # or: every segment a speech stream has ended since the last call
    for words in timer.ready():            # finished alignments, in order, without waiting
        send(words)
    for words in await timer.rest():       # at the end: every alignment still running
        send(words)

or, where segments may end long before the next audio (text that arrives as a language model writes it):

    stream.on_spoken(lambda s: timer.segment(s.text, s.start, s.end, s.said))
    async for words in timer.results():    # on a task of its own, until timer.finish() and the last one
        send(words)

Alignments run on the aligner's worker, off the event loop, while the
audio goes on streaming: word times arrive after the audio they describe, never
delay it. Times are seconds from the start of the stream. A segment that cannot
be aligned (no aligner, the worker busy or shutting down) gives no words and is counted in
``failures``; the stream goes on.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Hashable, Sequence
from typing import Any, Protocol

import numpy as np

from lyre.stt.align import AlignedWord, Alignment
from lyre.stt.audio import SAMPLE_RATE, PcmResampler
from lyre.stt.transcriber import MAX_ALIGN_SECONDS
from lyre.stt.words import written_words
from lyre.text.said import Said

__all__ = ["WordAligner", "WordTimer"]

log = logging.getLogger("lyre.stt.word_timer")


class WordAligner(Protocol):
    """What places known words in audio: ``lyre.server.aligner.Aligner`` (the one the server uses),
    a `PhoneAligner`, or a `Transcriber` (Whisper)."""

    async def align(self, audio: np.ndarray, words: list[str], language: str | None,
                    session: Hashable) -> Alignment:
        """When each of ``words`` (as `written_words` gives them) is spoken in ``audio`` (float32, 16 kHz,
        at most 30 s); an exception when it cannot say."""
        ...


class WordTimer:
    """See the module docstring. A segment the ``aligner`` fails on gets no words; the others go on."""

    def __init__(self, aligner: WordAligner, session: Hashable, rate: int = 24_000,
                 language: str = "en") -> None:
        self._aligner = aligner
        self._session = session
        self._rate = rate
        self._language = language
        self._chunks: list[np.ndarray] = []  # the stream's audio from sample ``_base`` on
        self._base = 0
        self._pending: list[asyncio.Task[list[AlignedWord]]] = []  # oldest first
        self._seen = 0  # segments of `follow`'s list already aligned
        self._more = asyncio.Event()  # a segment was added, or `finish` was called
        self._finished = False
        self.failures = 0
        self.aligned_s = 0.0

    def add(self, pcm: np.ndarray) -> None:
        """The stream's next audio (int16 at ``rate``)."""
        if len(pcm):
            self._chunks.append(np.asarray(pcm, dtype=np.int16))

    def segment(self, text: str, start: int, end: int, said: Said | None = None) -> None:
        """Samples [start, end) of the stream speak ``text``: align them (in the background). Segments
        come in order; audio before ``end`` is dropped once it has been cut out. ``said``: what the text's
        words say, where that is not what is written ("$5.20": "five dollars and twenty cents"): the spoken
        words are aligned, and each written word's time spans the words that say it."""
        audio = self._cut(start, end)
        timed = said.timed() if said is not None and said.changed else None
        words = [w for _, spoken in timed for w in spoken] if timed is not None else written_words(text)
        if not words or not audio.size:
            return  # nothing to say when: a segment of tags only, or one trimmed to nothing
        self._pending.append(asyncio.create_task(self._align(audio, words, start / self._rate, timed)))
        self._more.set()

    def finish(self) -> None:
        """No more segments: `results` ends once the last alignment is out."""
        self._finished = True
        self._more.set()

    async def results(self) -> AsyncIterator[list[AlignedWord]]:
        """Each segment's words, in order, as soon as it is aligned, until `finish` and the last one."""
        while True:
            if self._pending:
                words = await self._pending[0]
                self._pending.pop(0)
                yield words
            elif self._finished:
                return
            else:
                self._more.clear()
                await self._more.wait()

    def follow(self, spoken: Sequence[Any]) -> None:
        """Align the segments of ``spoken`` (a stream's list of ended segments, each with ``text``,
        ``start`` and ``end``) that were not there at the last call."""
        for ended in spoken[self._seen:]:
            self.segment(ended.text, ended.start, ended.end, getattr(ended, "said", None))
        self._seen = len(spoken)

    def ready(self) -> list[list[AlignedWord]]:
        """The alignments finished so far, in segment order (one still running holds back those after it)."""
        out = []
        while self._pending and self._pending[0].done():
            out.append(self._pending.pop(0).result())
        return out

    async def rest(self) -> list[list[AlignedWord]]:
        """Every alignment still to come, in order, once each has finished."""
        out = []
        while self._pending:
            out.append(await self._pending[0])
            self._pending.pop(0)
        return out

    def close(self) -> None:
        """Cancel what is still running (the stream was cancelled)."""
        for task in self._pending:
            task.cancel()
        self._pending.clear()
        self._chunks.clear()

    def _cut(self, start: int, end: int) -> np.ndarray:
        if self._chunks:
            joined = np.concatenate(self._chunks)
        else:
            joined = np.zeros(0, np.int16)
        audio = joined[max(0, start - self._base): max(0, end - self._base)]
        rest = joined[max(0, end - self._base):]
        self._chunks = [rest] if rest.size else []
        self._base = max(self._base, end)
        return audio

    async def _align(self, pcm: np.ndarray, words: list[str], offset_s: float,
                     timed: list[tuple[str, tuple[str, ...]]] | None = None) -> list[AlignedWord]:
        try:
            resampler = PcmResampler(self._rate)
            audio = np.concatenate([resampler.push(pcm.astype("<i2").tobytes()), resampler.flush()])
            limit = int(MAX_ALIGN_SECONDS * SAMPLE_RATE)
            # A segment longer than one alignment (a model that talks past its text) is aligned on its
            # first window; its words are placed inside it.
            found = await self._aligner.align(audio[:limit], words, self._language, session=self._session)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # no aligner, or the worker busy, closed or failed: no words for this segment
            self.failures += 1
            log.warning("word times for %r: a segment could not be aligned: %s", self._session, exc)
            return []
        self.aligned_s += audio.size / SAMPLE_RATE
        placed = found.words if timed is None else _written(found.words, timed)
        return [AlignedWord(w.text, round(w.start + offset_s, 3), round(w.end + offset_s, 3)) for w in placed]


def _written(spoken: Sequence[AlignedWord], timed: list[tuple[str, tuple[str, ...]]]) -> list[AlignedWord]:
    """The written words' times from their spoken words': each from its first spoken word's start to its last's
    end."""
    out, k = [], 0
    for written, says in timed:
        first, last = spoken[k], spoken[k + len(says) - 1]
        out.append(AlignedWord(written, first.start, last.end))
        k += len(says)
    return out
