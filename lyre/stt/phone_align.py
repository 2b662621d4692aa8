"""Forced alignment by phones: English word times from an HMM acoustic model (pocketsphinx's en-us).

    aligner = PhoneAligner()
    found = aligner.align_now(audio, ["Your", "order", "of", "3", "items."])  # float32, 16 kHz
    found = await aligner.align(audio, words, "en", session="ctx-1")        # on its worker thread

Each written word is said as `lyre.text.verbalize` reads it ("3" as "three", "Dr." as
doctor or drive: every reading is an alternative pronunciation and the audio picks)
and pronounced from CMUdict or, where the dictionary lacks it, gruut's G2P
(`lyre.stt.pronounce`). The text is then aligned to the audio in two passes of
pocketsphinx's decoder: a word-level pass through a grammar of just those words
with optional silence between them, then a phone-level pass. The words' spans are
read from the phones (`lyre.stt.phone_spans`: edges brought in to the sound where a
word meets a pause, boundaries moved onto the pauses between words).

Audio that may stop before its words do (a segment cut on its token budget) is
aligned with ``partial``: the word-level grammar may end after any word, so the
words the audio speaks come back, a prefix of them, and the rest are left out
(on espeak-ng sentences cut at 40% and 70%, it kept every word fully spoken and
at most the one cut off, where the full grammar found no path at all). Words
found that leave more loud audio after them than they span, or over a second of
it, fail as below.

If the first pass finds no path through the words (speech that does not say
them, or noise), it is tried again with wider beams; if that fails too,
`PhoneAlignmentFailed` says so and the caller falls back (lyre.server.aligner:
to the Whisper aligner). Both are counted in `stats`.
"""

from __future__ import annotations

import asyncio
import re
import threading
from collections.abc import Hashable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np

from lyre.stt.align import AlignedWord, Alignment
from lyre.stt.audio import SAMPLE_RATE
from lyre.stt.job_queue import TranscriberBusy, TranscriberClosed
from lyre.stt.phone_spans import Phones, frame_levels, loud_after, word_spans
from lyre.stt.pronounce import MAX_PRONUNCIATIONS, Pronouncer
from lyre.text.verbalize import readings

__all__ = ["LANGUAGES", "PhoneAligner", "PhoneAlignerBusy", "PhoneAlignerStats", "PhoneAlignmentFailed"]

LANGUAGES = ("en",)  # the acoustic model and dictionary are American English
# Wider than pocketsphinx's defaults (1e-48, 7e-29, 1e-48) by many orders: slower, but finds a path
# through speech the default beams lose (a long stretch the model scores badly).
_WIDE_BEAMS = {"beam": 1e-80, "wbeam": 1e-60, "pbeam": 1e-80}
_MAX_ADDED_WORDS = 20_000  # words added to a decoder's dictionary before it is made afresh
# Audio cut short stops while its speech goes on: the first words found in it end at most the word it cut off
# (a long one, a second) before its sound does, and no more than they last themselves. A prefix ending long
# before (noise, speech that says other words) is no alignment of it.
_CUT_WORD_FRAMES = 100


class PhoneAlignmentFailed(RuntimeError):
    """The words could not be aligned to the audio (the message says why)."""


class PhoneAlignerBusy(TranscriberBusy):
    """Too many alignments waiting: this one was refused (a busy worker, as the transcriber's)."""


@dataclass(frozen=True)
class PhoneAlignerStats:
    alignments: int
    aligned_seconds: float
    wide_beam_retries: int  # first passes that found no path and were tried again with wider beams
    failures: int  # alignments that failed even then
    guessed_words: int  # words the dictionary lacked, pronounced by the G2P
    pending: int


class _Decoder:
    """One pocketsphinx decoder and the words added to its dictionary."""

    def __init__(self, **beams: float) -> None:
        self._beams = beams
        self.decoder = self._fresh()

    def _fresh(self):  # -> pocketsphinx.Decoder
        from pocketsphinx import Decoder

        self._added = 0
        # FATAL: a failed search is an exception here, counted, not a line on the server's stderr
        return Decoder(samprate=SAMPLE_RATE, lm=None, loglevel="FATAL", bestpath=False, **self._beams)

    def lookup(self, word: str) -> str | None:
        return self.decoder.lookup_word(word)

    def vocabulary(self, tokens: dict[str, list[str]]) -> None:
        """Add each token's pronunciations unless the dictionary has it."""
        if self._added > _MAX_ADDED_WORDS:
            self.decoder = self._fresh()  # a fresh dictionary: memory stays bounded
        new = [(token if n == 1 else f"{token}({n})", phones) for token, pronunciations in tokens.items()
               if self.decoder.lookup_word(token) is None for n, phones in enumerate(pronunciations, start=1)]
        for i, (name, phones) in enumerate(new):
            self.decoder.add_word(name, phones, update=i == len(new) - 1)  # the search rebuilt once
        self._added += len(new)

    def run(self, pcm: bytes, tokens: list[str], partial: bool = False) -> list[tuple[str, Phones]] | None:
        """Each segment's name and its phones' (first frame, frames), fillers included; None: no path.
        ``partial``: the words may stop after any of them (the phones of those said come back)."""
        decoder = self.decoder
        if partial and (tokens := self._said(pcm, tokens)) is None:
            return None
        try:
            decoder.set_align_text(" ".join(tokens))
        except RuntimeError as exc:  # a word it will not take: no alignment here, the caller falls back
            raise PhoneAlignmentFailed(f"pocketsphinx refused the words: {exc}") from exc
        decoder.start_utt()
        decoder.process_raw(pcm, full_utt=True)
        decoder.end_utt()
        if decoder.hyp() is None:
            return None
        decoder.set_alignment()
        decoder.start_utt()
        decoder.process_raw(pcm, full_utt=True)
        decoder.end_utt()
        found = decoder.get_alignment()
        if found is None:
            return None
        # Read inside the iteration: a word's phones are valid only while its iterator is.
        return [(word.name, [(phone.start, phone.duration) for phone in word]) for word in found]

    def _said(self, pcm: bytes, tokens: list[str]) -> list[str] | None:
        """The first of ``tokens`` the audio says, by a grammar that may end after any word (None: not even one)."""
        decoder, n = self.decoder, len(tokens)
        try:  # states 0..n: word k from state k to k + 1, and from every state after a word, the end
            grammar = decoder.create_fsg("said", 0, n, [*((k, k + 1, 1.0, token) for k, token in enumerate(tokens)),
                                                        *((k, n, 1.0) for k in range(1, n))])
            decoder.add_fsg("said", grammar)
            decoder.activate_search("said")
        except (RuntimeError, ValueError) as exc:
            raise PhoneAlignmentFailed(f"pocketsphinx refused the words: {exc}") from exc
        decoder.start_utt()
        decoder.process_raw(pcm, full_utt=True)
        decoder.end_utt()
        hyp = decoder.hyp()
        said = [] if hyp is None else [w for w in hyp.hypstr.split() if not w.startswith(("<", "["))]
        return tokens[:len(said)] or None


class PhoneAligner:
    """See the module docstring. One worker thread; ``max_pending`` alignments may wait for it."""

    def __init__(self, max_pending: int = 64) -> None:
        self._decoder = _Decoder()
        self._wide: _Decoder | None = None
        self._pronouncer = Pronouncer(self._decoder.lookup)
        self._worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="lyre-phone-align")
        self._max_pending = max_pending
        self._lock = threading.Lock()
        self._pending = 0
        self._counts = {"alignments": 0, "wide": 0, "failures": 0}
        self._aligned_s = 0.0
        self._closed = False

    def check_language(self, language: str | None) -> None:
        if (language or "en") not in LANGUAGES:
            raise ValueError(f"language: the phone aligner aligns {', '.join(LANGUAGES)}, not {language!r}")

    async def align(self, audio: np.ndarray, words: list[str], language: str | None = "en",
                    session: Hashable = None, partial: bool = False) -> Alignment:
        """`align_now` on the worker thread, in the order asked (``session`` is not used: alignments are
        short); PhoneAlignerBusy when too many wait, TranscriberClosed once closed."""
        self.check_language(language)
        with self._lock:
            if self._closed:
                raise TranscriberClosed("the phone aligner is closed")
            if self._pending >= self._max_pending:
                raise PhoneAlignerBusy(f"{self._pending} alignments are waiting for the phone aligner")
            self._pending += 1
        try:
            return await asyncio.get_running_loop().run_in_executor(self._worker, self.align_now, audio, words,
                                                                    partial)
        finally:
            with self._lock:
                self._pending -= 1

    def align_now(self, audio: np.ndarray, words: list[str], partial: bool = False) -> Alignment:
        """When each of ``words`` (as written) is spoken in ``audio`` (float32, 16 kHz), in this thread.
        ``partial``: the audio may stop before the words do; the words it speaks come back (at least one)."""
        duration = audio.size / SAMPLE_RATE
        if not words:
            return Alignment((), duration)
        tokens, vocabulary = self._tokens(words)
        pcm = (np.clip(audio, -1.0, 1.0) * 32767).astype("<i2").tobytes()
        self._decoder.vocabulary(vocabulary)
        segments = self._decoder.run(pcm, tokens, partial)
        if segments is None:
            self._counts["wide"] += 1
            if self._wide is None:
                self._wide = _Decoder(**_WIDE_BEAMS)
            self._wide.vocabulary(vocabulary)
            segments = self._wide.run(pcm, tokens, partial)
        if segments is None:
            self._counts["failures"] += 1
            raise PhoneAlignmentFailed("no path through the words in the audio, even with wide beams")
        level = frame_levels(audio)
        spans = word_spans(segments, level)
        if not spans or len(spans) > len(words) or (len(spans) < len(words) and not partial):
            self._counts["failures"] += 1
            raise PhoneAlignmentFailed(f"{len(spans)} words aligned of {len(words)}")
        left = loud_after(level, spans[-1][1])  # loud frames after the words found: speech that goes on
        if len(spans) < len(words) and left > min(_CUT_WORD_FRAMES, spans[-1][1] - spans[0][0]):
            self._counts["failures"] += 1
            raise PhoneAlignmentFailed(f"{len(spans)} words of {len(words)} found, and sound long after them")
        self._counts["alignments"] += 1
        self._aligned_s += duration
        end = int(np.ceil(duration * 100))
        return Alignment(tuple(AlignedWord(w, round(min(a, end - 1) / 100, 3), round(min(b, end) / 100, 3))
                               for w, (a, b) in zip(words, spans)), duration)

    def _tokens(self, words: list[str]) -> tuple[list[str], dict[str, list[str]]]:
        """A dictionary word per written word, and the pronunciations of those to add: a plain word is
        itself; one said otherwise ("42", "Dr.") is a word named after its readings, one pronunciation
        per reading."""
        tokens: list[str] = []
        vocabulary: dict[str, list[str]] = {}
        for word in words:
            said = readings(word)
            if len(said) == 1 and len(said[0]) == 1:
                token = said[0][0]
                pronunciations = self._pronouncer.pronounce(token)
            else:
                token = "|".join("_".join(r) for r in said)
                pronunciations = []
                for reading in said:
                    parts = [self._pronouncer.pronounce(w) for w in reading]
                    if all(parts):
                        pronunciations.append(" ".join(p[0] for p in parts))
            if not pronunciations or not re.fullmatch(r"\S+", token):
                raise PhoneAlignmentFailed(f"no English pronunciation for {word!r}")
            tokens.append(token)
            vocabulary[token] = pronunciations[:MAX_PRONUNCIATIONS]
        return tokens, vocabulary

    def stats(self) -> PhoneAlignerStats:
        with self._lock:
            pending = self._pending
        return PhoneAlignerStats(alignments=self._counts["alignments"], aligned_seconds=self._aligned_s,
                                 wide_beam_retries=self._counts["wide"], failures=self._counts["failures"],
                                 guessed_words=self._pronouncer.guessed, pending=pending)

    def close(self) -> None:
        with self._lock:
            self._closed = True
        self._worker.shutdown(wait=True, cancel_futures=True)
