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

import dataclasses
import itertools
from pathlib import Path
from typing import Any, NoReturn

import torch
from transformers import LlamaForCausalLM

from lyre import orpheus
from lyre.codec import SnacDecoder, load_snac
from lyre.engine import EngineStats
from lyre.models.choice import ModelChoice, choose_weights
from lyre.models.folder import load_tokenizer
from lyre.orpheus import TextTokenizer
from lyre.tts.cuts import CutCounts
from lyre.tts.facts import TTSFacts
from lyre.tts.options import SpeechOptions, checked
from lyre.tts.sampling import request_sampling
from lyre.tts.context import TTSConfig
from lyre.tts.reading import TextFront, TextOptions
from lyre.tts.text import normalize
from lyre.tts.voices import Voices, load_voices

from lyre.baseline.generate import NaiveEngine
from lyre.baseline.naive_stream import NaiveSpeechStream
from lyre.baseline.reference_decode import NaiveCodec

__all__ = ["NaiveTTS"]

# transformers' generate has no KV-cache slots to fit: a segment may ask for this many tokens.
MAX_TOKENS_LIMIT = 8192
# Orpheus's reference implementation caps its one generation at this many tokens (about 14.6 s of audio).
REFERENCE_MAX_TOKENS = 1200


class NaiveTTS:
    """Text to speech the naive way: a transformers generate and a sliding-window decode per request."""

    def __init__(self, engine: NaiveEngine, tokenizer: TextTokenizer, codec: NaiveCodec, voices: Voices,
                 config: TTSConfig | None = None, source: ModelChoice | None = None,
                 playback_rate: float = 1.0) -> None:
        """``source``: where the model and codec came from, for the start-up summary (None: not known);
        ``playback_rate``: the listeners its streams model play at this times real time, as lyre's do."""
        if not playback_rate > 0:
            raise ValueError(f"playback rate must be > 0, got {playback_rate}")
        self.engine = engine
        self.tokenizer = tokenizer
        self.codec = codec
        self.voices = voices
        self.config = config or TTSConfig()
        self.source = source
        self.playback_rate = playback_rate
        self.adapters = None  # serves no cloned voices
        self.references = None  # nor voices from a reference clip
        self.cuts = CutCounts()
        self.front = TextFront(self.config.normalize)
        self._ids = itertools.count()

    @classmethod
    def load(cls, model: str | Path | None = None, codec: str | Path | None = None, device: str = "cpu",
             config: TTSConfig | None = None, valid_audio_only: bool | None = None,
             playback_rate: float = 1.0) -> NaiveTTS:
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
                   source, playback_rate)

    @property
    def max_tokens_limit(self) -> int:
        return MAX_TOKENS_LIMIT

    def segments_cut(self) -> dict[str, int]:
        return self.cuts.counts()

    def references_refused(self) -> str:
        return "the naive baseline speaks no voices from a reference clip (serve lyre's engine for them)"

    def check_voice(self, voice: str | None) -> None:
        self.voices.resolve(voice)

    def make_reference(self, name: str, clip: object, text: str, transcribed: bool = False) -> NoReturn:
        raise ValueError(f"file: {self.references_refused()}")

    def open(self, voice: str | None = None, options: SpeechOptions | None = None, trim: bool = True,
             streamed: bool = True, idle_timeout_s: float | None = None,
             request_id: str | None = None, reference: object = None,
             text: TextOptions | None = None) -> NaiveSpeechStream:
        """A stream fed with `push` and `end`. ``trim`` and ``idle_timeout_s`` are accepted and ignored: the
        naive pipeline never trims and knows no deadlines; ``streamed``: someone plays it as it comes, so its
        listener's underruns are counted as lyre's are. The seed keys only the codec noise: transformers
        samples from torch's global generator, shared by every request's thread."""
        if reference is not None:
            raise ValueError(f"reference_audio: {self.references_refused()}")
        if text is not None and text.ssml:
            raise ValueError("ssml: the naive baseline reads no SSML (serve lyre's engine for it)")
        voice = self.voices.resolve(voice)
        capped = options is not None and options.max_tokens is not None
        sampling = request_sampling(checked(options if capped else dataclasses.replace(
            options or SpeechOptions(), max_tokens=REFERENCE_MAX_TOKENS), self.max_tokens_limit))
        return NaiveSpeechStream(self, request_id or f"naive-{next(self._ids)}", voice, sampling, text=text,
                                 capped=capped, streamed=streamed)

    def stream(self, text: str, voice: str | None = None, options: SpeechOptions | None = None,
               trim: bool = True, streamed: bool = True, request_id: str | None = None,
               reference: object = None, reading: TextOptions | None = None) -> NaiveSpeechStream:
        """Speak ``text`` as one generation; validates like `TTS.stream` (same normalisation, limit, errors)."""
        stream = self.open(voice, options, trim, streamed, request_id=request_id, reference=reference, text=reading)
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
