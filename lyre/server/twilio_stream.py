"""Phone calls through Twilio: the voice agent on a Twilio Media Stream.

    POST https://HOST/v1/twilio/voice[?voice=NAME&instructions=TEXT]   TwiML that connects the call to:
    wss://HOST/v1/twilio/media-stream                                  Twilio's Media Streams protocol

Set ``https://HOST/v1/twilio/voice`` as a Twilio number's voice webhook ("a call comes in"). Twilio
fetches the TwiML, ``<Connect><Stream>``, then opens the stream: a bidirectional one, the caller's audio
in and the agent's back (lyre.server.twilio_call). The stream's URL is built from the request's Host
and scheme (``X-Forwarded-Proto`` when a proxy sets it); ``voice`` and ``instructions`` in the webhook's
query travel as the stream's ``<Parameter>``s, as Twilio allows no query string on a stream URL.

Who may call: with ``--twilio-auth-token`` both endpoints check Twilio's request signature
(lyre.server.twilio_signature) instead of the API key, which Twilio has no way to send on a stream;
without a token they are guarded like any other endpoint, by the API key when the server has one (a
webhook URL can carry ``?api_key=``, but no stream URL can: a server with an API key takes phone
calls only with the Twilio token set).

A stream counts against ``stt_max_sessions`` with the realtime sockets, and is refused (after the
handshake, with 1013) past it; a draining server refuses it with 1001; a server that cannot converse
(no speech to text, text to speech or think step) refuses the handshake with a 404.
"""

from __future__ import annotations

import logging
import unicodedata
import xml.etree.ElementTree as ET

from fastapi import APIRouter, Request, Response, WebSocket, WebSocketDisconnect, status
from starlette.websockets import WebSocketDisconnected

from lyre.server.auth import refuse_socket
from lyre.server.body_limit import ServerLimitRoute
from lyre.server.config import ServerConfig
from lyre.server.errors import error_doc, error_response
from lyre.server.realtime_socket import RealtimeSessions
from lyre.server.state import ServerState
from lyre.server.twilio_call import TwilioCall, TwilioCalls
from lyre.server.twilio_signature import SIGNATURE_HEADER, requested_url, signed

__all__ = ["STREAM_PATH", "VOICE_PATH", "connect_twiml", "open_paths", "router"]

log = logging.getLogger("lyre.server.twilio")

VOICE_PATH = "/v1/twilio/voice"
STREAM_PATH = "/v1/twilio/media-stream"
_PARAMETERS = ("voice", "instructions")  # from the webhook's query to the stream's custom parameters
_MAX_PARAMETER = 500  # Twilio: a <Parameter>'s name and value together are shorter than this
_UNSIGNED = ("missing or wrong X-Twilio-Signature: this server takes calls only from the Twilio account whose "
             "auth token it was given (--twilio-auth-token)")
_CANNOT_CALL = ("this server cannot take phone calls: the voice agent needs speech to text (--stt), text to "
                "speech and a think step (--llm or --llm-url)")


router = APIRouter(route_class=ServerLimitRoute)  # the body refused before more than the limit is read


def open_paths(config: ServerConfig) -> frozenset[str]:
    """Paths the API key does not guard: Twilio's webhook, where its signature does instead."""
    return frozenset({VOICE_PATH}) if config.twilio_auth_token is not None else frozenset()


def connect_twiml(stream_url: str, parameters: dict[str, str]) -> str:
    """``<Response><Connect><Stream url=...>`` with a ``<Parameter>`` for each of ``parameters``."""
    response = ET.Element("Response")
    stream = ET.SubElement(ET.SubElement(response, "Connect"), "Stream", url=stream_url)
    for name, value in parameters.items():
        ET.SubElement(stream, "Parameter", name=name, value=value)
    return '<?xml version="1.0" encoding="UTF-8"?>' + ET.tostring(response, encoding="unicode")


def _stream_url(request: Request) -> str:
    """``wss://HOST/v1/twilio/media-stream`` where the webhook came over https (``ws://`` over http)."""
    forwarded = request.headers.get("x-forwarded-proto", "").split(",")[0].strip().lower()
    secure = forwarded in ("https", "wss") if forwarded else request.url.scheme == "https"
    root = request.scope.get("root_path", "")
    return f"{'wss' if secure else 'ws'}://{request.headers.get('host', request.url.netloc)}{root}{STREAM_PATH}"


def _parameter(name: str, value: str) -> str:
    """A query value fit to travel as a ``<Parameter>``; ValueError (a 400) saying why not."""
    if len(name) + len(value) >= _MAX_PARAMETER:
        raise ValueError(f"{name} is too long for a Twilio stream parameter: name and value together must be "
                         f"under {_MAX_PARAMETER} characters")
    if any(unicodedata.category(c) == "Cc" and c not in "\t\n\r" for c in value):
        raise ValueError(f"{name} holds a control character, which TwiML (XML) cannot carry")
    return value


@router.post(VOICE_PATH, response_class=Response, responses={
    200: {"description": "TwiML: connect the call to the media stream", "content": {"application/xml": {}}},
    403: error_doc("Missing or wrong X-Twilio-Signature (with --twilio-auth-token)"),
    404: error_doc("This server cannot hold a conversation"),
    413: error_doc("Request body over the server's limit")})
async def twilio_voice(request: Request, voice: str | None = None, instructions: str | None = None) -> Response:
    """Twilio's voice webhook: TwiML that connects the call to the agent over a Media Stream, speaking in
    ``voice`` and following ``instructions`` when given."""
    state: ServerState = request.app.state.lyre
    if (token := state.config.twilio_auth_token) is not None:
        form = await request.form()
        params = [(name, value) for name, value in form.multi_items() if isinstance(value, str)]
        if not signed(token, request.headers.get(SIGNATURE_HEADER, ""), requested_url(request), params):
            state.metrics.errors.labels("unauthorized").inc()
            log.warning("twilio webhook refused: %s", "no signature" if SIGNATURE_HEADER not in request.headers
                        else "wrong signature")
            return error_response(403, _UNSIGNED, "authentication_error")
    if not state.converses:
        return error_response(404, _CANNOT_CALL, "invalid_request_error")
    given = {"voice": voice, "instructions": instructions}
    parameters = {name: _parameter(name, value) for name, value in given.items() if value}
    return Response(connect_twiml(_stream_url(request), parameters), media_type="application/xml")


@router.websocket(STREAM_PATH)
async def twilio_media_stream(websocket: WebSocket) -> None:
    """A Twilio Media Stream (bidirectional) holding a conversation with the voice agent."""
    state: ServerState = websocket.app.state.lyre
    if await _refused(websocket, state):
        return
    await websocket.accept()
    sessions = RealtimeSessions.of(websocket.app)
    limit = state.config.stt_max_sessions
    if state.draining:
        await _close(websocket, status.WS_1001_GOING_AWAY, "server is shutting down; call another server")
    elif sessions.open >= limit:
        state.metrics.errors.labels("overloaded").inc()
        await _close(websocket, status.WS_1013_TRY_AGAIN_LATER,
                     f"too many realtime sessions and calls open (limit {limit}); try again later")
    else:
        with sessions.hold():
            await TwilioCall(websocket, state, TwilioCalls.of(websocket.app)).serve()


async def _refused(websocket: WebSocket, state: ServerState) -> bool:
    """Refuse the handshake, and return True, without Twilio's signature (with a token; else without the API
    key, as any socket), or when this server cannot converse."""
    off = None if state.converses else _CANNOT_CALL
    if (token := state.config.twilio_auth_token) is None:
        return await refuse_socket(websocket, state, off)
    if not signed(token, websocket.headers.get(SIGNATURE_HEADER, ""), requested_url(websocket)):
        state.metrics.errors.labels("unauthorized").inc()
        log.warning("twilio media stream refused: %s", "no signature" if SIGNATURE_HEADER not in websocket.headers
                    else "wrong signature")
        await websocket.send_denial_response(error_response(403, _UNSIGNED, "authentication_error"))
        return True
    if off is not None:
        await websocket.send_denial_response(error_response(404, off, "invalid_request_error"))
        return True
    return False


async def _close(websocket: WebSocket, code: int, reason: str) -> None:
    log.warning("twilio media stream refused (%d): %s", code, reason)
    try:
        await websocket.close(code, reason)
    except (WebSocketDisconnect, WebSocketDisconnected, RuntimeError):
        pass  # the client left first
