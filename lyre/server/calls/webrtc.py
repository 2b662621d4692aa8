"""``/v1/realtime/calls``: the voice agent over WebRTC, as OpenAI's Realtime API offers it (on aiortc).

    POST   /v1/realtime/calls               an SDP offer: ``application/sdp``, or multipart with ``sdp`` and
                                            an optional ``session`` (the object of a ``session.update``)
                                            -> 201, the SDP answer, ``Location: /v1/realtime/calls/{id}``
    DELETE /v1/realtime/calls/{id}          hang up (``POST .../{id}/hangup`` too, as OpenAI's SDK does)

The API key rules are the WebSocket's. Audio goes both ways as Opus on the peer connection: the caller's
is resampled to what the agent listens at, the assistant's is paced out at real time in 20 ms frames
(Opus encoding and decoding run in aiortc's worker threads, off the event loop). Every other Realtime
event travels, both ways, as JSON on the data channel the caller opens, named ``oai-events``; audio
deltas do not (the audio is on the track), and as at OpenAI the call adds ``output_audio_buffer.started``,
``.stopped`` and ``.cleared``. Barge-in needs no client help: the server cuts the reply's audio at once
and the reply's history keeps what the track had sent of it (``conversation.item.truncated`` says where).

A call holds a realtime session (``--stt-max-sessions`` counts calls and sockets together). An offer the
call cannot take (aiortc's refusal included: no audio codec in common) is a 400 naming why, and the call
is gone before the answer goes. When the caller's audio stops for 0.6 s (a network gone for a moment, or
a peer gone for good: UDP tells them apart only by time) its reply stops, freeing its engine slots, and
the call waits; audio again and it goes on. It hangs up, freeing everything, when the caller asks, when
the connection fails or closes, when its audio has stopped for 5 s (or never came within 5 s of
connecting), when it does not connect within 20 s (lyre.server.calls.webrtc_watch), and when the server shuts
down. ICE uses host candidates, plus the STUN and TURN servers of ``--ice-server``.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

from fastapi import APIRouter, FastAPI, Request, Response

from lyre.server.body_limit import ServerLimitRoute
from lyre.server.errors import error_doc, error_response
from lyre.server.sessions import RealtimeSessions
from lyre.server.state import AGENT_OFF, STT_OFF, ServerState
from lyre.server.calls.webrtc_offer import Unsupported, read_offer

if TYPE_CHECKING:
    from lyre.server.calls.webrtc_call import Call

__all__ = ["CALLS_PATH", "Calls", "router"]

CALLS_PATH = "/v1/realtime/calls"

log = logging.getLogger("lyre.webrtc")

router = APIRouter(route_class=ServerLimitRoute)  # the body refused before more than the limit is read


class Calls:
    """The app's open calls, by id."""

    def __init__(self) -> None:
        self.open: dict[str, Call] = {}

    @classmethod
    def of(cls, app: FastAPI) -> Calls:
        if (calls := getattr(app.state, "realtime_calls", None)) is None:
            calls = app.state.realtime_calls = cls()
        return calls

    def forget(self, call: Call) -> None:
        self.open.pop(call.id, None)

    async def close_all(self, reason: str) -> None:
        calls = list(self.open.values())
        for call in calls:
            call.hang_up(reason)
        await asyncio.gather(*(call.closed() for call in calls))


@router.post(CALLS_PATH, status_code=201, response_class=Response, responses={
    201: {"description": "The SDP answer; ``Location`` names the call", "content": {"application/sdp": {}}},
    400: error_doc("A malformed SDP offer, an offer without audio or with no audio codec in common, or a bad "
                   "session object"),
    404: error_doc("This server cannot hold a conversation"),
    415: error_doc("The body is neither application/sdp nor multipart/form-data"),
    429: error_doc("Too many realtime sessions and calls open"),
    503: error_doc("The server is shutting down")})
async def create_call(request: Request) -> Response:
    """Start a voice-agent call over WebRTC: the caller's SDP offer in, the answer out."""
    state: ServerState = request.app.state.lyre
    off = STT_OFF if state.stt is None else None if state.converses else AGENT_OFF
    if off is not None:
        return error_response(404, off, "invalid_request_error")
    if state.draining:
        return error_response(503, "server is shutting down; call another server", "server_error")
    try:
        offer, session = await read_offer(request)
    except Unsupported as exc:
        return error_response(415, str(exc), "invalid_request_error")
    except ValueError as exc:
        return error_response(400, str(exc), "invalid_request_error", str(exc).partition(":")[0])
    sessions, limit = RealtimeSessions.of(request.app), state.config.stt_max_sessions
    client = request.client.host if request.client else None
    if (refused := sessions.refusal(limit, client)) is not None:
        state.metrics.errors.labels("overloaded").inc()
        return error_response(429, refused, "server_error", headers={"Retry-After": "5"})
    from lyre.server.calls.webrtc_call import Call  # aiortc and PyAV load with the first call, not with the server

    calls = Calls.of(request.app)
    call = Call(state, session.get("model") if session else None, calls.forget)
    call.hold(sessions, client)
    calls.open[call.id] = call
    # Whatever stops the answer (the offer's fault, the server's, or the request cancelled), the call is
    # hung up and everything it holds freed before the reply goes: nothing of it outlives the request.
    try:
        answer = await call.answer(offer, session)
    except ValueError as exc:
        call.hang_up(f"refused: {exc}")
        await call.closed()
        return error_response(400, str(exc), "invalid_request_error", str(exc).partition(":")[0])
    except Exception as exc:
        log.exception("call %s: answering the offer failed", call.id)
        call.hang_up(f"internal error: {exc!r}")
        await call.closed()
        return error_response(500, f"the offer could not be answered ({type(exc).__name__}); this is the "
                              "server's fault, not the offer's", "server_error")
    except asyncio.CancelledError:
        call.hang_up("the request was cancelled before the answer")
        raise
    return Response(answer, status_code=201, media_type="application/sdp",
                    headers={"Location": f"{CALLS_PATH}/{call.id}"})


@router.delete(f"{CALLS_PATH}/{{call_id}}", status_code=204, response_class=Response,
               responses={404: error_doc("No such call (it was never made, or has ended)")})
async def delete_call(call_id: str, request: Request) -> Response:
    """Hang up a call."""
    return await _hang_up(call_id, request, 204)


@router.post(f"{CALLS_PATH}/{{call_id}}/hangup", response_class=Response,
             responses={404: error_doc("No such call (it was never made, or has ended)")})
async def hang_up_call(call_id: str, request: Request) -> Response:
    """Hang up a call (as OpenAI's ``realtime.calls.hangup``)."""
    return await _hang_up(call_id, request, 200)


async def _hang_up(call_id: str, request: Request, status: int) -> Response:
    call = Calls.of(request.app).open.get(call_id)
    if call is None:
        return error_response(404, f"no call {call_id!r}: it was never made, or has ended", "invalid_request_error",
                              "call_id")
    call.hang_up("hung up by the caller")
    await call.closed()
    return Response(status_code=status)
