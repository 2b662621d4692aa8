"""What a pipeline's streams share: the engine, the codec, the tokenizer and the settings, fixed once built.

`TTS` builds one `PipelineContext` and hands it to every `SpeechStream` it
opens; a stream reads it and nothing else of the pipeline, so the two depend
on this module and not on each other.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from lyre.codec import CodecService
from lyre.engine import Engine, SamplingParams
from lyre.orpheus import TextTokenizer
from lyre.text.front_end import TextFront
from lyre.tts.adapter_voices import AdapterVoices
from lyre.tts.cuts import CutCounts
from lyre.tts.listeners import Listeners
from lyre.tts.pacing import PacingPolicy
from lyre.tts.text import DEFAULT_SEGMENT_CHARS, MAX_INPUT_CHARS
from lyre.tts.trim import TrimConfig

__all__ = ["PROMPT_ROOM", "PipelineContext", "TTSConfig"]

# KV-cache positions kept for a segment's prompt (a 300-character segment is well under 200 tokens).
PROMPT_ROOM = 256


@dataclass(frozen=True)
class TTSConfig:
    """How utterances are split, decoded and trimmed."""

    max_input_chars: int = MAX_INPUT_CHARS
    segment_chars: int = DEFAULT_SEGMENT_CHARS
    pacing: PacingPolicy = field(default_factory=PacingPolicy)
    trim: TrimConfig = field(default_factory=TrimConfig)
    # Later segments keep a longer pad: a natural pause between sentences.
    segment_trim: TrimConfig = field(default_factory=lambda: TrimConfig(pad_ms=150.0))
    # Pending text with no sentence end is spoken after this pause in the text.
    flush_after_s: float = 0.8
    # (alias, voice) pairs over the defaults and voices.json's aliases, e.g. (("alloy", "leah"),).
    voice_aliases: tuple[tuple[str, str], ...] = ()
    # Where voices made from a reference clip are kept (None: in memory only, gone with the process).
    voices_dir: Path | None = None
    # Speak reference voices whatever the model says of itself (a finetune not trained to continue a voice).
    allow_reference_voices: bool = False
    # Read numbers, amounts, dates, abbreviations... as words before the model sees them (--no-normalize: off).
    normalize: bool = True
    # Admission also refuses a new stream while a live listener ran dry lately, or when the measured rates
    # cannot serve one more without gaps (lyre.tts.listeners; --no-admit-on-rates: off).
    admit_on_rates: bool = True

    def __post_init__(self) -> None:
        if not self.flush_after_s > 0:
            raise ValueError(f"flush_after_s must be > 0, got {self.flush_after_s}")


@dataclass(frozen=True)
class PipelineContext:
    """One pipeline's parts and settings, as every stream it opens sees them."""

    engine: Engine
    tokenizer: TextTokenizer
    codec: CodecService
    config: TTSConfig
    playback_rate: float = 1.0  # listeners play at this times real time
    adapters: AdapterVoices | None = None  # cloned voices, when the engine has adapter slots
    front: TextFront = field(default_factory=TextFront)  # reads each segment's text (lyre.text)
    cuts: CutCounts = field(default_factory=CutCounts)  # segments ended on their budget, every stream's
    listeners: Listeners = field(default_factory=Listeners)  # the live streamed streams' listeners

    @property
    def max_tokens_limit(self) -> int:
        """The most tokens one segment may ask for."""
        return max(1, self.engine.config.max_seq_len - PROMPT_ROOM)

    def positions_after(self, prompt_tokens: int) -> int:
        """The positions a request whose prompt takes ``prompt_tokens`` has left for speech."""
        return max(0, self.engine.config.max_seq_len - prompt_tokens)

    @property
    def on_deadlines(self) -> bool:
        """Whether the engine and the codec schedule on listeners' playback deadlines (else first come)."""
        return self.engine.config.scheduler == "deadline"

    def check_room(self, prompt_tokens: int, sampling: SamplingParams) -> None:
        """ValueError when a segment's prompt plus max_tokens cannot fit one request's positions."""
        room = self.engine.config.max_seq_len
        if prompt_tokens + sampling.max_tokens > room:
            raise ValueError(f"max_tokens: {sampling.max_tokens} plus a {prompt_tokens}-token prompt is more than "
                             f"the engine's {room} positions per request; lower max_tokens")
