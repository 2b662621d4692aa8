"""Whisper passes over audio, and what they return.

- a *final* pass is faster-whisper's full ``transcribe`` (beam search, the
  temperature fallback, timestamps, audio of any length);
- a *partial* pass is one greedy decode of an utterance so far (at most 30 s,
  no timestamps, temperature 0, a window fitted to the audio), batched across
  sessions when asked.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:  # faster-whisper (and CTranslate2) load with the first pass, not with the server
    from faster_whisper import WhisperModel

    from lyre.stt.fitted import FittedWhisperModel

from lyre.stt.agreement import fold
from lyre.stt.audio import SAMPLE_RATE
from lyre.stt.window import FULL_WINDOW, FULL_WINDOW_FRAMES, SAMPLES_PER_FRAME, FinalWindow, fitted_frames

__all__ = ["MAX_PROMPT_CHARS", "Segment", "TranscribeOptions", "Transcript", "Word", "final_pass", "partial_passes",
           "partial_window"]

MAX_PROMPT_CHARS = 1000
# The fallback ladder OpenAI's API uses when temperature is 0: retry hotter while the
# output looks degenerate (compression ratio, mean log-probability).
_FALLBACK_TEMPERATURES = (0.0, 0.2, 0.4, 0.6, 0.8, 1.0)
_NO_SPEECH = 0.6  # Whisper's own no-speech threshold
# Partial windows, in 10 ms feature frames (lyre.stt.window).
_PARTIAL_MARGIN_FRAMES = 200  # with 1 s the last words were often lost (measured on the test sentences)
_PARTIAL_TOKENS_BASE = 8
_PARTIAL_TOKENS_PER_S = 6  # speech runs at about 4 tokens a second
_PARTIAL_NO_REPEAT = 4
_RESTART_WORDS = 3


@dataclass(frozen=True)
class TranscribeOptions:
    """A final pass's options, as the OpenAI transcription API names them."""

    language: str | None = None  # None: detected from the first 30 s
    prompt: str | None = None
    temperature: float = 0.0  # 0: start at 0 and fall back hotter on degenerate output
    word_timestamps: bool = False
    beam_size: int = 5
    # Not the API's: the end of a live turn (a realtime utterance), which someone waits on, rather than a
    # file. The transcriber gives it STTConfig.live_window, and a file STTConfig.file_window.
    live: bool = False

    def __post_init__(self) -> None:
        if not 0.0 <= self.temperature <= 1.0:
            raise ValueError(f"temperature must be between 0 and 1, got {self.temperature}")
        if self.prompt is not None and len(self.prompt) > MAX_PROMPT_CHARS:
            raise ValueError(f"prompt must be at most {MAX_PROMPT_CHARS} characters, got {len(self.prompt)}")
        if self.beam_size < 1:
            raise ValueError(f"beam_size must be >= 1, got {self.beam_size}")




@dataclass(frozen=True)
class Word:
    start: float
    end: float
    word: str
    probability: float


@dataclass(frozen=True)
class Segment:
    id: int
    start: float
    end: float
    text: str
    tokens: tuple[int, ...]
    temperature: float
    avg_logprob: float
    compression_ratio: float
    no_speech_prob: float
    words: tuple[Word, ...] = ()


@dataclass(frozen=True)
class Transcript:
    text: str
    language: str
    duration: float  # seconds of audio
    segments: tuple[Segment, ...]


def final_pass(model: FittedWhisperModel, audio: np.ndarray, options: TranscribeOptions,
               window: FinalWindow = FULL_WINDOW) -> Transcript:
    """faster-whisper's full transcribe of ``audio`` (float32, 16 kHz, any length), its first window ``window``.

    With no language named, it is detected here on that same window (faster-whisper's own detection
    encodes 30 s apart from the first window's encode).
    """
    temperature = _FALLBACK_TEMPERATURES if options.temperature == 0 else options.temperature
    language = options.language or _detect_language(model, audio, window)
    with model.first_window(window):
        segments, info = model.transcribe(
            audio, language=language, initial_prompt=options.prompt, temperature=temperature,
            beam_size=options.beam_size, word_timestamps=options.word_timestamps,
            condition_on_previous_text=False,  # a long file's errors do not snowball
        )
        out = tuple(
            Segment(id=s.id, start=s.start, end=s.end, text=s.text, tokens=tuple(s.tokens), temperature=s.temperature,
                    avg_logprob=s.avg_logprob, compression_ratio=s.compression_ratio, no_speech_prob=s.no_speech_prob,
                    words=tuple(Word(w.start, w.end, w.word, w.probability) for w in s.words or ()))
            for s in segments  # a generator: the model runs here
        )
    text = "".join(s.text for s in out).strip()
    return Transcript(text=text, language=info.language, duration=info.duration, segments=out)


def _detect_language(model: WhisperModel, audio: np.ndarray, window: FinalWindow) -> str | None:
    """The language of the audio's first 30 s, from one encode of the first window (None: the model's own rule)."""
    from faster_whisper.audio import pad_or_trim

    if not model.model.is_multilingual:
        return None  # an English-only model: transcribe takes English
    audio = audio[:FULL_WINDOW_FRAMES * SAMPLES_PER_FRAME]
    features = pad_or_trim(model.feature_extractor(audio)[..., :-1], window.frames(audio.size))
    ranked = model.model.detect_language(model.encode(features))[0]  # [(token, probability)], most likely first
    return ranked[0][0][2:-2]  # "<|en|>" -> "en"


def partial_window(samples: int) -> int:
    """Encoder frames for a partial pass over ``samples`` of audio: the audio, 2 s of silence, rounded up."""
    return fitted_frames(samples, _PARTIAL_MARGIN_FRAMES)


def partial_passes(model: WhisperModel, audios: list[np.ndarray], languages: list[str | None]) -> list[str]:
    from faster_whisper.audio import pad_or_trim
    from faster_whisper.tokenizer import Tokenizer
    from faster_whisper.transcribe import get_suppressed_tokens

    """One greedy, timestamp-free decode of each audio (at most 30 s), all in one encoder and decoder batch.

    Whisper's final passes encode 30 s windows whatever the audio. A partial
    encodes only the audio and 2 s of silence after it (the encoder takes
    shorter inputs; benchmarks/stt.py measured a 4.5 s sentence at 0.33 s a
    pass instead of 1.5 s, with the same word error rate over the test
    sentences). Short windows invite Whisper's repetition loops, so a partial
    may repeat no 4-gram and writes at most ~6 tokens per second of audio.
    """
    longest = max(audio.size for audio in audios)
    frames = partial_window(longest)
    features = np.stack([pad_or_trim(model.feature_extractor(audio)[..., :-1], frames) for audio in audios])
    encoded = model.encode(features)  # (batch, frames / 2, d_model)
    if any(lang is None for lang in languages) and model.model.is_multilingual:
        detected = model.model.detect_language(encoded)
        languages = [lang or found[0][0][2:-2] for lang, found in zip(languages, detected)]
    tokenizers = [Tokenizer(model.hf_tokenizer, model.model.is_multilingual, task="transcribe",
                            language=lang or "en") for lang in languages]
    prompts = [model.get_prompt(tok, previous_tokens=[], without_timestamps=True) for tok in tokenizers]
    seconds = longest / SAMPLE_RATE
    budget = _PARTIAL_TOKENS_BASE + math.ceil(_PARTIAL_TOKENS_PER_S * seconds)
    results = model.model.generate(
        encoded, prompts, beam_size=1, max_length=min(model.max_length, max(map(len, prompts)) + budget),
        no_repeat_ngram_size=_PARTIAL_NO_REPEAT, suppress_blank=True,
        suppress_tokens=get_suppressed_tokens(tokenizers[0], [-1]), return_no_speech_prob=True,
    )
    texts = []
    for tok, result in zip(tokenizers, results):
        texts.append("" if result.no_speech_prob > _NO_SPEECH else _cut_restart(tok.decode(result.sequences_ids[0])))
    return texts


def _cut_restart(text: str) -> str:
    """``text`` up to where it starts over: a loop that ``no_repeat_ngram_size`` lets through with a
    variation ("Turn off the light's invocation Turn off the lights in the"). Speech seldom repeats
    its own first three words."""
    words = text.split()
    head = [fold(w) for w in words[:_RESTART_WORDS]]
    if len(head) == _RESTART_WORDS:
        for i in range(1, len(words) - _RESTART_WORDS + 1):
            if [fold(w) for w in words[i : i + _RESTART_WORDS]] == head:
                return " ".join(words[:i])
    return " ".join(words)

