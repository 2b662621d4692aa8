"""Word times for speech as it is made: each text segment aligned once its audio is complete.

    timer = WordTimer(aligner, session="ctx-1")  # a WordAligner: the server's, a PhoneAligner, a Transcriber
    timer.add(chunk)                       # int16 PCM at 24 kHz, in order, as it streams
    timer.expect(text)                     # optional: the whole text, where it is known before it is spoken
    timer.segment("Hello there.", 0, n)    # samples [0, n) of the stream speak this text: aligned now
    timer.follow(stream.spoken, cut)       # or: every segment a speech stream has ended since the last call
    for words in timer.ready():            # finished alignments, in order, without waiting
        send(words)
    for words in await timer.rest():       # at the end: every alignment still running
        send(words)

or, where segments may end long before the next audio (text that arrives as a language model writes it):

    stream.on_spoken(lambda s: timer.segment(s.text, s.start, s.end, s.said))
    async for words in timer.results():    # on a task of its own, until timer.finish() and the last one
        send(words)

Each segment is aligned in the timer's ``language``, or where it names none, the
one its text's script says (`script_language`: Chinese characters Mandarin,
Hangul Korean, Devanagari Hindi), else English; its words as `written_words`
gives them (Mandarin's by jieba's dictionary, Japanese by character).

Alignments run on the aligner's worker, off the event loop, while the
audio goes on streaming: word times arrive after the audio they describe, never
delay it. Times are seconds from the start of the stream, in order (each word
starts at or after the one before ends), each at least a 10 ms frame long and
inside its segment's audio: a word the aligner places beyond it is not in the
audio and is left out. A segment cut on its token budget (``cut``) may stop
before its words do: it is aligned as such (`WordAligner`'s ``partial``), and
the words it never says are left out, not told with times they do not have (a
client captions what is heard, and an agent keeps what its listener heard; the
cut itself is told apart, with the segment's text). A word too long for one
segment is cut between two: where the stream's whole text is known (`expect`),
its pieces come back as one word. A segment that cannot be aligned (no aligner,
the worker busy or shutting down) gives no words and is counted in
``failures``; the stream goes on.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Collection, Hashable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from lyre.stt.align import AlignedWord, Alignment
from lyre.stt.audio import SAMPLE_RATE, PcmResampler
from lyre.stt.transcriber import MAX_ALIGN_SECONDS
from lyre.stt.words import script_language, written_words
from lyre.text.said import Said

__all__ = ["WordAligner", "WordTimer"]

log = logging.getLogger("lyre.stt.word_timer")

_MIN_WORD_S = 0.01  # a word keeps at least a 10 ms frame of the audio, or it is not in it
# Forced alignment gives the words that audio does not hold the least room it can, at its end (Whisper's aligner
# 10 ms each, where the audio stops before the words); no word is said in under 30 ms.
_SQUEEZED_S = 0.03


class WordAligner(Protocol):
    """What places known words in audio: ``lyre.server.aligner.Aligner`` (the one the server uses),
    a `PhoneAligner`, or a `Transcriber` (Whisper)."""

    async def align(self, audio: np.ndarray, words: list[str], language: str | None,
                    session: Hashable, partial: bool = False) -> Alignment:
        """When each of ``words`` (as `written_words` gives them) is spoken in ``audio`` (float32, 16 kHz,
        at most 30 s); an exception when it cannot say. ``partial`` (passed only for a segment cut on its
        budget, so an aligner that never meets one may leave it out): the audio may stop before the words do;
        an aligner that can tell gives the words it speaks, the first of them (the phone aligner does;
        Whisper's places them all)."""
        ...


@dataclass(frozen=True)
class _Segment:
    """What a segment's words are placed in: its audio in the stream (seconds), and its words as written."""

    start_s: float
    end_s: float
    words: int
    first: str  # its first word as written
    cut: bool  # it ran out of tokens before end-of-speech
    goes_on: bool  # its text starts inside the word the segment before it stops in
    stops_inside: bool  # its text stops inside a word the next segment goes on with


class _Pieces:
    """Where each segment's text lies in the stream's whole text, by the characters other than whitespace, to
    find a segment cut inside a word. Where a segment's are not the text's next (SSML, text read otherwise), it
    knows no more and finds none."""

    def __init__(self, text: str) -> None:
        self._text: str | None = text
        self._at = 0  # past the last segment's last character

    def stops_inside_word(self, segment: str) -> bool:
        text, at = self._text, self._at
        if text is None:
            return False
        for ch in segment:
            if ch.isspace():
                continue
            while at < len(text) and text[at].isspace():
                at += 1
            if at == len(text) or text[at] != ch:
                self._text = None
                return False
            at += 1
        self._at = at
        return 0 < at < len(text) and not text[at].isspace() and len(written_words(text[at - 1:at + 1])) == 1


class WordTimer:
    """See the module docstring. A segment the ``aligner`` fails on gets no words; the others go on."""

    def __init__(self, aligner: WordAligner, session: Hashable, rate: int = 24_000,
                 language: str | None = None) -> None:
        """``language``: the text's (None: each segment's by its script, `script_language`, else English)."""
        self._aligner = aligner
        self._session = session
        self._rate = rate
        self._language = language
        self._chunks: list[np.ndarray] = []  # the stream's audio from sample ``_base`` on
        self._base = 0
        self._pending: list[tuple[asyncio.Task[list[AlignedWord]], _Segment]] = []  # oldest first
        self._pieces: _Pieces | None = None
        self._stops_inside = False  # the last segment's text stops inside a word
        self._held: AlignedWord | None = None  # that word's pieces so far, told with the next segment's
        self._told_s = 0.0  # where the last word told ends
        self._seen = 0  # segments of `follow`'s list already aligned
        self._more = asyncio.Event()  # a segment was added, or `finish` was called
        self._finished = False
        self.failures = 0
        self.aligned_s = 0.0

    def add(self, pcm: np.ndarray) -> None:
        """The stream's next audio (int16 at ``rate``)."""
        if len(pcm):
            self._chunks.append(np.asarray(pcm, dtype=np.int16))

    def expect(self, text: str) -> None:
        """The whole text the stream speaks, known before its segments come: a word cut between two segments
        (longer than a segment may be) is found in it, and told as one word."""
        self._pieces = _Pieces(text)

    def segment(self, text: str, start: int, end: int, said: Said | None = None, cut: bool = False) -> None:
        """Samples [start, end) of the stream speak ``text``: align them (in the background). Segments
        come in order; audio before ``end`` is dropped once it has been cut out. ``said``: what the text's
        words say, where that is not what is written ("$5.20": "five dollars and twenty cents"): the spoken
        words are aligned, and each written word's time spans the words that say it. ``cut``: the segment ran
        out of tokens before end-of-speech (its words not spoken are left out)."""
        audio = self._cut(start, end)
        goes_on = self._stops_inside
        self._stops_inside = self._pieces is not None and self._pieces.stops_inside_word(text)
        language = self._language or script_language(text) or "en"
        timed = _unspaced(said.timed(), language) if said is not None and said.changed else None
        words = [w for _, spoken in timed for w in spoken] if timed is not None else written_words(text, language)
        if not words or not audio.size:
            return  # nothing to say when: a segment of tags only, or one trimmed to nothing
        written = [w for w, _ in timed] if timed is not None else words
        placed = _Segment(start / self._rate, end / self._rate, len(written), written[0], cut, goes_on,
                          self._stops_inside)
        self._pending.append((asyncio.create_task(self._align(audio, words, language, placed, timed)), placed))
        self._more.set()

    def finish(self) -> None:
        """No more segments: `results` ends once the last alignment is out."""
        self._finished = True
        self._more.set()

    async def results(self) -> AsyncIterator[list[AlignedWord]]:
        """Each segment's words, in order, as soon as it is aligned, until `finish` and the last one."""
        while True:
            if self._pending:
                task, placed = self._pending[0]
                found = await task
                self._pending.pop(0)
                yield self._told(found, placed)
            elif self._finished:
                for words in self._last():
                    yield words
                return
            else:
                self._more.clear()
                await self._more.wait()

    def follow(self, spoken: Sequence[Any], cut: Collection[int] = ()) -> None:
        """Align the segments of ``spoken`` (a stream's list of ended segments, each with ``text``,
        ``start`` and ``end``) that were not there at the last call; ``cut``: the indices in ``spoken`` of
        those that ran out of tokens (a stream's ``cuts``)."""
        for index in range(self._seen, len(spoken)):
            ended = spoken[index]
            self.segment(ended.text, ended.start, ended.end, getattr(ended, "said", None), index in cut)
        self._seen = len(spoken)

    def ready(self) -> list[list[AlignedWord]]:
        """The alignments finished so far, in segment order (one still running holds back those after it)."""
        out = []
        while self._pending and self._pending[0][0].done():
            task, placed = self._pending.pop(0)
            out.append(self._told(task.result(), placed))
        return out

    async def rest(self) -> list[list[AlignedWord]]:
        """Every alignment still to come, in order, once each has finished."""
        out = []
        while self._pending:
            task, placed = self._pending[0]
            found = await task
            self._pending.pop(0)
            out.append(self._told(found, placed))
        return out + self._last()

    def close(self) -> None:
        """Cancel what is still running (the stream was cancelled)."""
        for task, _ in self._pending:
            task.cancel()
        self._pending.clear()
        self._chunks.clear()
        self._held = None

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

    def _told(self, found: list[AlignedWord], placed: _Segment) -> list[AlignedWord]:
        """A segment's aligned words as they are told: each inside the segment's audio and after the word
        before, a frame at least (a word with no room there is not in the audio); the pieces of a word cut
        between segments told once, whole, with the segment of its last piece."""
        out: list[AlignedWord] = []
        kept: list[int] = []  # each told word's place among the segment's words
        for i, word in enumerate(found):
            start, end = max(word.start, placed.start_s, self._told_s), min(word.end, placed.end_s)
            if round(end - start, 3) >= _MIN_WORD_S:  # to the millisecond the times are told in
                out.append(AlignedWord(word.text, round(start, 3), round(end, 3)))
                kept.append(i)
                self._told_s = end
        held, self._held = self._held, None
        if held is not None and placed.goes_on and out and kept[0] == 0:
            out[0] = AlignedWord(held.text + out[0].text, held.start, out[0].end)
        elif held is not None:  # the rest of its text, where it goes on here unheard
            out.insert(0, AlignedWord(held.text + (placed.first if placed.goes_on else ""), held.start, held.end))
            kept.insert(0, 0 if placed.goes_on else -1)
        if placed.stops_inside and out and kept[-1] == placed.words - 1:
            self._held = out.pop()
        return out

    def _last(self) -> list[list[AlignedWord]]:
        """The word still held for a segment that never came (the stream ended), if any."""
        held, self._held = self._held, None
        return [[held]] if held is not None else []

    async def _align(self, pcm: np.ndarray, words: list[str], language: str, placed: _Segment,
                     timed: list[tuple[str, tuple[str, ...]]] | None = None) -> list[AlignedWord]:
        try:
            resampler = PcmResampler(self._rate)
            audio = np.concatenate([resampler.push(pcm.astype("<i2").tobytes()), resampler.flush()])
            limit = int(MAX_ALIGN_SECONDS * SAMPLE_RATE)
            # A segment longer than one alignment (a model that talks past its text) is aligned on its
            # first window; its words are placed inside it.
            align, clip, session = self._aligner.align, audio[:limit], self._session
            found = await (align(clip, words, language, session=session, partial=True) if placed.cut
                           else align(clip, words, language, session=session))
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # no aligner, or the worker busy, closed or failed: no words for this segment
            self.failures += 1
            log.warning("word times for %r: a segment could not be aligned: %s", self._session, exc)
            return []
        self.aligned_s += audio.size / SAMPLE_RATE
        said = list(found.words)
        while placed.cut and said and said[-1].end - said[-1].start < _SQUEEZED_S:  # never said: left out
            said.pop()
        spans = said if timed is None else _written(said, timed)
        return [AlignedWord(w.text, w.start + placed.start_s, w.end + placed.start_s) for w in spans]


def _unspaced(timed: list[tuple[str, tuple[str, ...]]], language: str) -> list[tuple[str, tuple[str, ...]]]:
    """``timed`` with each written word that says itself and is several words of a script written without
    spaces ("我想预订。" said as written, beside "5元" said otherwise) split into those words."""
    out = []
    for written, says in timed:
        pieces = written_words(written, language) if says == (written,) else [written]
        out += [(piece, (piece,)) for piece in pieces] if len(pieces) > 1 else [(written, says)]
    return out


def _written(spoken: Sequence[AlignedWord], timed: list[tuple[str, tuple[str, ...]]]) -> list[AlignedWord]:
    """The written words' times from their spoken words': each from its first spoken word's start to its last's
    end (where the alignment stopped early, the written words it reached)."""
    out, k = [], 0
    for written, says in timed:
        said = spoken[k:k + len(says)]
        if not said:
            break
        out.append(AlignedWord(written, said[0].start, said[-1].end))
        k += len(says)
    return out
