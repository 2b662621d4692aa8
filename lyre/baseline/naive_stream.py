"""One request of the naive baseline (lyre.baseline.tts): all its text spoken as one transformers generate
in a thread of its own, frames decoded by the reference sliding window as their tokens come, with the
figures and word-time record of lyre's own `SpeechStream`."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncIterator, Callable
from typing import Protocol

import numpy as np

from lyre import orpheus
from lyre.engine import FinishReason, SamplingParams
from lyre.orpheus import FrameAssembler, InvalidAudioToken, TextTokenizer
from lyre.tts.clock import PlaybackClock
from lyre.tts.context import TTSConfig
from lyre.tts.cuts import CutCounts, SegmentBudgets, SegmentCut
from lyre.tts.reading import TextFront, TextOptions
from lyre.tts.spoken import SpokenSegment
from lyre.tts.stream import to_int16
from lyre.tts.text import TextError, normalize

from lyre.baseline.generate import Generation, NaiveEngine
from lyre.baseline.reference_decode import NaiveCodec, ReferenceWindows

__all__ = ["NaivePipeline", "NaiveSpeechStream"]


class NaivePipeline(Protocol):
    """What a naive stream uses of its pipeline (`NaiveTTS`): the generate, the codec, the tokenizer and the
    text limit."""

    engine: NaiveEngine
    codec: NaiveCodec
    tokenizer: TextTokenizer
    config: TTSConfig
    cuts: CutCounts
    front: TextFront
    playback_rate: float  # its listeners play at this times real time


class NaiveSpeechStream:
    """Async iterator of int16 PCM chunks for one request, with `SpeechStream`'s figures.

    Generation starts at the first iteration; `aclose` (or cancelling the
    task that iterates) stops it at the next token.
    """

    def __init__(self, tts: NaivePipeline, request_id: str, voice: str | None, sampling: SamplingParams,
                 prompt: list[int] | None = None, text: TextOptions | None = None, capped: bool = False,
                 streamed: bool = True) -> None:
        """``prompt``: ready-made prompt ids instead of text (then no text may be pushed); ``text``: how the
        text is read (normalised or not, its language); ``capped``: the client set ``sampling.max_tokens``
        (else it is the reference's own cap); ``streamed``: played as it comes, its listener modelled at real
        time (or the pipeline's ``playback_rate``) from the first chunk (``clock``), as lyre's streams' are."""
        self.request_id = request_id
        self.voice = voice
        self.segments = 1
        self.frames = 0  # from valid 7-token groups
        self.tokens = 0  # every token generated, valid or not
        self.dropped_tokens = 0  # not a valid audio token at its frame position
        self.trimmed_samples = 0  # never trims
        self.finish_reason: FinishReason | None = None
        self.budgets = SegmentBudgets(sampling.max_tokens, capped, tts.cuts, request_id)
        self.cuts: list[SegmentCut] = self.budgets.cuts  # the one segment, if it ran out before end-of-speech
        self.created_at = time.perf_counter()
        self.first_text_at: float | None = None
        self.first_chunk_at: float | None = None
        self.samples = 0
        self.streamed = streamed
        self.clock = PlaybackClock(tts.playback_rate)
        self.segment_started: list[float] = []
        self.segment_done: list[float] = []
        self.spoken: list[SpokenSegment] = []  # the one segment, once its audio is all out (for word times)
        self._on_spoken: list[Callable[[SpokenSegment], None]] = []
        self._tts = tts
        self.text = text or TextOptions()
        self.warnings: list[str] = []  # reads no SSML, so never any
        self._text: list[str] = []
        self._ended = asyncio.Event()
        self._prompt: list[int] = prompt or []
        if prompt:
            self._ended.set()
        self._sampling = sampling
        self._cancel = threading.Event()
        self._generation: Generation | None = None
        self._agen = self._run()

    def push(self, text: str) -> None:
        """More text; it is all spoken, as one generation, once `end` says it has come."""
        if self._ended.is_set():
            raise TextError("this stream's text has ended; start a new one")
        if (chars := sum(map(len, self._text)) + len(text)) > self._tts.config.max_input_chars:
            raise TextError(f"text is {chars} characters, over the limit of {self._tts.config.max_input_chars}")
        self.first_text_at = self.first_text_at or time.perf_counter()
        self._text.append(text)

    def end(self) -> None:
        self._ended.set()

    @property
    def started_at(self) -> float:
        return self.first_text_at or self.created_at

    @property
    def ttfa_s(self) -> float | None:
        return None if self.first_chunk_at is None else self.first_chunk_at - self.started_at

    @property
    def trimmed_ms(self) -> float:
        return 0.0

    @property
    def prompt_tokens(self) -> int:
        return len(self._prompt)

    @property
    def audio_seconds(self) -> float:
        return self.samples / orpheus.SAMPLE_RATE

    @property
    def generating(self) -> bool:
        """Whether this request's generate thread is still running."""
        return self._generation is not None and self._generation.running

    def on_spoken(self, callback: Callable[[SpokenSegment], None]) -> None:
        """Call ``callback`` with the one segment once its audio is all out, as `SpeechStream` does."""
        self._on_spoken.append(callback)

    def segments_so_far(self) -> list[SpokenSegment]:
        return list(self.spoken)

    async def hold_voice(self) -> None:
        """The baseline has no cloned voices: nothing to hold."""

    def __aiter__(self) -> NaiveSpeechStream:
        return self

    async def __anext__(self) -> np.ndarray:
        return await self._agen.__anext__()

    def leave(self) -> None:
        """Nothing: the naive pipeline counts no listeners for admission (`SpeechStream.leave`)."""

    def join(self) -> None:
        """Nothing, as `leave` (`SpeechStream.join`)."""

    async def aclose(self) -> None:
        self._cancel.set()
        await self._agen.aclose()

    async def _run(self) -> AsyncIterator[np.ndarray]:
        engine, codec = self._tts.engine, self._tts.codec
        await self._ended.wait()
        clean = ""  # no text to time words by when the prompt came ready-made
        if not self._prompt:
            if not "".join(self._text).strip():
                return
            clean = normalize("".join(self._text), self._tts.config.max_input_chars)
            said = self._tts.front.read(clean, self.text.language, self.text.normalize)
            self._prompt = orpheus.prompt_ids(self._tts.tokenizer, said.spoken, self.voice)
        queue: asyncio.Queue[int | None] = asyncio.Queue()
        self.segment_started.append(time.perf_counter())
        self.budgets.started(clean, self._sampling.max_tokens)
        generation = self._generation = engine.start(self._prompt, self._sampling, queue, self._cancel)
        assembler = FrameAssembler()
        windows = ReferenceWindows(self._sampling.seed)
        last: int | None = None
        try:
            while (item := await queue.get()) is not None:
                self.tokens += 1
                last = item
                if item == orpheus.STOP_TOKEN:
                    continue  # generate ends here; its end() follows
                try:
                    frame = assembler.push(item)
                except InvalidAudioToken:
                    self.dropped_tokens += 1
                    continue
                if frame is None:
                    continue
                self.frames += 1
                if (window := windows.push(frame)) is not None:
                    yield self._out(await asyncio.to_thread(codec.decode, window))
            await asyncio.to_thread(generation.thread.join)  # it has sent its last token: ends at once
            if generation.error is not None:
                self.finish_reason = FinishReason.ERROR
                raise RuntimeError(f"request {self.request_id}: generation failed") from generation.error
            if last == orpheus.STOP_TOKEN:
                self.finish_reason = FinishReason.STOP
            elif self.tokens >= self._sampling.max_tokens:
                self.finish_reason = FinishReason.LENGTH
                self.budgets.ran_out(0)
            else:  # the pipeline was shut down under it
                self.finish_reason = FinishReason.ABORT
            self.segment_done.append(time.perf_counter())
            if clean:
                self.spoken.append(segment := SpokenSegment(clean, 0, self.samples, said if said.changed else None))
                for callback in self._on_spoken:
                    callback(segment)
        finally:
            self._cancel.set()

    def _out(self, pcm: np.ndarray) -> np.ndarray:
        if self.first_chunk_at is None:
            self.first_chunk_at = time.perf_counter()
            self.clock.start()
        self.clock.send(len(pcm))
        self.samples += len(pcm)
        return to_int16(pcm)
