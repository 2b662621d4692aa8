"""One Twilio Media Stream bridged to the voice agent: Twilio's messages in, the agent's speech, marks and
clears out, in Twilio's Media Streams protocol (lyre.server.calls.twilio_stream serves it).

    call = TwilioCall(websocket, state, calls, credential)
    await call.serve()          # until stop, the caller gone, a fault or a timeout; frees everything

Twilio sends JSON text messages: ``connected``, ``start`` (the stream's and call's ids, the media format,
the custom parameters), ``media`` (the caller's audio, base64 mu-law at 8 kHz, 20 ms a message),
``mark`` (one of lyre's, echoed once the audio before it has played), ``dtmf`` (ignored) and ``stop``.
The conversation (a `VoiceCall`) opens at ``start``: it listens at 16 kHz, Whisper's own rate, so the
caller's audio is resampled once. Custom parameters set it up: ``session``, a JSON object as a
``session.update``'s session (``{"max_speech_tokens": 400}``), then ``voice`` and ``instructions``. A
stream admitted by a credential (lyre.server.calls.twilio_credential) must start for the call it was issued
for, with the parameters it granted.

Back go ``media`` messages of 20 ms (160 bytes of mu-law), a ``mark`` after each chunk of a reply's
audio, and ``clear`` when the caller speaks over a reply Twilio is still playing (lyre.server.calls.twilio_sender).
The marks say how much of a reply the caller heard: at a barge-in the reply's history is cut there.

A fault ends the stream: the socket closes with a code and a reason naming it, and a log line says so.
1003: a binary message; 1007: a message that is not a JSON object with an ``event``, a payload that is not
base64; 1008: an unknown event, media before ``start``, a second ``start``, a payload of an impossible
size, a media format other than mu-law at 8 kHz, custom parameters the session refuses, a ``start`` for
another call or with other parameters than its credential's, no ``start`` within START_TIMEOUT_S, a
client that leaves lyre's messages unread; 1009: a message over MAX_MESSAGE_CHARS; 1000: ``stop``, or no
media for the server's ``stt_idle_timeout_s``; 1011: a fault of lyre's own. Whatever the end, the
conversation is closed and its replies' engine slots freed.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import json
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any

from fastapi import FastAPI, WebSocket, WebSocketDisconnect, status
from starlette.websockets import WebSocketDisconnected, WebSocketState

from lyre.server.state import ServerState
from lyre.server.calls.twilio_credential import Credential, Refused
from lyre.server.calls.twilio_media import PHONE_RATE, ulaw_decode
from lyre.server.calls.twilio_sender import TwilioSender
from lyre.server.calls.voice_call import VoiceCall

__all__ = ["MAX_MESSAGE_CHARS", "START_TIMEOUT_S", "TwilioCall", "TwilioCalls"]

log = logging.getLogger("lyre.server.twilio")

START_TIMEOUT_S = 5.0  # Twilio sends start right after connected: a stream without it this long is not Twilio
MAX_MESSAGE_CHARS = 64 * 1024  # a second of media is about 11 kB of JSON
_MAX_PAYLOAD = PHONE_RATE  # bytes: a second of mu-law
_LISTEN_RATE = 16_000  # the session's input: Whisper's rate, so the caller's audio is resampled once
_MAX_UNSENT = 3000  # messages queued for Twilio (a minute of frames): past this, read no more until they go
_LAST_SEND_S = 5.0  # how long Twilio may leave them unread; also for the close
_HEARD_KEPT = 16
_BAD_INPUT = (status.WS_1003_UNSUPPORTED_DATA, status.WS_1007_INVALID_FRAME_PAYLOAD_DATA,
              status.WS_1008_POLICY_VIOLATION, status.WS_1009_MESSAGE_TOO_BIG)


class _Hangup(Exception):
    """End the stream: close the socket with ``code``, saying ``reason``; a fault unless Twilio said stop."""

    def __init__(self, code: int, reason: str, fault: bool = True) -> None:
        super().__init__(reason)
        self.code = code
        self.reason = reason[:120]  # a close reason is at most 123 bytes
        self.fault = fault


class TwilioCalls:
    """The app's open phone streams, by stream sid."""

    def __init__(self) -> None:
        self.open: dict[str, TwilioCall] = {}

    @classmethod
    def of(cls, app: FastAPI) -> TwilioCalls:
        if (calls := getattr(app.state, "twilio_calls", None)) is None:
            calls = app.state.twilio_calls = cls()
        return calls


class TwilioCall:
    """One Media Stream, and the `MediaSink` of its conversation; see the module docstring."""

    def __init__(self, websocket: WebSocket, state: ServerState, calls: TwilioCalls,
                 credential: Credential | None = None) -> None:
        """``credential``: what admitted the stream, which its ``start`` must match (None: no token)."""
        self.websocket = websocket
        self.state = state
        self.stream_sid = ""  # "" until start
        self.call_sid = ""
        self.voice: VoiceCall | None = None
        # The caller's turns as the agent heard them: (time.perf_counter(), transcript), the last few.
        self.heard: deque[tuple[float, str]] = deque(maxlen=_HEARD_KEPT)
        self._calls = calls
        self._credential = credential
        self._sender = TwilioSender(websocket)
        self._errors = 0  # error events from the conversation
        self._last_error = ""
        self._deadline = asyncio.get_running_loop().time() + START_TIMEOUT_S

    async def serve(self) -> None:
        """Bridge the stream until it ends; then close the conversation and the socket."""
        writer = asyncio.create_task(self._sender.run(), name="lyre-twilio-writer")
        end: _Hangup | None = None  # None: the caller left
        try:
            await self._read()
        except _Hangup as hangup:
            end = hangup
        except Exception:
            log.exception("twilio stream %s failed", self.stream_sid or "(not started)")
            end = _Hangup(status.WS_1011_INTERNAL_ERROR, "internal error")
        finally:
            await self._end(writer, end)

    # -- Twilio's messages --

    async def _read(self) -> None:
        while True:
            try:
                async with asyncio.timeout_at(self._deadline):
                    message = await self.websocket.receive()
            except TimeoutError:
                raise self._timed_out() from None
            if message["type"] == "websocket.disconnect":
                return
            if (text := message.get("text")) is None:
                raise _Hangup(status.WS_1003_UNSUPPORTED_DATA, "a binary message: Twilio sends JSON text")
            await self._receive(text)
            if self._sender.unsent >= _MAX_UNSENT and not await self._sender.drained(_LAST_SEND_S):
                raise _Hangup(status.WS_1008_POLICY_VIOLATION, f"over {_MAX_UNSENT} messages left unread")

    def _timed_out(self) -> _Hangup:
        if not self.stream_sid:
            return _Hangup(status.WS_1008_POLICY_VIOLATION, f"no start message within {START_TIMEOUT_S:g} s")
        return _Hangup(status.WS_1000_NORMAL_CLOSURE, f"no media for {self.state.config.stt_idle_timeout_s:g} s")

    async def _receive(self, text: str) -> None:
        if len(text) > MAX_MESSAGE_CHARS:
            raise _Hangup(status.WS_1009_MESSAGE_TOO_BIG, f"a message of {len(text)} characters "
                                                           f"(at most {MAX_MESSAGE_CHARS})")
        try:
            message = json.loads(text)
        except json.JSONDecodeError:
            raise _Hangup(status.WS_1007_INVALID_FRAME_PAYLOAD_DATA, "a message that is not JSON") from None
        if not isinstance(message, dict) or not isinstance(event := message.get("event"), str):
            raise _Hangup(status.WS_1007_INVALID_FRAME_PAYLOAD_DATA, "a message that is not an object with an event")
        if (act := _ACTS.get(event)) is None:
            raise _Hangup(status.WS_1008_POLICY_VIOLATION, f"unknown event {event[:40]!r}")
        if self.stream_sid and message.get("streamSid", self.stream_sid) != self.stream_sid:
            raise _Hangup(status.WS_1008_POLICY_VIOLATION, f"{event} for another stream than {self.stream_sid}")
        await act(self, message)

    async def _connected(self, message: dict[str, Any]) -> None:
        pass

    async def _start(self, message: dict[str, Any]) -> None:
        if self.stream_sid:
            raise _Hangup(status.WS_1008_POLICY_VIOLATION, "a second start message")
        start = _field(message, "start")
        sid = start.get("streamSid") or message.get("streamSid")
        if not isinstance(sid, str) or not sid:
            raise _Hangup(status.WS_1008_POLICY_VIOLATION, "start without start.streamSid")
        if not _phone_audio(media_format := start.get("mediaFormat") or {}):
            raise _Hangup(status.WS_1008_POLICY_VIOLATION, f"start.mediaFormat {media_format} is not "
                                                           "mu-law at 8 kHz, mono")
        params = start.get("customParameters") or {}
        if not isinstance(params, dict) or not all(isinstance(v, str) for v in params.values()):
            raise _Hangup(status.WS_1008_POLICY_VIOLATION, "start.customParameters must map names to strings")
        if self._credential is not None:
            try:
                self._credential.check(str(start.get("callSid", "")), params)
            except Refused as exc:
                self.state.metrics.twilio_refused.labels(exc.kind).inc()
                raise _Hangup(status.WS_1008_POLICY_VIOLATION, f"stream credential: {exc}") from None
        self.stream_sid, self.call_sid = sid, str(start.get("callSid", ""))
        self._sender.stream_sid = sid
        self.voice = VoiceCall(self.state, self)
        self._calls.open[sid] = self
        await self._set_up(params)
        self._deadline = asyncio.get_running_loop().time() + self.state.config.stt_idle_timeout_s
        log.info("twilio stream %s (call %s) started", sid, self.call_sid)

    async def _set_up(self, params: dict[str, str]) -> None:
        """The session the call starts with: the input rate, then the custom parameters'."""
        updates: list[dict[str, Any]] = [{"audio": {"input": {"format": {"type": "audio/pcm", "rate": _LISTEN_RATE}}}}]
        if "session" in params:
            try:
                session = json.loads(params["session"])
            except json.JSONDecodeError:
                session = None
            if not isinstance(session, dict):
                raise _Hangup(status.WS_1008_POLICY_VIOLATION, "customParameters.session is not a JSON object")
            updates.append(session)
        if params.get("voice"):
            updates.append({"audio": {"output": {"voice": params["voice"]}}})
        if params.get("instructions"):
            updates.append({"instructions": params["instructions"]})
        assert self.voice is not None
        for session in updates:
            errors = self._errors
            await self.voice.receive(json.dumps({"type": "session.update", "session": {"type": "realtime", **session}}))
            if self._errors > errors:
                raise _Hangup(status.WS_1008_POLICY_VIOLATION, f"customParameters: {self._last_error}")

    async def _media(self, message: dict[str, Any]) -> None:
        if self.voice is None:
            raise _Hangup(status.WS_1008_POLICY_VIOLATION, "media before start")
        media = _field(message, "media")
        if media.get("track", "inbound") not in ("inbound", "inbound_track"):
            return  # only the caller's audio is heard
        if not isinstance(payload := media.get("payload"), str):
            raise _Hangup(status.WS_1007_INVALID_FRAME_PAYLOAD_DATA, "media without media.payload")
        try:
            ulaw = base64.b64decode(payload, validate=True)
        except binascii.Error:
            raise _Hangup(status.WS_1007_INVALID_FRAME_PAYLOAD_DATA, "media.payload is not base64") from None
        if not ulaw or len(ulaw) % 2 or len(ulaw) > _MAX_PAYLOAD:
            raise _Hangup(status.WS_1008_POLICY_VIOLATION, f"media.payload of {len(ulaw)} bytes: 8 kHz mu-law "
                                                           f"comes in 20 ms frames (160 bytes), at most 1 s")
        self._deadline = asyncio.get_running_loop().time() + self.state.config.stt_idle_timeout_s
        await self.voice.audio(ulaw_decode(ulaw), PHONE_RATE)

    async def _mark(self, message: dict[str, Any]) -> None:
        if not isinstance(name := _field(message, "mark").get("name"), str):
            raise _Hangup(status.WS_1008_POLICY_VIOLATION, "mark without mark.name")
        self._sender.echoed(name)

    async def _dtmf(self, message: dict[str, Any]) -> None:
        pass  # a key pressed: the agent listens to speech only

    async def _stop(self, message: dict[str, Any]) -> None:
        raise _Hangup(status.WS_1000_NORMAL_CLOSURE, "stop", fault=False)

    # -- the conversation's output (MediaSink) --

    def play(self, pcm: bytes, response_id: str) -> None:
        self._sender.play(pcm, response_id)

    def clear(self) -> list[tuple[str, float]]:
        return self._sender.clear()

    def event(self, event: dict[str, Any]) -> None:
        kind = event["type"]
        if kind == "response.done":
            self._sender.finish(event["response"]["id"])
        elif kind == "conversation.item.input_audio_transcription.completed":
            self.heard.append((time.perf_counter(), event.get("transcript", "")))
        elif kind == "error":
            self._errors += 1
            self._last_error = str(event["error"].get("message"))
            log.info("twilio stream %s: %s", self.stream_sid, self._last_error)

    # -- plumbing --

    async def _end(self, writer: asyncio.Task[None], end: _Hangup | None) -> None:
        """Close the conversation (its replies' slots are freed), send what is queued, close the socket."""
        if self._calls.open.get(self.stream_sid) is self:
            del self._calls.open[self.stream_sid]
        if self.voice is not None:
            await self.voice.close()
        self._sender.close()
        done, _ = await asyncio.wait({writer}, timeout=_LAST_SEND_S)
        if not done:
            writer.cancel()
            await asyncio.wait({writer})
        where = f"twilio stream {self.stream_sid or '(not started)'}"
        if end is None:
            log.info("%s ended: the caller left", where)
            return
        log.log(logging.WARNING if end.fault else logging.INFO, "%s closed (%d): %s", where, end.code, end.reason)
        if end.code in _BAD_INPUT:
            self.state.metrics.errors.labels("invalid_request").inc()
        if self.websocket.client_state == WebSocketState.CONNECTED:
            try:  # a client that reads nothing could hold the close for ever
                await asyncio.wait_for(self.websocket.close(end.code, end.reason), _LAST_SEND_S)
            except (TimeoutError, WebSocketDisconnect, WebSocketDisconnected, RuntimeError):
                pass


def _phone_audio(media_format: object) -> bool:
    """Twilio's one media format, a field left out taken as it: mu-law at 8 kHz, mono."""
    return isinstance(media_format, dict) and (
        media_format.get("encoding", "audio/x-mulaw"), media_format.get("sampleRate", PHONE_RATE),
        media_format.get("channels", 1)) == ("audio/x-mulaw", PHONE_RATE, 1)


def _field(message: dict[str, Any], name: str) -> dict[str, Any]:
    """The object a message carries under its event's name; a fault if it is not one."""
    value = message.get(name)
    if not isinstance(value, dict):
        raise _Hangup(status.WS_1008_POLICY_VIOLATION, f"{message['event']} without its {name} object")
    return value


_ACTS: dict[str, Callable[[TwilioCall, dict[str, Any]], Awaitable[None]]] = {
    "connected": TwilioCall._connected, "start": TwilioCall._start, "media": TwilioCall._media,
    "mark": TwilioCall._mark, "dtmf": TwilioCall._dtmf, "stop": TwilioCall._stop,
}
