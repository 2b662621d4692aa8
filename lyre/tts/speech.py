"""Text to speech, whole utterance at a time: prompt ids -> engine -> frames -> SNAC.

The streaming pipeline (chunked decode, silence trim, text splitting) builds
on these pieces.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from lyre import orpheus
from lyre.codec import SnacDecoder, load_snac
from lyre.demo_model import demo_model
from lyre.engine import Engine, EngineConfig, PeriodicConstraint, SamplingParams
from lyre.model_folder import load_tokenizer, resolve
from lyre.orpheus import FrameAssembler, TextTokenizer

__all__ = ["AUDIO_CONSTRAINT", "Speech", "Synthesizer", "speech_sampling"]

# Frame position k may only produce its own 4096 audio ids; the stop token is
# allowed only between whole frames. Invalid tokens therefore cannot occur.
AUDIO_CONSTRAINT = PeriodicConstraint(
    tuple((r.start, r.stop) for r in map(orpheus.position_range, range(orpheus.FRAME_TOKENS))),
    boundary_ids=(orpheus.STOP_TOKEN,),
)

_MODEL_FILES = ("config.json", "tokenizer.json")


def speech_sampling(params: SamplingParams | None = None) -> SamplingParams:
    """Orpheus sampling: stop on end-of-speech; max_tokens rounded down to whole frames."""
    params = params or SamplingParams()
    frames = max(1, params.max_tokens // orpheus.FRAME_TOKENS)
    return replace(params, stop_ids=(orpheus.STOP_TOKEN,), max_tokens=frames * orpheus.FRAME_TOKENS)


@dataclass(frozen=True)
class Speech:
    """One synthesised utterance."""

    pcm: np.ndarray  # float32 in [-1, 1], 24 kHz mono
    frames: int
    finish_reason: str

    @property
    def seconds(self) -> float:
        return orpheus.audio_seconds(self.frames)

    def int16(self) -> np.ndarray:
        return (np.clip(self.pcm, -1.0, 1.0) * 32767).astype(np.int16)


class Synthesizer:
    """An engine, its tokenizer and the codec, ready to speak."""

    def __init__(self, engine: Engine, tokenizer: TextTokenizer, codec: SnacDecoder, voices: tuple[str, ...]) -> None:
        self.engine = engine
        self.tokenizer = tokenizer
        self.codec = codec
        self.voices = voices

    @classmethod
    def load(
        cls, model: str | Path | None = None, codec: str | Path | None = None, config: EngineConfig | None = None
    ) -> Synthesizer:
        """Load from model and codec folders (or hub ids); the demo model when none is named."""
        if model is None or codec is None:
            demo = demo_model()
            model = model if model is not None else demo.model
            codec = codec if codec is not None else demo.codec
        config = config or EngineConfig()
        folder = resolve(model, required=_MODEL_FILES)
        engine = Engine.from_folder(folder, config)
        decoder = SnacDecoder(load_snac(codec, device=config.device))
        return cls(engine, load_tokenizer(folder), decoder, orpheus.VOICES)

    async def synthesize(self, text: str, voice: str | None = None, sampling: SamplingParams | None = None) -> Speech:
        """Speak ``text`` in ``voice``; returns the whole utterance."""
        if voice is not None and voice not in self.voices:
            raise ValueError(f"unknown voice {voice!r}; choose one of: {', '.join(self.voices)}")
        ids = orpheus.prompt_ids(self.tokenizer, text, voice)
        params = speech_sampling(sampling)
        assembler = FrameAssembler()
        frames: list[tuple[int, ...]] = []
        stream = self.engine.generate(ids, params, constraint=AUDIO_CONSTRAINT)
        async for token in stream:
            frame = assembler.push(token)
            if frame is not None:
                frames.append(frame)
        pcm = self.codec.decode(orpheus.codes_to_snac_levels(frames)) if frames else np.zeros(0, np.float32)
        reason = stream.finish_reason.value if stream.finish_reason else "unknown"
        return Speech(pcm=pcm, frames=len(frames), finish_reason=reason)

    def close(self) -> None:
        self.engine.shutdown()
