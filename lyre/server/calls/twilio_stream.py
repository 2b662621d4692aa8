"""Phone calls through Twilio: the voice agent on a Twilio Media Stream.

    POST https://HOST/v1/twilio/voice[?voice=NAME&instructions=TEXT&session=JSON]   TwiML that connects
                                                            the call to a Media Stream (Twilio's protocol):
    wss://HOST/v1/twilio/media-stream/CREDENTIAL            with --twilio-auth-token
    wss://HOST/v1/twilio/media-stream                       without

Set ``https://HOST/v1/twilio/voice`` as a Twilio number's voice webhook ("a call comes in"). Twilio
fetches the TwiML, ``<Connect><Stream>``, then opens the stream: a bidirectional one, the caller's audio
in and the agent's back (lyre.server.calls.twilio_call). The stream's URL is built from the request's Host
and scheme (``X-Forwarded-Proto`` when a proxy sets it); ``voice``, ``instructions`` and ``session`` in
the webhook's query travel as the stream's ``<Parameter>``s, as Twilio allows no query string on a
stream URL.

Who may call: with ``--twilio-auth-token`` both endpoints check Twilio's request signature
(lyre.common.twilio_signature) instead of the API key, which Twilio has no way to send on a stream, and
a stream is admitted only with the credential the webhook put in its URL (lyre.server.calls.twilio_credential):
issued for that call, once, for a minute, with those parameters; a stream refused for it is accepted and
closed with 1008 and a reason naming why, and counted (``lyre_twilio_streams_refused_total``). Without a
token both endpoints are guarded like any other, by the API key when the server has one (a webhook URL
can carry ``?api_key=``, but no stream URL can: a server with an API key takes phone calls only with the
Twilio token set), and the stream takes its parameters as they come.

A stream counts against ``stt_max_sessions`` with the realtime sockets, and is refused (after the
handshake, with 1013) past it; a draining server refuses it with 1001; a server that cannot converse
(no speech to text, text to speech or think step) refuses the handshake with a 404.
"""

from __future__ import annotations

import json
import logging
import time
import unicodedata
import xml.etree.ElementTree as ET

from fastapi import APIRouter, Request, Response, WebSocket, WebSocketDisconnect, status
from starlette.websockets import WebSocketDisconnected

from lyre.server.auth import refuse_socket
from lyre.server.body_limit import ServerLimitRoute
from lyre.server.config import ServerConfig
from lyre.server.errors import error_doc, error_response
from lyre.server.sessions import RealtimeSessions
from lyre.server.state import ServerState
from lyre.server.calls.twilio_call import TwilioCall, TwilioCalls
from lyre.server.calls.twilio_credential import GRANTED, Credential, Refused, StreamCredentials, issue
from lyre.common.twilio_signature import SIGNATURE_HEADER, requested_url, signed

__all__ = ["STREAM_PATH", "VOICE_PATH", "connect_twiml", "open_paths", "router"]

log = logging.getLogger("lyre.server.twilio")

VOICE_PATH = "/v1/twilio/voice"
STREAM_PATH = "/v1/twilio/media-stream"
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
    400: error_doc("A query parameter too long for a stream parameter, a session that is not a JSON object, "
                   "or (with --twilio-auth-token) a form without CallSid"),
    403: error_doc("Missing or wrong X-Twilio-Signature (with --twilio-auth-token)"),
    404: error_doc("This server cannot hold a conversation"),
    413: error_doc("Request body over the server's limit")})
async def twilio_voice(request: Request, voice: str | None = None, instructions: str | None = None,
                       session: str | None = None) -> Response:
    """Twilio's voice webhook: TwiML that connects the call to the agent over a Media Stream, speaking in
    ``voice``, following ``instructions`` and set up by ``session`` (a session.update's session, as
    JSON) when given."""
    state: ServerState = request.app.state.lyre
    token = state.config.twilio_auth_token
    form: list[tuple[str, str]] = []
    if token is not None:
        form = [(name, value) for name, value in (await request.form()).multi_items() if isinstance(value, str)]
        if not signed(token, request.headers.get(SIGNATURE_HEADER, ""), requested_url(request), form):
            state.metrics.errors.labels("unauthorized").inc()
            log.warning("twilio webhook refused: %s", "no signature" if SIGNATURE_HEADER not in request.headers
                        else "wrong signature")
            return error_response(403, _UNSIGNED, "authentication_error")
    if not state.converses:
        return error_response(404, _CANNOT_CALL, "invalid_request_error")
    given = dict(zip(GRANTED, (voice, instructions, session)))
    parameters = {name: _parameter(name, value) for name, value in given.items() if value}
    if "session" in parameters and not isinstance(_json(parameters["session"]), dict):
        return error_response(400, "session must be a JSON object (the session of a session.update)",
                              "invalid_request_error", "session")
    url = _stream_url(request)
    if token is not None:
        if not (call_sid := dict(form).get("CallSid")):
            return error_response(400, "the webhook's form has no CallSid (Twilio sends one with every call)",
                                  "invalid_request_error", "CallSid")
        url += "/" + issue(token, call_sid, parameters, time.time())
    return Response(connect_twiml(url, parameters), media_type="application/xml")


def _json(text: str) -> object:
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return None


@router.websocket(STREAM_PATH)
async def twilio_media_stream(websocket: WebSocket) -> None:
    """A Twilio Media Stream (bidirectional) holding a conversation with the voice agent: on a server
    without ``--twilio-auth-token`` (with one, streams come with a credential in their URL)."""
    await _stream(websocket, None)


@router.websocket(STREAM_PATH + "/{credential}")
async def twilio_media_stream_with_credential(websocket: WebSocket, credential: str) -> None:
    """A Twilio Media Stream admitted by the credential the voice webhook put in its URL."""
    await _stream(websocket, credential)


async def _stream(websocket: WebSocket, path: str | None) -> None:
    state: ServerState = websocket.app.state.lyre
    if await _refused(websocket, state, path):
        return
    credential: Credential | None = None
    if (token := state.config.twilio_auth_token) is not None:
        try:
            if path is None:
                raise Refused("missing", "no stream credential in the URL; streams are admitted only from the "
                                         "TwiML this server's voice webhook answers")
            credential = StreamCredentials.of(websocket.app).admit(token, path, time.time())
        except Refused as exc:
            state.metrics.twilio_refused.labels(exc.kind).inc()
            await websocket.accept()
            await _close(websocket, status.WS_1008_POLICY_VIOLATION, f"stream credential: {exc}")
            return
    await websocket.accept()
    sessions = RealtimeSessions.of(websocket.app)
    limit = state.config.stt_max_sessions
    if state.draining:
        await _close(websocket, status.WS_1001_GOING_AWAY, "server is shutting down; call another server")
    elif (refused := sessions.refusal(limit, client := websocket.client.host if websocket.client else None)):
        state.metrics.errors.labels("overloaded").inc()
        await _close(websocket, status.WS_1013_TRY_AGAIN_LATER, refused)
    else:
        with sessions.hold(client):
            await TwilioCall(websocket, state, TwilioCalls.of(websocket.app), credential).serve()


async def _refused(websocket: WebSocket, state: ServerState, path: str | None) -> bool:
    """Refuse the handshake, and return True, without Twilio's signature (with a token; else without the API
    key, as any socket), or when this server cannot converse, or issues no credential for ``path``."""
    off = None if state.converses else _CANNOT_CALL
    if (token := state.config.twilio_auth_token) is None:
        if off is None and path is not None:
            off = (f"no stream at {STREAM_PATH}/...: this server issues no stream credentials (it has no "
                   f"--twilio-auth-token); its streams are at {STREAM_PATH}")
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
        await websocket.close(code, reason[:120])  # a close reason is at most 123 bytes
    except (WebSocketDisconnect, WebSocketDisconnected, RuntimeError):
        pass  # the client left first
