"""The realtime transcription protocol on the wire: client events read and checked, settings
updated from them, and the session objects and errors sent back.

Two shapes of the same settings, as OpenAI's clients send them:

- beta, ``transcription_session.update``::

    {"session": {"input_audio_format": "pcm16",
                 "input_audio_transcription": {"model": "whisper-1", "language": "en", "prompt": ""},
                 "turn_detection": {"type": "server_vad", "threshold": 0.5,
                                    "prefix_padding_ms": 300, "silence_duration_ms": 500}}}

- GA, ``session.update``::

    {"session": {"type": "transcription",
                 "audio": {"input": {"format": {"type": "audio/pcm", "rate": 24000},
                                     "transcription": {...}, "turn_detection": {...}}}}}

A field left out of an update keeps its current value; an object that is
given (``transcription``, ``turn_detection``) is read whole, its own missing
fields taking the defaults. ``turn_detection: null`` turns detection off: the
client commits each utterance itself. Fields for features lyre does not have
(noise reduction, logprobs, response creation) are accepted and ignored, so
clients that always send them still work; anything lyre cannot honour as
asked (another audio encoding or rate, a voice session) is refused. Input
audio may be pcm16 (24 or 16 kHz) or G.711 (mu-law or A-law, 8 kHz). An update is
read group by group (format, transcription, turn detection): a group that
is refused is named in an ``error`` event and the others still apply.

``semantic_vad`` is lyre's VAD with the end of turn set by its ``eagerness``
(`EAGERNESS_SILENCE_MS`: how long a silence ends the turn; a voice agent's
end-of-turn model may end it sooner, more readily the more eager), and is
reported back as the client set it.
"""

from __future__ import annotations

import base64
import binascii
import json
import logging
import secrets
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from lyre.common.g711 import alaw_decode, ulaw_decode
from lyre.stt.whisper import TranscribeOptions
from lyre.stt.vad import VADConfig

__all__ = [
    "DEFAULT_MODEL", "EAGERNESS_SILENCE_MS", "ENCODINGS", "G711_RATE", "RATES", "RealtimeError", "SessionSettings", "Shape", "act_on", "append_audio", "error_event", "expect_object",
    "new_id", "parse_event", "format_object", "read_input_format", "read_transcription", "read_turn_detection", "read_update",
    "session_object", "vad_object",
]

DEFAULT_MODEL = "whisper-1"  # what clients name; lyre transcribes with whichever Whisper it serves
RATES = (24_000, 16_000)  # pcm16 input rates taken: OpenAI's one, and Whisper's own
G711_RATE = 8_000  # G.711 (audio/pcmu, audio/pcma; beta's g711_ulaw, g711_alaw) is always 8 kHz
# Each encoding's names: GA's format type, beta's format string.
ENCODINGS = {"pcm16": ("audio/pcm", "pcm16"), "pcmu": ("audio/pcmu", "g711_ulaw"), "pcma": ("audio/pcma", "g711_alaw")}
# semantic_vad: the silence that ends a turn by eagerness (OpenAI's waits up to 8, 4 and 2 s at low, medium
# and high for its model to be sure; here the VAD's silence is the fallback and Smart Turn the model).
EAGERNESS_SILENCE_MS = {"low": 1500, "medium": 800, "auto": 800, "high": 500}

Shape = Literal["beta", "ga"]

log = logging.getLogger("lyre.stt.realtime")


class RealtimeError(Exception):
    """A client event lyre cannot act on; sent back as an ``error`` event, and the session goes on."""

    def __init__(self, message: str, code: str = "invalid_value", param: str | None = None,
                 kind: str = "invalid_request_error") -> None:
        super().__init__(message)
        self.code = code
        self.param = param
        self.kind = kind  # the error's "type": invalid_request_error or server_error


@dataclass(frozen=True)
class SessionSettings:
    """One session's settings; the defaults are OpenAI's for a transcription session."""

    rate: int = 24_000  # of the audio the client appends
    encoding: str = "pcm16"  # a key of ENCODINGS: pcm16, or G.711 at 8 kHz
    model: str = DEFAULT_MODEL
    language: str | None = None  # None: detected
    prompt: str | None = None
    turn_detection: VADConfig | None = field(default_factory=VADConfig)  # None: the client commits

    def pcm(self, audio: bytes) -> bytes:
        """The client's audio, in its encoding, as pcm16 at ``rate``."""
        if self.encoding == "pcmu":
            return ulaw_decode(audio)
        return alaw_decode(audio) if self.encoding == "pcma" else audio

    def options(self) -> TranscribeOptions:
        """The final pass's options: the REST endpoint's for the same language and prompt, on the live window."""
        return TranscribeOptions(language=self.language, prompt=self.prompt, live=True)


def new_id(prefix: str) -> str:
    return f"{prefix}_{secrets.token_hex(10)}"


async def act_on(text: str, max_bytes: int, handle: Callable[[dict[str, Any]], Awaitable[None] | None],
                 report: Callable[[RealtimeError, str | None], None]) -> None:
    """Parse one client event and ``handle`` it; a RealtimeError on the way goes to ``report``, with the
    client's ``event_id`` when it gave one.

    Any other exception is a bug in lyre, not the client's fault: it is logged with its traceback, the client
    is told which event failed as a ``server_error``, and the session goes on (one event's failure does not
    end a session, nor the socket it runs on)."""
    client_event_id, kind = None, None
    try:
        event = parse_event(text, max_bytes)
        client_event_id = event.get("event_id") if isinstance(event.get("event_id"), str) else None
        kind = event["type"]
        if (work := handle(event)) is not None:
            await work
    except RealtimeError as error:
        report(error, client_event_id)
    except Exception as exc:
        log.exception("client event %s failed", kind)
        report(RealtimeError(f"{kind} failed inside lyre ({type(exc).__name__}); nothing of it was done, and the "
                             "session goes on", "server_error", kind="server_error"), client_event_id)


def parse_event(text: str, max_bytes: int) -> dict[str, Any]:
    """One client event from its JSON text: an object with a string ``type``."""
    if (size := len(text.encode())) > max_bytes:
        raise RealtimeError(f"event is {size} bytes, over the limit of {max_bytes}; append audio in smaller "
                            "pieces", "message_too_large")
    try:
        event = json.loads(text)
    except (ValueError, RecursionError) as exc:  # RecursionError: nested deeper than the parser goes
        raise RealtimeError(f"event is not valid JSON: {exc}", "invalid_json") from None
    if not isinstance(event, dict) or not isinstance(event.get("type"), str):
        raise RealtimeError("an event must be a JSON object with a string type", "invalid_event", "type")
    return event


def append_audio(event: dict[str, Any]) -> bytes:
    """The pcm16 bytes of an ``input_audio_buffer.append``, from its base64 ``audio``."""
    audio = event.get("audio")
    if not isinstance(audio, str):
        raise RealtimeError("input_audio_buffer.append needs audio: base64 pcm16 mono", "invalid_type", "audio")
    try:
        return base64.b64decode(audio, validate=True)
    except binascii.Error as exc:
        raise RealtimeError(f"audio is not valid base64 ({exc})", "invalid_audio", "audio") from None


def read_update(event: dict[str, Any], current: SessionSettings, check_language: Callable[[str | None], None]
                ) -> tuple[SessionSettings, Shape, list[RealtimeError]]:
    """The settings after ``event`` (either update), which shape it came in, and the groups refused (the
    settings hold the rest); RealtimeError if the update as a whole cannot be read."""
    shape: Shape = "beta" if event["type"] == "transcription_session.update" else "ga"
    session = expect_object(event.get("session"), "session")
    if shape == "beta":
        settings = _read(current, session, "session", "input_audio_format", "input_audio_transcription",
                         check_language)
    else:
        kind = session.get("type", "transcription")
        if kind != "transcription":
            raise RealtimeError(f"session.type {kind!r} is not supported: lyre serves transcription sessions "
                                "only (session.type 'transcription')", param="session.type")
        audio = expect_object(session.get("audio", {}), "session.audio")
        parts = expect_object(audio.get("input", {}), "session.audio.input")
        settings = _read(current, parts, "session.audio.input", "format", "transcription", check_language)
    return settings[0], shape, settings[1]


def session_object(settings: SessionSettings, session_id: str, shape: Shape) -> dict[str, Any]:
    """The session as ``*.created`` and ``*.updated`` events carry it, in ``shape``."""
    transcription = {"model": settings.model, "language": settings.language, "prompt": settings.prompt or ""}
    vad = settings.turn_detection
    turn_detection = None if vad is None else vad_object(vad)
    if shape == "beta":
        return {"id": session_id, "object": "realtime.transcription_session",
                "input_audio_format": ENCODINGS[settings.encoding][1],
                "input_audio_transcription": transcription, "turn_detection": turn_detection,
                "input_audio_noise_reduction": None, "include": None}
    return {"type": "transcription", "id": session_id, "object": "realtime.transcription_session",
            "audio": {"input": {"format": format_object(settings.encoding, settings.rate),
                                "transcription": transcription, "turn_detection": turn_detection,
                                "noise_reduction": None}},
            "include": None}


def format_object(encoding: str, rate: int) -> dict[str, Any]:
    """A GA audio format: ``{"type": "audio/pcm", "rate": R}``, or G.711's type alone."""
    return {"type": "audio/pcm", "rate": rate} if encoding == "pcm16" else {"type": ENCODINGS[encoding][0]}


def vad_object(vad: VADConfig) -> dict[str, Any]:
    """The turn detection object, as sessions report it: ``semantic_vad`` with its eagerness, as the client
    set it, or ``server_vad`` with its numbers."""
    if vad.eagerness is not None:
        return {"type": "semantic_vad", "eagerness": vad.eagerness}
    return {"type": "server_vad", "threshold": vad.threshold, "prefix_padding_ms": vad.prefix_padding_ms,
            "silence_duration_ms": vad.silence_duration_ms}


def _read(current: SessionSettings, parts: dict[str, Any], where: str, format_key: str, transcription_key: str,
          check_language: Callable[[str | None], None]) -> tuple[SessionSettings, list[RealtimeError]]:
    """The three settings groups, named as one shape names them, under ``where``: the settings with each
    group that could be read, and the errors of those that could not."""
    changes: dict[str, Any] = {}
    refused: list[RealtimeError] = []
    try:
        if format_key in parts:
            changes["encoding"], changes["rate"] = read_input_format(parts[format_key], f"{where}.{format_key}")
    except RealtimeError as exc:
        refused.append(exc)
    # null transcription would mean "do not transcribe", which a transcription session cannot mean:
    # it is taken as no change.
    try:
        if (transcription := parts.get(transcription_key)) is not None:
            changes.update(read_transcription(transcription, f"{where}.{transcription_key}", check_language))
    except RealtimeError as exc:
        refused.append(exc)
    try:
        if "turn_detection" in parts:
            changes["turn_detection"] = read_turn_detection(parts["turn_detection"], f"{where}.turn_detection")
    except RealtimeError as exc:
        refused.append(exc)
    return replace(current, **changes), refused


def read_input_format(value: object, param: str) -> tuple[str, int]:
    """The encoding and sample rate of an audio format: beta's ``"pcm16"``, ``"g711_ulaw"``, ``"g711_alaw"``,
    or GA's ``{"type": "audio/pcm", "rate": R}``, ``{"type": "audio/pcmu"}``, ``{"type": "audio/pcma"}``."""
    kind = value.get("type") if isinstance(value, dict) else value
    for encoding, names in ENCODINGS.items():
        if kind in names and encoding != "pcm16":
            return encoding, G711_RATE
    if value == "pcm16":
        return "pcm16", 24_000
    if not isinstance(value, dict) or kind != "audio/pcm":
        raise RealtimeError(f"{param} must be 'pcm16', 'g711_ulaw', 'g711_alaw' or {{\"type\": \"audio/pcm\", "
                            f"\"rate\": 24000}}, {{\"type\": \"audio/pcmu\"}}, {{\"type\": \"audio/pcma\"}}, got "
                            f"{value!r}", param=param)
    rate = value.get("rate", 24_000)
    if isinstance(rate, bool) or rate not in RATES:
        raise RealtimeError(f"{param}.rate {rate!r} is not supported: send pcm16 at 24000 or 16000 Hz, or G.711 "
                            "(audio/pcmu, audio/pcma) at 8000 Hz", param=f"{param}.rate")
    return "pcm16", int(rate)


def read_transcription(value: object, param: str, check_language: Callable[[str | None], None]) -> dict[str, Any]:
    value = expect_object(value, param)
    model = value.get("model") or DEFAULT_MODEL
    language = value.get("language") or None
    prompt = value.get("prompt") or None
    for name, item in (("model", model), ("language", language), ("prompt", prompt)):
        if item is not None and not isinstance(item, str):
            raise RealtimeError(f"{param}.{name} must be a string, got {item!r}", "invalid_type", f"{param}.{name}")
    language = (language or "").strip().lower() or None  # as the REST endpoint reads it
    try:
        check_language(language)
    except ValueError as exc:
        raise RealtimeError(str(exc), param=f"{param}.language") from None
    try:
        TranscribeOptions(language=language, prompt=prompt)  # the final pass's own checks, now rather than later
    except ValueError as exc:
        raise RealtimeError(str(exc), param=f"{param}.prompt") from None
    return {"model": model, "language": language, "prompt": prompt}


def read_turn_detection(value: object, param: str) -> VADConfig | None:
    if value is None:
        return None
    value = expect_object(value, param)
    kind = value.get("type", "server_vad")
    if kind == "semantic_vad":
        eagerness = value.get("eagerness") or "auto"
        if eagerness not in EAGERNESS_SILENCE_MS:
            raise RealtimeError(f"{param}.eagerness must be one of {', '.join(EAGERNESS_SILENCE_MS)}, got "
                                f"{eagerness!r}", param=f"{param}.eagerness")
        return VADConfig(silence_duration_ms=EAGERNESS_SILENCE_MS[eagerness], eagerness=eagerness)
    if kind != "server_vad":
        raise RealtimeError(f"{param}.type {kind!r} is not supported: use 'server_vad' or 'semantic_vad', or "
                            "null to commit each utterance yourself", param=f"{param}.type")
    fields = {name: value[name] for name in ("threshold", "prefix_padding_ms", "silence_duration_ms")
              if value.get(name) is not None}
    try:
        return VADConfig(**fields)
    except ValueError as exc:
        raise RealtimeError(f"{param}: {exc}", param=param) from None


def expect_object(value: object, param: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise RealtimeError(f"{param} must be an object, got {value!r}", "invalid_type", param)
    return value


def error_event(error: RealtimeError, client_event_id: str | None = None) -> dict[str, Any]:
    """The ``error`` event for ``error``, naming the client event that caused it when known."""
    return {"type": "error", "event_id": new_id("event"),
            "error": {"type": error.kind, "code": error.code, "message": str(error), "param": error.param,
                      "event_id": client_event_id}}
