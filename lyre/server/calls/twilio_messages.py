"""Twilio's Media Streams messages as a phone stream (lyre.server.calls.twilio_call) reads them: each checked
and its fields read out, whatever is wrong with one a `Hangup` naming it.

Twilio sends JSON text messages: ``connected``, ``start`` (the stream's and call's ids, the media format,
the custom parameters), ``media`` (the caller's audio, base64 mu-law at 8 kHz, 20 ms a message),
``mark`` (one of lyre's, echoed once the audio before it has played), ``dtmf`` and ``stop``. Custom
parameters set the conversation up: ``session``, a JSON object as a ``session.update``'s session
(``{"max_speech_tokens": 400}``), then ``voice`` and ``instructions``.
"""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import dataclass
from typing import Any

from fastapi import status

from lyre.server.calls.twilio_media import PHONE_RATE

__all__ = ["MAX_MESSAGE_CHARS", "Hangup", "Start", "parse", "read_mark", "read_media", "read_start",
           "session_updates"]

MAX_MESSAGE_CHARS = 64 * 1024  # a second of media is about 11 kB of JSON
_MAX_PAYLOAD = PHONE_RATE  # bytes: a second of mu-law
_LISTEN_RATE = 16_000  # the session's input: Whisper's rate, so the caller's audio is resampled once


class Hangup(Exception):
    """End the stream: close the socket with ``code``, saying ``reason``; a fault unless Twilio said stop."""

    def __init__(self, code: int, reason: str, fault: bool = True) -> None:
        super().__init__(reason)
        self.code = code
        self.reason = reason[:120]  # a close reason is at most 123 bytes
        self.fault = fault


@dataclass(frozen=True)
class Start:
    """What a ``start`` message says: the stream's and the call's ids, and the custom parameters."""

    stream_sid: str
    call_sid: str
    params: dict[str, str]


def parse(text: str) -> tuple[str, dict[str, Any]]:
    """A text message's event and the message: a JSON object with an ``event``, of a bounded size."""
    if len(text) > MAX_MESSAGE_CHARS:
        raise Hangup(status.WS_1009_MESSAGE_TOO_BIG, f"a message of {len(text)} characters "
                                                      f"(at most {MAX_MESSAGE_CHARS})")
    try:
        message = json.loads(text)
    except json.JSONDecodeError:
        raise Hangup(status.WS_1007_INVALID_FRAME_PAYLOAD_DATA, "a message that is not JSON") from None
    if not isinstance(message, dict) or not isinstance(event := message.get("event"), str):
        raise Hangup(status.WS_1007_INVALID_FRAME_PAYLOAD_DATA, "a message that is not an object with an event")
    return event, message


def read_start(message: dict[str, Any]) -> Start:
    """A ``start`` message's ids and parameters, its media format mu-law at 8 kHz."""
    start = _field(message, "start")
    sid = start.get("streamSid") or message.get("streamSid")
    if not isinstance(sid, str) or not sid:
        raise Hangup(status.WS_1008_POLICY_VIOLATION, "start without start.streamSid")
    if not _phone_audio(media_format := start.get("mediaFormat") or {}):
        raise Hangup(status.WS_1008_POLICY_VIOLATION, f"start.mediaFormat {media_format} is not "
                                                      "mu-law at 8 kHz, mono")
    params = start.get("customParameters") or {}
    if not isinstance(params, dict) or not all(isinstance(v, str) for v in params.values()):
        raise Hangup(status.WS_1008_POLICY_VIOLATION, "start.customParameters must map names to strings")
    return Start(sid, str(start.get("callSid", "")), params)


def session_updates(params: dict[str, str]) -> list[dict[str, Any]]:
    """The sessions of the ``session.update``s a call starts with, in order: the input rate, then the custom
    parameters' (``session``, ``voice``, ``instructions``)."""
    updates: list[dict[str, Any]] = [{"audio": {"input": {"format": {"type": "audio/pcm", "rate": _LISTEN_RATE}}}}]
    if "session" in params:
        try:
            session = json.loads(params["session"])
        except json.JSONDecodeError:
            session = None
        if not isinstance(session, dict):
            raise Hangup(status.WS_1008_POLICY_VIOLATION, "customParameters.session is not a JSON object")
        updates.append(session)
    if params.get("voice"):
        updates.append({"audio": {"output": {"voice": params["voice"]}}})
    if params.get("instructions"):
        updates.append({"instructions": params["instructions"]})
    return updates


def read_media(message: dict[str, Any]) -> bytes | None:
    """A ``media`` message's mu-law bytes; None for a track other than the caller's (only they are heard)."""
    media = _field(message, "media")
    if media.get("track", "inbound") not in ("inbound", "inbound_track"):
        return None
    if not isinstance(payload := media.get("payload"), str):
        raise Hangup(status.WS_1007_INVALID_FRAME_PAYLOAD_DATA, "media without media.payload")
    try:
        ulaw = base64.b64decode(payload, validate=True)
    except binascii.Error:
        raise Hangup(status.WS_1007_INVALID_FRAME_PAYLOAD_DATA, "media.payload is not base64") from None
    if not ulaw or len(ulaw) % 2 or len(ulaw) > _MAX_PAYLOAD:
        raise Hangup(status.WS_1008_POLICY_VIOLATION, f"media.payload of {len(ulaw)} bytes: 8 kHz mu-law "
                                                      f"comes in 20 ms frames (160 bytes), at most 1 s")
    return ulaw


def read_mark(message: dict[str, Any]) -> str:
    """A ``mark`` message's name."""
    if not isinstance(name := _field(message, "mark").get("name"), str):
        raise Hangup(status.WS_1008_POLICY_VIOLATION, "mark without mark.name")
    return name


def _phone_audio(media_format: object) -> bool:
    """Twilio's one media format, a field left out taken as it: mu-law at 8 kHz, mono."""
    return isinstance(media_format, dict) and (
        media_format.get("encoding", "audio/x-mulaw"), media_format.get("sampleRate", PHONE_RATE),
        media_format.get("channels", 1)) == ("audio/x-mulaw", PHONE_RATE, 1)


def _field(message: dict[str, Any], name: str) -> dict[str, Any]:
    """The object a message carries under its event's name; a fault if it is not one."""
    value = message.get(name)
    if not isinstance(value, dict):
        raise Hangup(status.WS_1008_POLICY_VIOLATION, f"{message['event']} without its {name} object")
    return value
