"""``/v1/realtime``: live transcription, or a voice agent, over a WebSocket, in OpenAI's realtime events.

    ws://HOST/v1/realtime?intent=transcription    (the API key as for the TTS socket, when one is set)
    ws://HOST/v1/realtime?model=NAME              a conversation (lyre.agent), where the server has
                                                  speech to text, text to speech and a think step
    ws://HOST/v1/realtime?call_id=rtc_...         a backend attached to a WebRTC call's conversation
                                                  (a sideband, as OpenAI's): the call's events, and its
                                                  client events (session.update, tool outputs, ...)

A thin adapter: JSON text frames go to a ``RealtimeSession`` (lyre.stt.realtime,
where the protocol lives) or an ``AgentSession`` (lyre.agent), and its events
come back through one writer task, in order. As at OpenAI, the socket is a
conversation unless its URL says ``intent=transcription``; a server that
cannot hold one (no text to speech, or no think step) refuses the handshake
with a 404 that says so, rather than open a transcription session the client
did not ask for. Beyond the session's own limits, the socket has these:

- at most ``stt_max_sessions`` sockets at once: one more is accepted, told why
  in an ``error`` event, and closed with 1013 (try again later);
- a transcription session with no client event and no transcription running
  for ``stt_idle_timeout_s`` is closed (an ``error`` event, then 1000); a
  conversation stays open while its client is there, however quiet (a person
  may read a reply and think before typing). Either kind lasts at most
  ``realtime_max_session_s``, then it is closed as OpenAI's are (a
  ``session_expired`` error, then 1000). A client that is gone without
  closing is found by the server's WebSocket pings (``ws_ping_s``) and its
  session freed;
- a server without speech to text answers with an ``error`` event and closes
  with 1011;
- a client that sends faster than it reads is read no further until it has
  read what it was sent; one that leaves its events unread for 5 s is closed
  with 1008, so they cannot pile up in memory;
- a client that takes nothing it is sent for ``write_timeout_s`` (a send waits
  that long) is cut: its session freed, the socket closed with 1008, the stall
  counted (lyre.server.watched_socket).

When the socket closes, the session's passes are cancelled (queued ones are
dropped from the transcriber's queue).
"""

from __future__ import annotations

import asyncio
import json
from typing import Any, Protocol

from fastapi import APIRouter, WebSocket, WebSocketDisconnect, status
from starlette.websockets import WebSocketDisconnected

from lyre.agent import AgentSession
from lyre.server.auth import refuse_socket
from lyre.server.state import AGENT_OFF, STT_OFF, ServerState
from lyre.server.errors import error_response
from lyre.server.sessions import Attachable, RealtimeSessions, agent_config
from lyre.server.watched_socket import STALLED, Gone, Stalled, WatchedSocket
from lyre.stt import RealtimeConfig, RealtimeError, RealtimeSession, error_event

__all__ = ["REALTIME_PATH", "router"]

REALTIME_PATH = "/v1/realtime"
_API = "realtime"  # the metrics label
_MAX_UNSENT = 256  # events queued for the client: past this the socket stops reading until they are sent
_LAST_SEND_S = 5.0  # how long a client may leave them unread; also for the last events and the close frame

router = APIRouter()


class _Session(Protocol):
    """What the socket needs of either session."""

    @property
    def busy(self) -> bool: ...

    async def receive(self, text: str) -> None: ...

    def report(self, error: RealtimeError, client_event_id: str | None = None) -> None: ...

    async def close(self) -> None: ...


async def _refuse(websocket: WebSocket, error: RealtimeError, code: int) -> None:
    """An accepted socket told why in an error event, then closed with ``code``."""
    try:
        await websocket.send_text(json.dumps(error_event(error)))
        await websocket.close(code=code, reason=str(error)[:120])  # a close reason is at most 123 bytes
    except (WebSocketDisconnect, WebSocketDisconnected, RuntimeError):
        pass  # the client left first


async def _write(socket: WatchedSocket, outbox: asyncio.Queue[dict[str, Any] | None]) -> None:
    """Send the session's events in order until the None that ends them; once the client has left, or been cut
    for taking nothing, drop them."""
    gone = False
    while True:
        event = await outbox.get()
        try:
            if event is None:
                return
            if not gone:
                await socket.send_text(json.dumps(event))
        except Gone:
            gone = True
        finally:
            outbox.task_done()


def _wants_transcription(websocket: WebSocket) -> bool:
    return websocket.query_params.get("intent") == "transcription"


def _speaks_beta(websocket: WebSocket) -> bool:
    """The client speaks the beta protocol: OpenAI's beta clients say so in a header, GA clients do not."""
    return websocket.headers.get("openai-beta", "").replace(" ", "").startswith("realtime=")


def _open_session(websocket: WebSocket, state: ServerState, emit: Any) -> tuple[str, _Session]:
    """The session the handshake asks for: a transcription session, or else a conversation, opened in the
    shape the client speaks."""
    config, stt = state.config, state.stt
    assert stt is not None
    realtime = RealtimeConfig(max_buffer_s=config.stt_max_buffer_s)
    beta = _speaks_beta(websocket)
    if _wants_transcription(websocket):
        session: Any = RealtimeSession(stt, emit, realtime, shape="beta" if beta else "ga")
    else:
        assert state.tts is not None and state.thinker is not None  # the handshake was refused otherwise
        agent = agent_config(state, websocket.query_params.get("model"))
        # A reply holds a stream slot like any speech stream, but is not refused when the streams already
        # running fall behind: a turn left unanswered is worse than a late one. It queues instead.
        session = AgentSession(stt, state.tts, state.thinker, emit, agent, state.end_of_turn,
                               admit=state.admission.slot, aligner=state.aligner, beta=beta)
    return session.id, session


async def _serve(websocket: WebSocket, state: ServerState) -> None:
    config = state.config
    outbox: asyncio.Queue[dict[str, Any] | None] = asyncio.Queue()

    def emit(event: dict[str, Any]) -> None:
        state.metrics.count_refusals(event)
        outbox.put_nowait(event)

    session_id, session = _open_session(websocket, state, emit)
    socket = WatchedSocket.of(websocket, state, _API)
    writer = asyncio.create_task(_write(socket, outbox), name=f"lyre-realtime-{session_id}")
    close: tuple[int, str] | None = None  # None: the client closed, or left
    loop = asyncio.get_running_loop()
    expires = loop.time() + config.realtime_max_session_s
    conversing = not _wants_transcription(websocket)
    try:
        while True:
            left = expires - loop.time()
            wait = left if conversing else min(left, config.stt_idle_timeout_s)
            try:
                async with asyncio.timeout(max(wait, 0.0)):
                    message = await socket.receive()
            except Stalled as stall:
                close = (STALLED, str(stall))
                break
            except TimeoutError:
                if expires - loop.time() <= 0:
                    reason = f"the session reached its maximum duration of {config.realtime_max_session_s:g} s"
                    session.report(RealtimeError(reason, "session_expired"))
                    close = (status.WS_1000_NORMAL_CLOSURE, "session expired")
                    break
                if session.busy:  # the client is waiting for a transcript, not idle
                    continue
                reason = f"no event for {config.stt_idle_timeout_s:g} s: session closed"
                session.report(RealtimeError(reason, "idle_timeout"))
                close = (status.WS_1000_NORMAL_CLOSURE, "idle timeout")
                break
            if message["type"] == "websocket.disconnect":
                break
            if (text := message.get("text")) is None:
                session.report(RealtimeError("binary frames are not supported; send JSON text events",
                                             "invalid_event"))
            else:
                await session.receive(text)
            if outbox.qsize() >= _MAX_UNSENT and not await _drained(outbox):
                close = (status.WS_1008_POLICY_VIOLATION, f"over {_MAX_UNSENT} events unread: session closed")
                writer.cancel()  # the client reads nothing: what it has not read goes unsent
                break
    finally:
        await session.close()  # cancels its passes; emits nothing more
        outbox.put_nowait(None)
        await _settle(writer)
        if close is not None:  # a client that reads nothing could hold the close for ever
            await socket.close(*close, within=_LAST_SEND_S)


async def _drained(outbox: asyncio.Queue[dict[str, Any] | None]) -> bool:
    """Stop reading until the client has read what it was sent; False if it does not within the grace."""
    try:
        await asyncio.wait_for(outbox.join(), _LAST_SEND_S)
    except TimeoutError:
        return False
    return True


async def _settle(writer: asyncio.Task[None]) -> None:
    """Let the writer send the last events, for a while; then stop it."""
    done, _ = await asyncio.wait({writer}, timeout=_LAST_SEND_S)
    if not done:
        writer.cancel()
        await asyncio.wait({writer})


async def _attach(websocket: WebSocket, state: ServerState, call: Attachable) -> None:
    """A backend's socket on a call (a sideband): the call's events out, the backend's client events in,
    until either side ends; a backend that leaves its events unread, or takes nothing, is closed as any
    client is."""
    outbox: asyncio.Queue[dict[str, Any] | None] = asyncio.Queue()
    over = asyncio.get_running_loop().create_future()

    def listen(event: dict[str, Any] | None) -> None:
        if event is None and not over.done():
            over.set_result(None)
        elif event is not None:
            outbox.put_nowait(event)

    detach = call.attach(listen)
    socket = WatchedSocket.of(websocket, state, _API)
    writer = asyncio.create_task(_write(socket, outbox), name="lyre-realtime-sideband")
    close: tuple[int, str] | None = (status.WS_1000_NORMAL_CLOSURE, "the call ended")
    try:
        while not over.done():
            receiving = asyncio.ensure_future(socket.receive())
            await asyncio.wait({receiving, over}, return_when=asyncio.FIRST_COMPLETED)
            if not receiving.done():
                receiving.cancel()
                break
            try:
                message = receiving.result()
            except Stalled as stall:
                close = (STALLED, str(stall))
                break
            if message["type"] == "websocket.disconnect":
                close = None
                break
            if (text := message.get("text")) is not None:
                call.sideband(text)
            if outbox.qsize() >= _MAX_UNSENT and not await _drained(outbox):
                close = (status.WS_1008_POLICY_VIOLATION, f"over {_MAX_UNSENT} events unread: detached")
                writer.cancel()
                break
    finally:
        detach()
        outbox.put_nowait(None)
        await _settle(writer)
        if close is not None:
            await socket.close(*close, within=_LAST_SEND_S)


@router.websocket(REALTIME_PATH)
async def realtime_websocket(websocket: WebSocket) -> None:
    """Live transcription (``?intent=transcription``), a conversation, or a backend attached to a call
    (``?call_id=``), in OpenAI's realtime events."""
    state: ServerState = websocket.app.state.lyre
    if (call_id := websocket.query_params.get("call_id")) is not None:
        if await refuse_socket(websocket, state, None):
            return
        call = RealtimeSessions.of(websocket.app).calls.get(call_id)
        if call is None:
            await websocket.send_denial_response(error_response(
                404, f"no call {call_id!r} on this server: it was never made, or has ended", "invalid_request_error",
                "call_id"))
            return
        await websocket.accept()
        await _attach(websocket, state, call)
        return
    off = STT_OFF if state.stt is None else None
    if off is None and not _wants_transcription(websocket) and not state.converses:
        off = AGENT_OFF  # a conversation asked of a server that cannot hold one: not a transcription in its place
    if await refuse_socket(websocket, state, off):
        return
    await websocket.accept()
    sessions = RealtimeSessions.of(websocket.app)
    limit = state.config.stt_max_sessions
    if state.draining:
        await _refuse(websocket, RealtimeError("server is shutting down; connect to another server",
                                               "server_shutting_down", kind="server_error"),
                      status.WS_1001_GOING_AWAY)
    elif (refused := sessions.refusal(limit, client := websocket.client.host if websocket.client else None)):
        state.metrics.errors.labels("overloaded").inc()
        await _refuse(websocket, RealtimeError(refused, "session_limit", kind="server_error"),
                      status.WS_1013_TRY_AGAIN_LATER)
    else:
        with sessions.hold(client):
            await _serve(websocket, state)
