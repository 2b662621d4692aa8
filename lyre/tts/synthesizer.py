"""Text to speech for many concurrent streams: one engine, one codec service, and the interface servers use.

    tts = TTS.load()                       # the demo model when none is named (random weights: noise)
    async for chunk in tts.stream("Hello there.", voice="tara"):
        play(chunk)                        # int16 PCM, 24 kHz mono
"""

from __future__ import annotations

import dataclasses
import itertools
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from lyre import orpheus
from lyre.codec import BatchPolicy, CodecService, SnacDecoder, load_snac
from lyre.codec.service import START_SLOTS
from lyre.codec.streaming import StreamingSnac
from lyre.common.threads import threads_apart
from lyre.engine import Engine, EngineStats
from lyre.models.choice import ModelChoice, choose_weights
from lyre.models.folder import load_tokenizer
from lyre.orpheus import TextTokenizer
from lyre.tts.adapter_voices import AdapterVoices
from lyre.tts.budget import chars_within
from lyre.tts.clips import TrimmedClip
from lyre.tts.context import PipelineContext, TTSConfig
from lyre.tts.facts import TTSFacts, pipeline_facts
from lyre.tts.intake import TextIntake
from lyre.tts.options import ServingConfig, SpeechOptions, checked
from lyre.tts.reading import SsmlIntake, TextOptions
from lyre.tts.reference_maker import ReferenceMaker
from lyre.tts.reference_store import ReferenceVoices
from lyre.tts.reference_voices import ReferenceVoice, default_voices_dir
from lyre.tts.sampling import AUDIO_CONSTRAINT, request_sampling
from lyre.tts.segments import split_segments
from lyre.tts.stream import SpeechStream
from lyre.text.front_end import TextFront
from lyre.text.said import Said
from lyre.tts.text import normalize
from lyre.tts.voices import Voices, load_voices

__all__ = ["TTS", "Synthesizer"]

# The least segment size: below it, a segment is too short to sound like a sentence.
_MIN_SEGMENT_CHARS = 60

class Synthesizer(Protocol):
    """What a server needs of a text-to-speech pipeline: lyre's `TTS` and the naive baseline both are one."""

    voices: Voices
    config: TTSConfig
    adapters: AdapterVoices | None  # cloned voices, where the pipeline serves them
    references: ReferenceVoices | None  # voices from a reference clip, where the pipeline speaks them
    front: TextFront  # reads text before the model speaks it

    def references_refused(self) -> str | None:
        """None when the pipeline speaks reference voices, else why not (naming the model)."""

    def check_voice(self, voice: str | None) -> None:
        """Nothing if the pipeline speaks in ``voice``, else ValueError naming the voices on offer."""

    def make_reference(self, name: str, clip: TrimmedClip, text: str, transcribed: bool = False) -> ReferenceVoice:
        """A reference voice from a clip (blocking: SNAC encodes it); ReferenceRejected naming the part at fault."""

    @property
    def max_tokens_limit(self) -> int:
        """The most tokens one segment may ask for."""

    def segments_cut(self) -> dict[str, int]:
        """Segments ended on their token budget, not end-of-speech, since start, by reason (budget, max_tokens)."""

    def open(self, voice: str | None = None, options: SpeechOptions | None = None, trim: bool = True,
             streamed: bool = True, idle_timeout_s: float | None = None, reference: ReferenceVoice | None = None,
             text: TextOptions | None = None) -> Any:
        """A stream fed with `push`/`end`, iterated for int16 PCM; ValueError for a bad voice or options.
        ``reference`` (a voice made for this request alone) speaks instead of ``voice``; ``text``: how the
        text is read (normalised, its language, SSML). Its ``hold_voice()`` readies a cloned voice first
        (AdapterBusy, AdapterError), before any audio; ``leave()`` uncounts a stream dropped before it ran."""

    def stream(self, text: str, voice: str | None = None, options: SpeechOptions | None = None, trim: bool = True,
               streamed: bool = True, request_id: str | None = None, reference: ReferenceVoice | None = None,
               reading: TextOptions | None = None) -> Any:
        """`open` with ``text`` pushed and ended (read by ``reading``); ValueError for bad text before any work."""

    def overloaded(self) -> bool | str:
        """Whether streams are falling behind their listeners now (new ones should be refused), or why."""

    def engine_stats(self) -> EngineStats: ...

    def codec_stats(self) -> Any: ...

    def facts(self) -> TTSFacts:
        """What it runs with, as loaded: model and codec (and where from), device, dtype, levers."""

    def close(self) -> None: ...


class TTS:
    """Text to speech on lyre's engine and the shared codec service. ``context`` is what every stream it opens
    reads, and nothing else of it."""

    def __init__(self, engine: Engine, tokenizer: TextTokenizer, codec: CodecService, voices: Voices,
                 config: TTSConfig | None = None, playback_rate: float = 1.0, source: ModelChoice | None = None,
                 ) -> None:
        """``source``: where the model and codec came from, for the start-up summary (None: not known)."""
        self.engine = engine
        self.tokenizer = tokenizer
        self.codec = codec
        self.voices = voices
        self.config = config or TTSConfig()
        self.playback_rate = playback_rate
        self.source = source
        # Cloned voices (LoRA adapters), when the engine has adapter slots, and voices from a reference clip
        # (each checked by the maker as it is made or read): one namespace with the model's voices, so neither
        # may take a name another voice holds.
        self.adapters = (AdapterVoices(engine.adapters, voices, self._reference_holder)
                         if engine.adapters is not None else None)
        self.context = PipelineContext(engine, tokenizer, codec, self.config, playback_rate, self.adapters,
                                       TextFront(self.config.normalize))
        self.front = self.context.front
        self._maker = ReferenceMaker(self.context, voices, source)
        self.references = ReferenceVoices(self.config.voices_dir, self._holder, self._maker.check_prompt)
        self._ids = itertools.count()

    @classmethod
    def load(cls, model: str | Path | None = None, codec: str | Path | None = None,
             serving: ServingConfig | None = None, config: TTSConfig | None = None,
             codec_policy: BatchPolicy | None = None) -> TTS:
        """Load model and codec folders (or hub ids); the demo model when none is named. Reference voices are
        kept in ``config.voices_dir``, by default the lyre cache's folder for the codec.

        A model named without a codec gets the codec it needs (`lyre.models.choice`); ``"demo"``
        names the built-in demo model or codec (random weights). Raises ValueError naming
        what could not be had.
        """
        source = choose_weights(model, codec)
        serving, config = serving or ServingConfig(), config or TTSConfig()
        if config.voices_dir is None:
            config = dataclasses.replace(config, voices_dir=default_voices_dir(source.codec.name))
        folder = source.model.local()
        voices = load_voices(folder, dict(config.voice_aliases))
        tokenizer = load_tokenizer(folder)
        decoder = SnacDecoder(load_snac(source.codec.local(), device=serving.device, dtype=serving.codec_dtype))
        policy = codec_policy or BatchPolicy.for_device(serving.device)
        # With CUDA graphs the pool of slots is fixed once captured: room for every stream twice over.
        slots = max(START_SLOTS, 2 * serving.max_streams) if serving.codec_graphs else START_SLOTS
        streaming = StreamingSnac(decoder.model, slots, fixed_shape=serving.codec_graphs)
        if serving.codec_graphs:  # captured before the engine's thread starts (lyre.codec.graphs)
            streaming.capture_graphs(policy.max_frames)
        engine = Engine.from_folder(folder, serving.engine_config(), AUDIO_CONSTRAINT.family)
        service = CodecService(decoder, policy, threads=serving.threads()[1], streaming=streaming)
        return cls(engine, tokenizer, service, voices, config, serving.playback_rate, source)

    @property
    def max_tokens_limit(self) -> int:
        return self.context.max_tokens_limit

    def segments_cut(self) -> dict[str, int]:
        return self.context.cuts.counts()

    @property
    def on_deadlines(self) -> bool:
        """Whether the engine and the codec schedule on listeners' playback deadlines (else first come)."""
        return self.context.on_deadlines

    def open(self, voice: str | None = None, options: SpeechOptions | None = None, trim: bool = True,
             streamed: bool = True, idle_timeout_s: float | None = None, request_id: str | None = None,
             reference: ReferenceVoice | None = None, text: TextOptions | None = None) -> SpeechStream:
        """A stream whose text comes later, in pieces (`push`, then `end`); iterate it for int16 PCM.

        ``voice`` is one of the model's voices, an alias of one, or the name of
        a LoRA adapter (a cloned voice), or a reference voice's (None: no voice in the prompt); ``reference``, a
        voice made for this request alone, speaks instead. ``streamed``: someone plays the audio as it comes,
        so it is scheduled on their playback deadline; otherwise it uses spare
        capacity. ``text``: how the text is read (default: normalised English, not SSML). Raises ValueError
        for an unknown voice or bad options.
        """
        return self._open(voice, options, trim, streamed, idle_timeout_s, request_id, False, reference, text)

    def check_voice(self, voice: str | None) -> None:
        """Nothing if this pipeline can speak in ``voice`` (a model voice, an alias, a cloned voice, a
        reference voice), else ValueError naming the voices on offer."""
        if voice in self.references:
            self._maker.check_allowed()
        elif self.adapters is None or voice not in self.adapters:
            self._model_voice(voice)

    def _model_voice(self, voice: str | None) -> str | None:
        """``voices.resolve``, its error naming the cloned and reference voices on offer too."""
        try:
            return self.voices.resolve(voice)
        except ValueError as exc:
            others = [*(a["name"] for a in self.adapters.listing())] if self.adapters is not None else []
            others += [v.name for v in self.references]
            raise ValueError(f"{exc}; cloned and reference voices: {', '.join(others)}" if others else str(exc)
                             ) from None

    def _holder(self, name: str) -> str | None:
        """What voice other than a reference voice holds ``name``, or None."""
        if self.adapters is not None and name in self.adapters:
            return "a cloned voice (adapter)"
        return self.voices.holder(name)

    def _reference_holder(self, name: str) -> str | None:
        return "a reference voice" if name in self.references else None

    def references_refused(self) -> str | None:
        return self._maker.refused()

    def make_reference(self, name: str, clip: TrimmedClip, text: str, transcribed: bool = False) -> ReferenceVoice:
        """A reference voice from ``clip`` (`read_reference_clip`'s) saying ``text``: SNAC-encoded here, on the
        codec's model (blocking: run it on a worker thread). ReferenceRejected naming the field at fault."""
        return self._maker.make(name, clip, text, transcribed)

    def _open(self, voice: str | None, options: SpeechOptions | None, trim: bool, streamed: bool,
              idle_timeout_s: float | None, request_id: str | None, whole: bool,
              reference: ReferenceVoice | None = None, text: TextOptions | None = None) -> SpeechStream:
        """``whole``: the text comes at once (segments merge sentences up to the segment size, exactly as
        `split_segments` cuts them); else in pieces."""
        adapter, prefix, named = None, (), None
        if reference is None and voice in self.references:
            reference = self.references.get(voice)  # type: ignore[arg-type]
        if reference is not None:
            self._maker.check_allowed()
            voice, prefix, named = None, self.references.prefix(reference, self.tokenizer), reference.name
        elif self.adapters is not None and voice in self.adapters:
            adapter, voice = voice, self.adapters.speaker(voice)
        else:
            voice = self._model_voice(voice)
        # A segment is at most as long as the words whose budget fits the tokens a request has room for (a
        # reference's turn takes positions a request could otherwise fill with speech), so none is cut short.
        room = max(1, self.max_tokens_limit - len(prefix))
        sampling = request_sampling(checked(options, room))
        cfg = self.config
        segment = min(cfg.segment_chars, max(_MIN_SEGMENT_CHARS, chars_within(room)))
        text = text or TextOptions()
        intake = (SsmlIntake(self.context.front, text, cfg.max_input_chars, segment, cfg.flush_after_s,
                             idle_timeout_s) if text.ssml else
                  TextIntake(cfg.max_input_chars, segment, cfg.flush_after_s, idle_timeout_s, segment if whole else 0))
        capped = options is not None and options.max_tokens is not None
        return SpeechStream(self.context, request_id or f"tts-{next(self._ids)}", voice, sampling, trim, streamed,
                            intake, adapter, tuple(prefix), named, text, capped)

    def stream(self, text: str, voice: str | None = None, options: SpeechOptions | None = None, trim: bool = True,
               streamed: bool = True, request_id: str | None = None, reference: ReferenceVoice | None = None,
               reading: TextOptions | None = None) -> SpeechStream:
        """Speak ``text``; iterate the result for int16 PCM chunks as they are made. Raises ValueError (naming what
        was wrong) for empty or over-long text, an unknown voice, bad options, or a segment too long for the
        engine, before any work starts. ``reading``: how the text is read (normalised or not, its language, SSML:
        malformed SSML is a ValueError naming the problem)."""
        stream = self._open(voice, options, trim, streamed, None, request_id, True, reference, reading)
        try:  # refused before any work: its listener must not count against the next stream
            if stream.text.ssml:
                stream.push(text)
                stream.end()  # reads the document, segments and pauses
            else:  # each segment read once, here, so a segment too long for the engine is refused before any work
                front, how, chars = self.context.front, stream.text, stream.intake.segment_chars
                for segment in split_segments(normalize(text, self.config.max_input_chars), chars):
                    stream.intake.add(front.read(segment, how.language, how.normalize))
                stream.end()
            for said in stream.intake.pending():
                if isinstance(said, Said):
                    prompt = len(stream.prefix) + len(orpheus.prompt_ids(self.tokenizer, said.spoken, stream.voice))
                    tokens = stream.budgets.tokens(said.spoken, self.context.positions_after(prompt))
                    self.context.check_room(prompt, dataclasses.replace(stream.sampling, max_tokens=tokens))
        except BaseException:
            stream.leave()
            raise
        return stream

    async def synthesize(self, text: str, voice: str | None = None, options: SpeechOptions | None = None,
                         trim: bool = True) -> tuple[np.ndarray, SpeechStream]:
        """The whole utterance at once (int16), and its stream's figures."""
        stream = self.stream(text, voice, options, trim, streamed=False)
        chunks = [chunk async for chunk in stream]
        return (np.concatenate(chunks) if chunks else np.zeros(0, np.int16)), stream

    def overloaded(self) -> bool | str:
        """True, or why, when a new stream should be refused: streams behind their listeners' deadlines, and
        with ``config.admit_on_rates`` a listener run dry lately or rates that cannot serve one more
        (lyre.tts.listeners). First-come scheduling keeps its old behaviour: it never refuses for being late."""
        if not self.on_deadlines:
            return False
        stats = self.engine.stats()
        if stats.behind > 0 or not self.config.admit_on_rates:
            return stats.behind > 0
        step_s = stats.recent_step_seconds or (stats.step_seconds / stats.steps if stats.steps else 0.0)
        apart = threads_apart(self.engine.config.threads, self.codec.threads)
        decode_s = self.codec.warm_seconds_per_frame or self.codec.recent_seconds_per_frame  # once warm, if known
        return self.context.listeners.refuse(self.playback_rate, step_s, decode_s, apart) or False

    def engine_stats(self) -> EngineStats:
        return self.engine.stats()

    def codec_stats(self) -> Any:
        return self.codec.stats()

    def facts(self) -> TTSFacts:
        return pipeline_facts(self.context, self.source)

    def close(self) -> None:
        self.engine.shutdown()
        self.codec.close()
