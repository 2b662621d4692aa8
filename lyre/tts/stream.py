"""One request end to end: text -> segments -> engine -> frames -> codec -> trimmed PCM.

    tts = TTS.load()                       # the demo model when none is named
    async for chunk in tts.stream("Hello there.", voice="tara"):
        play(chunk)                        # int16 PCM, 24 kHz mono
"""

from __future__ import annotations

import itertools
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from lyre import orpheus
from lyre.codec import BatchPolicy, CodecService, SnacDecoder, load_snac
from lyre.demo_model import or_demo
from lyre.engine import Engine, EngineConfig, FinishReason, RequestStream, SamplingParams
from lyre.model_folder import load_tokenizer, resolve
from lyre.orpheus import FRAME_TOKENS, FrameAssembler, TextTokenizer
from lyre.tts.speech import AUDIO_CONSTRAINT, MODEL_FILES, request_sampling
from lyre.tts.segments import split_segments
from lyre.tts.text import DEFAULT_SEGMENT_CHARS, MAX_INPUT_CHARS, normalize
from lyre.tts.trim import LeadingSilenceTrimmer, TrimConfig
from lyre.tts.voices import Voices, load_voices
from lyre.tts.windows import WindowPlanner, WindowPolicy

__all__ = ["SpeechStream", "TTS", "TTSConfig", "to_int16"]


@dataclass(frozen=True)
class TTSConfig:
    """How requests are split, decoded and trimmed."""

    max_input_chars: int = MAX_INPUT_CHARS
    segment_chars: int = DEFAULT_SEGMENT_CHARS
    window: WindowPolicy = field(default_factory=WindowPolicy)
    trim: TrimConfig = field(default_factory=TrimConfig)
    # Later segments keep a longer pad: a natural pause between sentences.
    segment_trim: TrimConfig = field(default_factory=lambda: TrimConfig(pad_ms=150.0))
    # (alias, voice) pairs over the defaults and voices.json's aliases, e.g. (("alloy", "leah"),).
    voice_aliases: tuple[tuple[str, str], ...] = ()
    codec_dtype: str = "float32"  # or "bfloat16": what SNAC runs in
    codec_graphs: bool = False  # replay SNAC batches from CUDA graphs (CUDA only)


def to_int16(pcm: np.ndarray) -> np.ndarray:
    """Float PCM in [-1, 1] to int16, clipping."""
    return (np.clip(pcm, -1.0, 1.0) * 32767.0).astype(np.int16)


class SpeechStream:
    """Async iterator of int16 PCM chunks for one request.

    Closing it (or cancelling the task that iterates it) aborts the engine
    request and drops its pending codec windows.
    """

    def __init__(self, tts: TTS, request_id: str, segments: list[list[int]], sampling: SamplingParams,
                 trim: bool) -> None:
        self.request_id = request_id
        self.segments = len(segments)
        self.frames = 0
        self.trimmed_samples = 0
        self.finish_reason: FinishReason | None = None
        self.started_at = time.perf_counter()
        self.first_chunk_at: float | None = None
        self.samples = 0
        self.segment_started: list[float] = []  # when each segment's generation was submitted
        self.segment_done: list[float] = []  # when each segment's last chunk was handed out
        self._tts = tts
        self._prompts = segments
        self._sampling = sampling
        self._trim = trim
        self._live: list[RequestStream] = []
        self._agen = self._run()

    @property
    def trimmed_ms(self) -> float:
        return 1000.0 * self.trimmed_samples / orpheus.SAMPLE_RATE

    @property
    def prompt_tokens(self) -> int:
        return sum(len(p) for p in self._prompts)

    @property
    def audio_seconds(self) -> float:
        return self.samples / orpheus.SAMPLE_RATE

    def __aiter__(self) -> SpeechStream:
        return self

    async def __anext__(self) -> np.ndarray:
        return await self._agen.__anext__()

    async def aclose(self) -> None:
        await self._agen.aclose()

    def _ahead(self) -> float:
        """Seconds of emitted audio that have not played yet (playback starts at the first chunk)."""
        if self.first_chunk_at is None:
            return 0.0
        return self.audio_seconds - (time.perf_counter() - self.first_chunk_at)

    def _segment_seed(self, index: int) -> int:
        return ((self._sampling.seed or 0) + index) % 2**63

    def _start(self, index: int) -> RequestStream:
        params = replace(self._sampling, seed=self._segment_seed(index))
        stream = self._tts.engine.generate(
            self._prompts[index], params, request_id=f"{self.request_id}/{index}", constraint=AUDIO_CONSTRAINT
        )
        self._live.append(stream)
        self.segment_started.append(time.perf_counter())
        return stream

    async def _run(self) -> AsyncIterator[np.ndarray]:
        codec, cfg = self._tts.codec, self._tts.config
        try:
            upcoming = self._start(0)
            for index in range(len(self._prompts)):
                tokens, upcoming = upcoming, None
                trimmer = LeadingSilenceTrimmer(cfg.trim if index == 0 else cfg.segment_trim) if self._trim else None
                planner = WindowPlanner(cfg.window, seed=self._segment_seed(index))
                assembler = FrameAssembler()
                # Wake once the planner can use what has arrived (a frame, or a whole wide
                # window while the listener is far ahead), not once per token; every token
                # made meanwhile comes at once, so a window covers all the new frames.
                while batch := await tokens.take(planner.frames_wanted(self._ahead()) * FRAME_TOKENS
                                                 - assembler.pending):
                    for token in batch:
                        if (frame := assembler.push(token)) is not None:
                            planner.push(frame)
                    while (window := planner.next_window(self._ahead())) is not None:
                        if (chunk := self._out(await codec.decode(window), trimmer)) is not None:
                            yield chunk
                self._live.remove(tokens)
                self.frames += planner.frames
                self.finish_reason = tokens.finish_reason
                if tokens.finish_reason is FinishReason.ERROR:
                    raise RuntimeError(f"request {self.request_id}: generation failed")
                if index + 1 < len(self._prompts):
                    # Start the next sentence now: it generates while this one's tail decodes and plays.
                    upcoming = self._start(index + 1)
                for window in planner.finish():
                    if (chunk := self._out(await codec.decode(window), trimmer)) is not None:
                        yield chunk
                if trimmer is not None:
                    if (chunk := self._out(trimmer.flush(), None)) is not None:
                        yield chunk
                    self.trimmed_samples += trimmer.trimmed_samples
                self.segment_done.append(time.perf_counter())
        finally:
            for stream in self._live:
                await stream.aclose()
            self._live.clear()

    def _out(self, pcm: np.ndarray, trimmer: LeadingSilenceTrimmer | None) -> np.ndarray | None:
        if trimmer is not None:
            pcm = trimmer.push(pcm)
        if not len(pcm):
            return None
        if self.first_chunk_at is None:
            self.first_chunk_at = time.perf_counter()
        self.samples += len(pcm)
        return to_int16(pcm)


class TTS:
    """Text to speech for many concurrent requests: one engine, one codec service."""

    def __init__(self, engine: Engine, tokenizer: TextTokenizer, codec: CodecService, voices: Voices,
                 config: TTSConfig | None = None) -> None:
        self.engine = engine
        self.tokenizer = tokenizer
        self.codec = codec
        self.voices = voices
        self.config = config or TTSConfig()
        self._ids = itertools.count()

    @classmethod
    def load(cls, model: str | Path | None = None, codec: str | Path | None = None,
             engine_config: EngineConfig | None = None, config: TTSConfig | None = None,
             codec_policy: BatchPolicy | None = None) -> TTS:
        """Load model and codec folders (or hub ids); the demo model when none is named."""
        model, codec = or_demo(model, codec)
        engine_config, config = engine_config or EngineConfig(), config or TTSConfig()
        folder = resolve(model, required=MODEL_FILES)
        voices = load_voices(folder, dict(config.voice_aliases))
        tokenizer = load_tokenizer(folder)
        decoder = SnacDecoder(load_snac(codec, device=engine_config.device, dtype=config.codec_dtype),
                              cuda_graphs=config.codec_graphs)
        engine = Engine.from_folder(folder, engine_config, AUDIO_CONSTRAINT.family)
        service = CodecService(decoder, codec_policy or BatchPolicy.for_device(engine_config.device))
        return cls(engine, tokenizer, service, voices, config)

    def stream(self, text: str, voice: str | None = None, sampling: SamplingParams | None = None,
               trim: bool = True, request_id: str | None = None) -> SpeechStream:
        """Speak ``text``; iterate the result for int16 PCM chunks as they are made.

        ``voice`` is one of the model's voices or an alias of one (None: no
        voice in the prompt). Raises ValueError (naming what was wrong) for
        empty or over-long text, an unknown voice, or bad sampling values,
        before any work starts.
        """
        voice = self.voices.resolve(voice)
        clean = normalize(text, self.config.max_input_chars)
        prompts = [orpheus.prompt_ids(self.tokenizer, s, voice) for s in split_segments(clean, self.config.segment_chars)]
        params = request_sampling(sampling)
        longest, room = max(map(len, prompts)), self.engine.config.max_seq_len
        if longest + params.max_tokens > room:
            # Refused here, before any work, rather than when that segment's turn comes.
            raise ValueError(f"max_tokens: {params.max_tokens} plus a {longest}-token prompt is more than the "
                             f"engine's {room} positions per request; lower max_tokens")
        request_id = request_id or f"tts-{next(self._ids)}"
        return SpeechStream(self, request_id, prompts, params, trim)

    async def synthesize(self, text: str, voice: str | None = None, sampling: SamplingParams | None = None,
                         trim: bool = True) -> tuple[np.ndarray, SpeechStream]:
        """The whole utterance at once (int16), and its stream's figures."""
        stream = self.stream(text, voice, sampling, trim)
        chunks = [chunk async for chunk in stream]
        return (np.concatenate(chunks) if chunks else np.zeros(0, np.int16)), stream

    def close(self) -> None:
        self.engine.shutdown()
        self.codec.close()
