"""The baseline lyre is measured against: Orpheus served the way most users start.

    tts = NaiveTTS.load()                  # the demo model when none is named
    async for chunk in tts.stream("Hello there.", voice="tara"):
        play(chunk)                        # int16 PCM, 24 kHz mono

Built like the public reference and the servers around it, on purpose:

- transformers' ``LlamaForCausalLM.generate``, one call per request in a thread
  of its own: no batching across requests, no KV-cache slots, no queue;
- no constraint on sampling: a token that is not a valid audio token at its
  frame position is dropped, and frames are counted from valid tokens only.
  The one exception is the demo model: a trained Orpheus writes valid audio
  tokens by itself, but random weights almost never do, so there the baseline
  masks the logits to the valid ids (a logits processor, as a user would
  write one; it adds a masked add per token and saves nothing), so that both
  pipelines make the same audio per token and can be compared;
- the reference sliding-window decode: after every frame i >= 3, SNAC decodes
  frames i-3..i (a batch of one) and keeps frame i-2, so frame 0 and the last
  two frames are never heard and every frame is decoded four times;
- no leading-silence trim and no text splitting.

It implements `lyre.tts.Synthesizer`, so ``lyre serve --engine naive``
serves it unchanged; text pushed in pieces is spoken once it has all come,
as one generation. It needs ``transformers`` (installed with lyre's test
extra), imported when this module is.
"""

from __future__ import annotations

import asyncio
import itertools
import threading
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any, NoReturn

import numpy as np
import torch
from transformers import LlamaForCausalLM

from lyre import orpheus
from lyre.codec import SnacDecoder, load_snac
from lyre.engine import EngineStats, FinishReason, SamplingParams
from lyre.models.choice import ModelChoice, choose_weights
from lyre.models.folder import load_tokenizer
from lyre.orpheus import FrameAssembler, InvalidAudioToken, TextTokenizer
from lyre.tts.facts import TTSFacts
from lyre.tts.options import SpeechOptions, checked
from lyre.tts.sampling import request_sampling
from lyre.tts.spoken import SpokenSegment
from lyre.tts.stream import to_int16
from lyre.tts.context import TTSConfig
from lyre.tts.text import TextError, normalize
from lyre.tts.voices import Voices, load_voices

from lyre.baseline.generate import Generation, NaiveEngine
from lyre.baseline.reference_decode import NaiveCodec, ReferenceWindows

__all__ = ["NaiveSpeechStream", "NaiveTTS"]

# transformers' generate has no KV-cache slots to fit: a segment may ask for this many tokens.
MAX_TOKENS_LIMIT = 8192


class NaiveSpeechStream:
    """Async iterator of int16 PCM chunks for one request, with `SpeechStream`'s figures.

    Generation starts at the first iteration; `aclose` (or cancelling the
    task that iterates) stops it at the next token.
    """

    def __init__(self, tts: NaiveTTS, request_id: str, voice: str | None, sampling: SamplingParams,
                 prompt: list[int] | None = None) -> None:
        """``prompt``: ready-made prompt ids instead of text (then no text may be pushed)."""
        self.request_id = request_id
        self.voice = voice
        self.segments = 1
        self.frames = 0  # from valid 7-token groups
        self.tokens = 0  # every token generated, valid or not
        self.dropped_tokens = 0  # not a valid audio token at its frame position
        self.trimmed_samples = 0  # never trims
        self.finish_reason: FinishReason | None = None
        self.created_at = time.perf_counter()
        self.first_text_at: float | None = None
        self.first_chunk_at: float | None = None
        self.samples = 0
        self.segment_started: list[float] = []
        self.segment_done: list[float] = []
        self.spoken: list[SpokenSegment] = []  # the one segment, once its audio is all out (for word times)
        self._on_spoken: list[Callable[[SpokenSegment], None]] = []
        self._tts = tts
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
            self._prompt = orpheus.prompt_ids(self._tts.tokenizer, clean, self.voice)
        queue: asyncio.Queue[int | None] = asyncio.Queue()
        self.segment_started.append(time.perf_counter())
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
            else:  # the pipeline was shut down under it
                self.finish_reason = FinishReason.ABORT
            self.segment_done.append(time.perf_counter())
            if clean:
                self.spoken.append(segment := SpokenSegment(clean, 0, self.samples))
                for callback in self._on_spoken:
                    callback(segment)
        finally:
            self._cancel.set()

    def _out(self, pcm: np.ndarray) -> np.ndarray:
        if self.first_chunk_at is None:
            self.first_chunk_at = time.perf_counter()
        self.samples += len(pcm)
        return to_int16(pcm)


class NaiveTTS:
    """Text to speech the naive way: a transformers generate and a sliding-window decode per request."""

    def __init__(self, engine: NaiveEngine, tokenizer: TextTokenizer, codec: NaiveCodec, voices: Voices,
                 config: TTSConfig | None = None, source: ModelChoice | None = None) -> None:
        """``source``: where the model and codec came from, for the start-up summary (None: not known)."""
        self.engine = engine
        self.tokenizer = tokenizer
        self.codec = codec
        self.voices = voices
        self.config = config or TTSConfig()
        self.source = source
        self.adapters = None  # serves no cloned voices
        self.references = None  # nor voices from a reference clip
        self._ids = itertools.count()

    @classmethod
    def load(cls, model: str | Path | None = None, codec: str | Path | None = None, device: str = "cpu",
             config: TTSConfig | None = None, valid_audio_only: bool | None = None) -> NaiveTTS:
        """Load model and codec folders (or hub ids); the demo model when none is named.

        The codec is chosen as `TTS.load` chooses it (`lyre.models.choice`).
        float32 on CPU; bfloat16 on CUDA, as users load it there.
        ``valid_audio_only`` masks sampling to valid audio ids; None: only for
        the demo model (see the module docstring).
        """
        source = choose_weights(model, codec)
        if valid_audio_only is None:
            valid_audio_only = source.model.random
        folder = source.model.local()
        dtype = torch.bfloat16 if torch.device(device).type == "cuda" else torch.float32
        llama = LlamaForCausalLM.from_pretrained(folder, dtype=dtype).to(device).eval()
        decoder = SnacDecoder(load_snac(source.codec.local(), device=device))
        config = config or TTSConfig()
        voices = load_voices(folder, dict(config.voice_aliases))
        return cls(NaiveEngine(llama, valid_audio_only), load_tokenizer(folder), NaiveCodec(decoder), voices, config,
                   source)

    @property
    def max_tokens_limit(self) -> int:
        return MAX_TOKENS_LIMIT

    def references_refused(self) -> str:
        return "the naive baseline speaks no voices from a reference clip (serve lyre's engine for them)"

    def check_voice(self, voice: str | None) -> None:
        self.voices.resolve(voice)

    def make_reference(self, name: str, clip: object, text: str, transcribed: bool = False) -> NoReturn:
        raise ValueError(f"file: {self.references_refused()}")

    def open(self, voice: str | None = None, options: SpeechOptions | None = None, trim: bool = True,
             streamed: bool = True, idle_timeout_s: float | None = None,
             request_id: str | None = None, reference: object = None) -> NaiveSpeechStream:
        """A stream fed with `push` and `end`. ``trim``, ``streamed`` and ``idle_timeout_s`` are accepted
        and ignored: the naive pipeline never trims and knows no deadlines. The seed keys only the codec
        noise: transformers samples from torch's global generator, shared by every request's thread."""
        if reference is not None:
            raise ValueError(f"reference_audio: {self.references_refused()}")
        voice = self.voices.resolve(voice)
        sampling = request_sampling(checked(options, self.max_tokens_limit))
        return NaiveSpeechStream(self, request_id or f"naive-{next(self._ids)}", voice, sampling)

    def stream(self, text: str, voice: str | None = None, options: SpeechOptions | None = None,
               trim: bool = True, streamed: bool = True, request_id: str | None = None,
               reference: object = None) -> NaiveSpeechStream:
        """Speak ``text`` as one generation; validates like `TTS.stream` (same normalisation, limit, errors)."""
        stream = self.open(voice, options, trim, streamed, request_id=request_id, reference=reference)
        orpheus.prompt_ids(self.tokenizer, normalize(text, self.config.max_input_chars), stream.voice)
        stream.push(text)
        stream.end()
        return stream

    def overloaded(self) -> bool:
        return False  # it never refuses for load: every request gets a thread

    def engine_stats(self) -> EngineStats:
        return self.engine.stats()

    def codec_stats(self) -> Any:
        return self.codec.stats()

    def facts(self) -> TTSFacts:
        """What it runs with: transformers' generate per request, no KV-cache slots, no levers."""
        decoder = self.codec.decoder
        return TTSFacts(
            pipeline="naive", model=self.source.model if self.source else None,
            codec=self.source.codec if self.source else None, device=str(self.engine.device),
            dtype=str(self.engine.model.dtype).removeprefix("torch."), attention="transformers", cuda_graphs=False,
            fp8=False, layers=self.engine.model.config.num_hidden_layers, kv_slots=None, kv_positions=None,
            kv_bytes=None, scheduler="none (a thread per request)", codec_device=str(decoder.device),
            codec_dtype=decoder.dtype, codec_graphs=decoder.cuda_graphs, max_adapters=0, lora_rank=None,
            adapters=(), cuda_available=torch.cuda.is_available())

    def close(self) -> None:
        self.engine.shutdown()
        self.codec.close()
