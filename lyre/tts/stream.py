"""One utterance end to end, whatever the transport: text -> segments -> engine -> frames -> codec -> PCM.

    stream = tts.open(voice="tara")        # text will come in pieces
    stream.push("Hello there, ")
    stream.push("how are you?")
    stream.end()
    async for chunk in stream:             # int16 PCM, 24 kHz mono, as it is made
        play(chunk)

`TTS.stream(text, ...)` is the same with the whole text pushed at once. When its audio is due is
lyre.tts.deadlines's to say; what it has said so far, lyre.tts.spoken's to keep.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable
from dataclasses import replace
from typing import TYPE_CHECKING

import numpy as np

from lyre import orpheus
from lyre.engine import EngineFull, FinishReason, RequestStream, SamplingParams
from lyre.orpheus import FRAME_TOKENS, FrameAssembler
from lyre.tts.clock import PlaybackClock
from lyre.tts.context import PipelineContext
from lyre.tts.cuts import SegmentBudgets, SegmentCut
from lyre.tts.deadlines import GenerationPace, ListenerDeadlines
from lyre.text.said import Said
from lyre.tts.intake import TextIntake
from lyre.tts.options import PipelineBusy
from lyre.tts.pacing import Pacer
from lyre.tts.reading import TextOptions
from lyre.tts.sampling import AUDIO_CONSTRAINT
from lyre.tts.spoken import SpokenSegment, SpokenSegments
from lyre.tts.trim import LeadingSilenceTrimmer

if TYPE_CHECKING:
    from lyre.codec import CodecStream
    from lyre.engine.adapters import AdapterLease

__all__ = ["SpeechStream", "to_int16"]

_SEED_SPACE = 2**63


def to_int16(pcm: np.ndarray) -> np.ndarray:
    """Float PCM in [-1, 1] to int16, clipping."""
    return (np.clip(pcm, -1.0, 1.0) * 32767.0).astype(np.int16)


class SpeechStream:
    """Async iterator of int16 PCM chunks for one utterance; `push` and `end` feed it text.

    It holds one seed for its whole life. Each segment (a sentence or a few) is one engine request, submitted as
    soon as the segment before it has finished generating, so it generates while that one's tail is decoded and
    played; every segment is trimmed by the same rules. A streamed request (``streamed``) tells the engine and
    the codec when its listener would run dry, so the most pressing streams go first. Closing it (or cancelling
    the task that iterates it) aborts its engine requests and drops its codec work.
    """

    def __init__(self, context: PipelineContext, request_id: str, voice: str | None, sampling: SamplingParams,
                 trim: bool, streamed: bool, intake: TextIntake, adapter: str | None = None,
                 prefix: tuple[int, ...] = (), named: str | None = None, text: TextOptions | None = None,
                 capped: bool = False) -> None:
        """``voice``: the speaker name the prompts use; ``adapter``: the LoRA adapter that speaks it, if any;
        ``prefix``: ids every prompt opens with (a reference voice's turn); ``named``: the voice as it was
        asked for (an adapter's or a reference voice's name, a model voice; default: the adapter or the voice);
        ``text``: how its segments' text is read; ``capped``: ``sampling.max_tokens`` is the client's cap for
        every segment, else each segment gets the budget its spoken words need (lyre.tts.budget)."""
        self.request_id = request_id
        self.voice = voice
        self.adapter = adapter
        self.prefix = prefix
        self.named = named or adapter or voice
        self.intake = intake
        self.clock = PlaybackClock(context.playback_rate)
        self.streamed = streamed
        self.segments = 0  # started so far
        self.frames = self.samples = self.trimmed_samples = 0
        self.prompt_tokens = 0
        self.finish_reasons: list[FinishReason] = []  # one per segment
        self.text = text or TextOptions()
        self.budgets = SegmentBudgets(sampling.max_tokens, capped, context.cuts, request_id, self.text.language)
        self.cuts: list[SegmentCut] = self.budgets.cuts  # segments that ran out before end-of-speech, so far
        self.created_at = time.perf_counter()
        self.first_chunk_at: float | None = None
        self.segment_started: list[float] = []  # when each segment's generation was submitted
        self.segment_done: list[float] = []  # when each segment's last chunk was handed out
        self.sampling = sampling  # the stream's; each segment's seed follows from its seed
        self._said = SpokenSegments()
        self._deadlines = ListenerDeadlines(context, self.clock, streamed)
        if streamed:  # its listener counts for admission from now (lyre.tts.listeners) until it ends or closes
            context.listeners.add(self.clock)
        self._ctx = context
        self._trim = trim
        self._live: list[RequestStream] = []  # engine requests not yet fully consumed, oldest first
        self._codecs: list[CodecStream] = []  # the codec's streams open for its segments
        self._pacer = Pacer(context.config.pacing)
        self._held: list[np.ndarray] = []  # audio held back until the first chunk is long enough (lyre.tts.pacing)
        self._lease: AdapterLease | None = None  # the adapter held for the stream's life
        self._closed = False
        self._agen = self._run()

    # -- text in ------------------------------------------------------------------
    def push(self, text: str) -> None:
        """More text, joined to the rest exactly as given (TextError when the total is too long)."""
        self.intake.push(text)

    def end(self) -> None:
        """No more text: pending text is spoken, then the stream ends (SSML is read now: TextError if bad)."""
        self.intake.end()

    @property
    def warnings(self) -> list[str]:
        """What of its SSML was not understood (and was read as its text)."""
        return self.intake.warnings

    # -- figures ------------------------------------------------------------------
    @property
    def started_at(self) -> float:
        """perf_counter() of the first text (of creation, before any)."""
        return self.intake.first_text_at or self.created_at

    @property
    def ttfa_s(self) -> float | None:
        """Seconds from the first text to the first audio chunk."""
        return None if self.first_chunk_at is None else self.first_chunk_at - self.started_at

    @property
    def finish_reason(self) -> FinishReason | None:
        """The stream's: the first segment's that did not stop on its own, else STOP."""
        unusual = [r for r in self.finish_reasons if r is not FinishReason.STOP]
        return unusual[0] if unusual else (FinishReason.STOP if self.finish_reasons else None)

    @property
    def spoken(self) -> list[SpokenSegment]:
        """The segments whose audio is all out, in order."""
        return self._said.spoken

    def on_spoken(self, callback: Callable[[SpokenSegment], None]) -> None:
        """Call ``callback`` with each segment as soon as its audio is all out (before the stream waits for
        more text), after its last chunk has been handed out."""
        self._said.on_spoken(callback)

    def segments_so_far(self) -> list[SpokenSegment]:
        """`spoken`, then the segment whose audio was coming out when the stream stopped or is now (its
        ``end``: the audio out so far)."""
        return self._said.so_far(self.samples)

    @property
    def trimmed_ms(self) -> float:
        return 1000.0 * self.trimmed_samples / orpheus.SAMPLE_RATE

    @property
    def audio_seconds(self) -> float:
        return self.samples / orpheus.SAMPLE_RATE

    # -- audio out ----------------------------------------------------------------
    def __aiter__(self) -> SpeechStream:
        return self

    async def __anext__(self) -> np.ndarray:
        return await self._agen.__anext__()

    def leave(self) -> None:
        """Its listener no longer counts for admission: for a stream dropped before it ran (`aclose` does it too)."""
        self._ctx.listeners.discard(self.clock)

    def join(self) -> None:
        """Its listener counts for admission again (after `leave`, while its request waited in the queue), if
        someone plays it as it comes and it is still open."""
        if self.streamed and not self._closed:
            self._ctx.listeners.add(self.clock)

    async def aclose(self) -> None:
        self._closed = True
        self.leave()
        await self._agen.aclose()
        if self._lease is not None:  # held by `hold_voice` before the stream ever ran
            self._lease.release()
            self._lease = None

    def _start(self, text: str | Said, deadline: float | None) -> RequestStream:
        """Submit the next segment (the prompt is built here: a bad segment fails the stream)."""
        index = self.segments
        said = text if isinstance(text, Said) else self._ctx.front.read(text, self.text.language, self.text.normalize)
        prompt = [*self.prefix, *orpheus.prompt_ids(self._ctx.tokenizer, said.spoken, self.voice)]
        tokens = self.budgets.tokens(said.spoken, self._ctx.positions_after(len(prompt)))
        params = replace(self.sampling, seed=self._segment_seed(index), max_tokens=tokens)
        self._ctx.check_room(len(prompt), params)
        try:
            stream = self._ctx.engine.generate(prompt, params, request_id=f"{self.request_id}/{index}",
                                               constraint=AUDIO_CONSTRAINT, adapter=self.adapter,
                                               playback=self._deadlines.playback(deadline), cache_output=False)
        except EngineFull as exc:
            raise PipelineBusy(str(exc)) from None
        self._live.append(stream)
        self.segments += 1
        self.budgets.started(said.written, tokens)
        self._said.started(said)
        self.prompt_tokens += len(prompt)
        self.segment_started.append(time.perf_counter())
        return stream

    def _segment_seed(self, index: int) -> int:
        return ((self.sampling.seed or 0) + index) % _SEED_SPACE

    async def _run(self) -> AsyncIterator[np.ndarray]:
        cfg = self._ctx.config
        try:
            await self.hold_voice()
            text = await self.intake.next_words(idle_since=time.monotonic())
            if (silence := self._silent()) is not None:  # a break before the first words
                yield silence
            current = None if text is None else self._start(text, deadline=None)
            while current is not None:
                index = self.segments - 1
                self._said.speaking(index, self.samples)
                trimmer = LeadingSilenceTrimmer(cfg.trim if index == 0 else cfg.segment_trim) if self._trim else None
                codec = self._ctx.codec.open(seed=self._segment_seed(index))
                self._codecs.append(codec)
                assembler, pace, frames = FrameAssembler(), GenerationPace(), 0
                # Wake once a frame has come (a few, where the listener is well ahead: lyre.tts.pacing), not
                # once per token; every frame made meanwhile goes to the codec in one decode.
                while not current.ended or current.ready:
                    ahead, rates = self.clock.ahead(), self._deadlines.rates(pace)  # None: nobody plays it live
                    batch = await current.take(self._pacer.frames_wanted(ahead, rates) * FRAME_TOKENS
                                               - assembler.pending, within=self._pacer.patience(ahead, rates))
                    came = [frame for token in batch if (frame := assembler.push(token)) is not None]
                    pace.came(len(came))
                    frames += len(came)
                    if came and (chunk := self._out(await codec.decode(came, self._deadlines.decode_due()),
                                                    trimmer, pace)) is not None:
                        yield chunk
                self._finished(current, frames, index)
                # A next segment whose text is complete generates while this one's tail decodes and plays.
                following = None
                if (text := self.intake.ready_words()) is not None:
                    following = self._start(text, deadline=current.request.deadline)
                tail = await codec.finish(self._deadlines.decode_due())
                self._codecs.remove(codec)
                if (chunk := self._out(tail, trimmer, pace, last=True)) is not None:
                    yield chunk
                if trimmer is not None and (chunk := self._out(trimmer.flush(), None, last=True)) is not None:
                    yield chunk
                self._live.remove(current)
                self.segment_done.append(time.perf_counter())
                self._said.ended(self.samples)
                if following is None and (text := await self.intake.next_words(idle_since=time.monotonic())) is not None:
                    following = self._start(text, deadline=self.clock.runs_dry_at())
                if (silence := self._silent()) is not None:  # a break between this segment and the next
                    yield silence
                current = following
        finally:
            self.leave()
            for stream in self._live:
                await stream.aclose()
            self._live.clear()
            for codec in self._codecs:
                codec.close()
            self._codecs.clear()
            if self._lease is not None:
                self._lease.release()
                self._lease = None

    def _silent(self) -> np.ndarray | None:
        """The silence SSML's breaks ask for before the next words, if any."""
        ms, self.intake.pause_ms = self.intake.pause_ms, 0
        return self._out(np.zeros(ms * orpheus.SAMPLE_RATE // 1000, np.float32), None) if ms else None

    async def hold_voice(self) -> None:
        """Make the stream's adapter resident (loading it on a miss) and hold it until the stream ends;
        nothing for a model voice. Called by the stream itself; a caller may call it first, to answer
        AdapterBusy or AdapterError before any audio. After `aclose` it raises nothing and holds nothing."""
        if self.adapter is None or self._lease is not None or self._closed:
            return
        assert self._ctx.adapters is not None
        lease = await self._ctx.adapters.lease(self.adapter)
        if self._closed:  # closed while it loaded
            lease.release()
            return
        self._lease = lease

    def _finished(self, stream: RequestStream, frames: int, index: int) -> None:
        self.frames += frames
        if (reason := stream.finish_reason) is not None:
            self.finish_reasons.append(reason)
        if reason is FinishReason.LENGTH:  # ran out of tokens before end-of-speech: words may be missing
            self.budgets.ran_out(index)
        if reason is FinishReason.ERROR:
            raise RuntimeError(f"request {self.request_id}: generation failed")

    def _out(self, pcm: np.ndarray, trimmer: LeadingSilenceTrimmer | None, pace: GenerationPace | None = None,
             last: bool = False) -> np.ndarray | None:
        """``pcm`` as the chunk to send (None: nothing to send yet). Before the stream's first chunk, audio of a
        segment (``pace``: its generation so far) is held until it covers what comes after it, or the segment
        ends (``last``)."""
        if trimmer is not None:
            before = trimmer.trimmed_samples
            pcm = trimmer.push(pcm)
            self.trimmed_samples += trimmer.trimmed_samples - before
        if self.first_chunk_at is None and pace is not None:
            self._held.append(pcm)
            if not last and sum(map(len, self._held)) < self._pacer.first_samples(self._deadlines.rates(pace)):
                return None
        if self._held:
            pcm = np.concatenate(self._held if self.first_chunk_at is None and pace is not None
                                 else [*self._held, pcm])
            self._held.clear()
        if not len(pcm):
            return None
        if self.first_chunk_at is None:
            self.first_chunk_at = time.perf_counter()
            self._deadlines.start_playback(self.clock.start(), self.trimmed_samples, self._live)
        self.samples += len(pcm)
        self.clock.send(len(pcm))
        return to_int16(pcm)
