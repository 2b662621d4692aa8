"""A request's routing identity: its session when the client names one, else its voice.

The session (``x-lyre-session`` header or ``session`` query parameter) wins:
everything a client sends under one session lands on one server. Without
one, requests for the same voice land together, where its adapter is
resident. A request with neither (a transcription upload, a model listing)
gets a random identity: the ring's bounded load spreads those.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["CALLS", "CALL_PREFIX", "SERVER_HEADER", "SESSION_HEADER", "Identity", "IdentityError", "call_of",
           "identity_of", "json_body", "key_in_body", "service_of", "voice_in_message"]

SESSION_HEADER = "x-lyre-session"
SERVER_HEADER = "x-lyre-server"  # on every proxied response: the server that handled it
_MAX_ID_CHARS = 256

_REALTIME = "/v1/realtime"
CALLS = "/v1/realtime/calls"
CALL_PREFIX = "rtc_"  # a WebRTC call's id: lyre.fleet.tagged_id's, naming the server that holds the call
# Which service each API needs; None: any server will do. A realtime socket is a conversation, which needs a
# server that can hold one (lyre.fleet.records's "agent"), unless it asks for transcription, as OpenAI's clients do;
# so do calls, over WebRTC or the phone. Word times of known text need no model of the server's own.
_SERVICES = {
    "/v1/audio/speech": "tts",
    "/v1/audio/voices": "tts",
    "/v1/tts/websocket": "tts",
    "/v1/audio/transcriptions": "stt",
    _REALTIME: "agent",
    CALLS: "agent",
    "/v1/twilio/voice": "agent",
    "/v1/twilio/media-stream": "agent",
    "/v1/chat/completions": "chat",
}
_KEY_IN_BODY = frozenset({"/v1/audio/speech"})  # the APIs whose JSON body may name the voice to route by


class IdentityError(ValueError):
    """A session id the router will not hash (empty or too long)."""


@dataclass(frozen=True)
class Identity:
    key: str  # the ring key: "session:ID", "voice:NAME" or "any:RANDOM"
    voice: str | None = None  # the voice, when routing by it: hot placements and adapter preference apply

    @property
    def kind(self) -> str:
        return self.key.split(":", 1)[0]


def service_of(path: str, query: Mapping[str, str]) -> str | None:
    """The service a request to ``path`` needs (None: any server will do)."""
    if path == _REALTIME and query.get("intent") == "transcription":
        return "stt"
    if (service := _SERVICES.get(path)) is not None:
        return service
    # A route with its own id in the path: a voice to delete, a call, a phone stream's credential.
    return next((_SERVICES[base] for base in _SERVICES if path.startswith(base + "/")), None)


def call_of(path: str) -> str | None:
    """The call a request to ``path`` is about (``/v1/realtime/calls/{id}``, and its ``/hangup``), or None."""
    if not path.startswith(CALLS + "/"):
        return None
    return path[len(CALLS) + 1:].split("/", 1)[0] or None


def key_in_body(path: str) -> bool:
    """The body may name the request's routing identity, so it must be read before the request is routed."""
    return path in _KEY_IN_BODY


def identity_of(headers: Mapping[str, str], query: Mapping[str, str], body: Any = None) -> Identity:
    """The identity from the session header or query, else from ``body``'s or the query's voice."""
    session = headers.get(SESSION_HEADER) or query.get("session")
    if session is not None:
        if not 0 < len(session) <= _MAX_ID_CHARS:
            raise IdentityError(f"the session id ({SESSION_HEADER} or ?session=) must be 1 to "
                                f"{_MAX_ID_CHARS} characters, got {len(session)}")
        return Identity(f"session:{session}")
    voice = _voice(body) or query.get("voice")
    if voice:
        return Identity(f"voice:{voice}", voice)
    return Identity(f"any:{uuid.uuid4().hex}")


def json_body(body: bytes, content_type: str) -> Any:
    """The JSON body, or None (not JSON, or not parseable: the server will say what is wrong)."""
    if not body or not content_type.startswith("application/json"):
        return None
    try:
        return json.loads(body)
    except ValueError:
        return None


def voice_in_message(message: Any) -> str | None:
    """The voice of a streaming-TTS message: ``{"voice": {"mode": "id", "id": NAME}}`` or ``{"voice": NAME}``."""
    return _voice(message)


def _voice(body: Any) -> str | None:
    if not isinstance(body, dict):
        return None
    voice = body.get("voice")
    if isinstance(voice, dict):
        voice = voice.get("id")
    return voice if isinstance(voice, str) and 0 < len(voice) <= _MAX_ID_CHARS else None
