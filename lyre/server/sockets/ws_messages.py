"""Parsing and checking WebSocket messages: a context's settings and its errors."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from lyre import orpheus
from lyre.server.admission import Overloaded
from lyre.tts import IdleStream, PipelineBusy, SpeechOptions, Synthesizer, TextOptions

__all__ = ["OUTPUT_FORMAT", "ContextError", "Settings", "check_output_format", "describe", "settings", "voice_of"]

# The one output format: what the pipeline makes, sent as is.
OUTPUT_FORMAT = {"container": "raw", "encoding": "pcm_s16le", "sample_rate": orpheus.SAMPLE_RATE}
_SAMPLING_FIELDS = ("temperature", "top_p", "top_k", "repetition_penalty", "max_tokens", "seed")

log = logging.getLogger("lyre.server.websocket")


class ContextError(Exception):
    """A problem to report on one context; ``kind`` labels the errors metric."""

    def __init__(self, message: str, kind: str = "invalid_request") -> None:
        super().__init__(message)
        self.kind = kind


@dataclass(frozen=True)
class Settings:
    voice: str  # a voice of the model: named, or its first
    options: SpeechOptions
    trim: bool
    timestamps: bool  # add_timestamps: word times, as `timestamps` messages before the context's done
    reading: TextOptions  # normalize, language, ssml: how the context's text is read


def voice_of(message: dict[str, Any], tts: Synthesizer) -> str:
    """The voice of ``{"mode": "id", "id": NAME}`` (or a bare name): a model voice (NAME may be an
    alias of one), a cloned voice's adapter name or a reference voice's. No voice: the model's first."""
    voice = message.get("voice")
    if isinstance(voice, dict):
        if voice.get("mode", "id") != "id":
            raise ContextError(f"voice mode {voice.get('mode')!r} is not supported; use mode 'id'")
        voice = voice.get("id")
    if voice is not None and not isinstance(voice, str):
        raise ContextError(f"voice id must be a string, got {voice!r}")
    try:
        if voice is None or voice in tts.voices:
            return tts.voices.resolve(voice) or tts.voices.default
        tts.check_voice(voice)
    except ValueError as exc:
        raise ContextError(str(exc)) from None
    return voice


def check_output_format(value: object) -> None:
    if value is not None and not isinstance(value, dict):
        raise ContextError("output_format must be an object")
    for key, supported in OUTPUT_FORMAT.items():
        if value and value.get(key, supported) != supported:
            raise ContextError(f"output_format.{key} {value[key]!r} is not supported; lyre sends container 'raw', "
                                f"encoding 'pcm_s16le', sample_rate {orpheus.SAMPLE_RATE}")


def settings(message: dict[str, Any], tts: Synthesizer) -> Settings:
    """A context's settings, from its first message (an unset max_tokens is the pipeline's default,
    capped at the server's limit, as for HTTP)."""
    try:
        options = SpeechOptions(**{name: message[name] for name in _SAMPLING_FIELDS if name in message})
    except (ValueError, TypeError) as exc:
        raise ContextError(str(exc)) from None
    trim = message.get("trim", True)
    if not isinstance(trim, bool):
        raise ContextError(f"trim must be true or false, got {trim!r}")
    timestamps = message.get("add_timestamps", False)
    if not isinstance(timestamps, bool):
        raise ContextError(f"add_timestamps must be true or false, got {timestamps!r}")
    if message.get("add_phoneme_timestamps") is True:
        raise ContextError("add_phoneme_timestamps is not supported; lyre sends word timestamps (add_timestamps)")
    return Settings(voice_of(message, tts), options, trim, timestamps, reading(message))


def reading(message: dict[str, Any]) -> TextOptions:
    """How a context's text is read, from its first message: ``normalize`` (default true), ``language``
    (default English), ``ssml`` (or a first transcript starting with ``<speak``: the text is then read whole
    at the context's end)."""
    normalize, ssml, language = message.get("normalize", True), message.get("ssml", False), message.get("language")
    for name, value in (("normalize", normalize), ("ssml", ssml)):
        if not isinstance(value, bool):
            raise ContextError(f"{name} must be true or false, got {value!r}")
    if language is not None and not isinstance(language, str):
        raise ContextError(f"language must be a string such as 'en', got {language!r}")
    transcript = message.get("transcript", "")
    try:
        return TextOptions.of(transcript if isinstance(transcript, str) else "", normalize, language, ssml)
    except ValueError as exc:
        raise ContextError(str(exc)) from None


def describe(exc: Exception, context_id: str) -> tuple[str, str]:
    """What to tell the client about a context that failed, and the errors-metric kind."""
    if isinstance(exc, ContextError):
        return str(exc), exc.kind
    if isinstance(exc, IdleStream):
        return f"context {exc}", "idle"
    if isinstance(exc, (Overloaded, PipelineBusy)):
        return str(exc), "overloaded"
    if isinstance(exc, ValueError):  # text the pipeline refused, or a request too long for the engine
        return str(exc), "invalid_request"
    log.exception("websocket context %r failed", context_id)
    return f"speech failed: {exc}", "stream"
