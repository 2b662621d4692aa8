"""One Twilio Media Stream bridged to the voice agent: Twilio's messages in, the agent's speech, marks and
clears out, in Twilio's Media Streams protocol (lyre.server.calls.twilio_stream serves it).

    call = TwilioCall(websocket, state, calls, credential)
    await call.serve()          # until stop, the caller gone, a fault or a timeout; frees everything

Twilio's JSON messages are read and checked by lyre.server.calls.twilio_messages (``dtmf`` is ignored).
The conversation (a `VoiceCall`) opens at ``start``: it listens at 16 kHz, Whisper's own rate, so the
caller's audio is resampled once, and the custom parameters set it up. A stream admitted by a credential
(lyre.server.calls.twilio_credential) must start for the call it was issued for, with the parameters it granted.

Back go ``media`` messages of 20 ms (160 bytes of mu-law), a ``mark`` after each chunk of a reply's
audio, and ``clear`` when the caller speaks over a reply Twilio is still playing (lyre.server.calls.twilio_sender).
The marks say how much of a reply the caller heard: at a barge-in the reply's history is cut there.

A fault ends the stream: the socket closes with a code and a reason naming it, and a log line says so.
1003: a binary message; 1007: a message that is not a JSON object with an ``event``, a payload that is not
base64; 1008: an unknown event, media before ``start``, a second ``start``, a payload of an impossible
size, a media format other than mu-law at 8 kHz, custom parameters the session refuses, a ``start`` for
another call or with other parameters than its credential's, no ``start`` within START_TIMEOUT_S, a
client that leaves lyre's messages unread, or takes nothing for the write timeout (a stall, counted in
``lyre_stalled_listeners_total{api="twilio"}``: lyre.server.watched_socket); 1009: a message over
twilio_messages.MAX_MESSAGE_CHARS; 1000: ``stop``, or no media for the server's ``stt_idle_timeout_s``;
1011: a fault of lyre's own. Whatever the end, the conversation is closed and its replies' engine slots freed.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any

from fastapi import FastAPI, WebSocket, status

from lyre.server.state import ServerState
from lyre.server.watched_socket import STALLED, Stalled, WatchedSocket
from lyre.server.calls.twilio_credential import Credential, Refused
from lyre.server.calls.twilio_media import PHONE_RATE, ulaw_decode
from lyre.server.calls.twilio_messages import Hangup, parse, read_mark, read_media, read_start, session_updates
from lyre.server.calls.twilio_sender import TwilioSender
from lyre.server.calls.voice_call import VoiceCall

__all__ = ["START_TIMEOUT_S", "TwilioCall", "TwilioCalls"]

log = logging.getLogger("lyre.server.twilio")

START_TIMEOUT_S = 5.0  # Twilio sends start right after connected: a stream without it this long is not Twilio
_MAX_UNSENT = 3000  # messages queued for Twilio (a minute of frames): past this, read no more until they go
_LAST_SEND_S = 5.0  # how long Twilio may leave them unread; also for the close
_HEARD_KEPT = 16
_BAD_INPUT = (status.WS_1003_UNSUPPORTED_DATA, status.WS_1007_INVALID_FRAME_PAYLOAD_DATA,
              status.WS_1008_POLICY_VIOLATION, status.WS_1009_MESSAGE_TOO_BIG)


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
        self._socket = WatchedSocket.of(websocket, state, "twilio")
        self._sender = TwilioSender(self._socket)
        self._errors = 0  # error events from the conversation
        self._last_error = ""
        self._deadline = asyncio.get_running_loop().time() + START_TIMEOUT_S

    async def serve(self) -> None:
        """Bridge the stream until it ends; then close the conversation and the socket."""
        writer = asyncio.create_task(self._sender.run(), name="lyre-twilio-writer")
        end: Hangup | None = None  # None: the caller left
        try:
            await self._read()
        except Hangup as hangup:
            end = hangup
        except Exception:
            log.exception("twilio stream %s failed", self.stream_sid or "(not started)")
            end = Hangup(status.WS_1011_INTERNAL_ERROR, "internal error")
        finally:
            await self._end(writer, end)

    # -- Twilio's messages --

    async def _read(self) -> None:
        while True:
            try:
                async with asyncio.timeout_at(self._deadline):
                    message = await self._socket.receive()
            except Stalled as stall:
                raise Hangup(STALLED, str(stall)) from None
            except TimeoutError:
                raise self._timed_out() from None
            if message["type"] == "websocket.disconnect":
                return
            if (text := message.get("text")) is None:
                raise Hangup(status.WS_1003_UNSUPPORTED_DATA, "a binary message: Twilio sends JSON text")
            await self._receive(text)
            if self._sender.unsent >= _MAX_UNSENT and not await self._sender.drained(_LAST_SEND_S):
                raise Hangup(status.WS_1008_POLICY_VIOLATION, f"over {_MAX_UNSENT} messages left unread")

    def _timed_out(self) -> Hangup:
        if not self.stream_sid:
            return Hangup(status.WS_1008_POLICY_VIOLATION, f"no start message within {START_TIMEOUT_S:g} s")
        return Hangup(status.WS_1000_NORMAL_CLOSURE, f"no media for {self.state.config.stt_idle_timeout_s:g} s")

    async def _receive(self, text: str) -> None:
        event, message = parse(text)
        if (act := _ACTS.get(event)) is None:
            raise Hangup(status.WS_1008_POLICY_VIOLATION, f"unknown event {event[:40]!r}")
        if self.stream_sid and message.get("streamSid", self.stream_sid) != self.stream_sid:
            raise Hangup(status.WS_1008_POLICY_VIOLATION, f"{event} for another stream than {self.stream_sid}")
        await act(self, message)

    async def _connected(self, message: dict[str, Any]) -> None:
        pass

    async def _start(self, message: dict[str, Any]) -> None:
        if self.stream_sid:
            raise Hangup(status.WS_1008_POLICY_VIOLATION, "a second start message")
        start = read_start(message)
        if self._credential is not None:
            try:
                self._credential.check(start.call_sid, start.params)
            except Refused as exc:
                self.state.metrics.twilio_refused.labels(exc.kind).inc()
                raise Hangup(status.WS_1008_POLICY_VIOLATION, f"stream credential: {exc}") from None
        self.stream_sid, self.call_sid = start.stream_sid, start.call_sid
        self._sender.stream_sid = start.stream_sid
        self.voice = VoiceCall(self.state, self)
        self._calls.open[start.stream_sid] = self
        await self._set_up(start.params)
        self._deadline = asyncio.get_running_loop().time() + self.state.config.stt_idle_timeout_s
        log.info("twilio stream %s (call %s) started", start.stream_sid, self.call_sid)

    async def _set_up(self, params: dict[str, str]) -> None:
        """The session the call starts with: the input rate, then the custom parameters'."""
        assert self.voice is not None
        for session in session_updates(params):
            errors = self._errors
            await self.voice.receive(json.dumps({"type": "session.update", "session": {"type": "realtime", **session}}))
            if self._errors > errors:
                raise Hangup(status.WS_1008_POLICY_VIOLATION, f"customParameters: {self._last_error}")

    async def _media(self, message: dict[str, Any]) -> None:
        if self.voice is None:
            raise Hangup(status.WS_1008_POLICY_VIOLATION, "media before start")
        if (ulaw := read_media(message)) is None:
            return  # not the caller's audio
        self._deadline = asyncio.get_running_loop().time() + self.state.config.stt_idle_timeout_s
        await self.voice.audio(ulaw_decode(ulaw), PHONE_RATE)

    async def _mark(self, message: dict[str, Any]) -> None:
        self._sender.echoed(read_mark(message))

    async def _dtmf(self, message: dict[str, Any]) -> None:
        pass  # a key pressed: the agent listens to speech only

    async def _stop(self, message: dict[str, Any]) -> None:
        raise Hangup(status.WS_1000_NORMAL_CLOSURE, "stop", fault=False)

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

    async def _end(self, writer: asyncio.Task[None], end: Hangup | None) -> None:
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
        if end.code in _BAD_INPUT and self._socket.stall is None:  # a stall is counted as one
            self.state.metrics.errors.labels("invalid_request").inc()
        # A client that reads nothing could hold the close for ever.
        await self._socket.close(end.code, end.reason, within=_LAST_SEND_S)


_ACTS: dict[str, Callable[[TwilioCall, dict[str, Any]], Awaitable[None]]] = {
    "connected": TwilioCall._connected, "start": TwilioCall._start, "media": TwilioCall._media,
    "mark": TwilioCall._mark, "dtmf": TwilioCall._dtmf, "stop": TwilioCall._stop,
}
