"""WebSockets through the router: one server per socket for the socket's whole life.

The server is chosen at the handshake when the identity is known there (the
``x-lyre-session`` header, or a ``session`` or ``voice`` query parameter), and
the handshake's response names it in ``x-lyre-server``. A streaming-TTS socket
that names neither is routed by the voice of its first message: the router
accepts it, reads that message (which must come within
``first_message_timeout_s``, else the socket is closed with 1008), then
connects (its handshake cannot name the server, which is not chosen yet).

A realtime socket is a conversation unless it asks for transcription
(``?intent=transcription``), and goes only to a server that can hold one.

A server that cannot be reached, or refuses the handshake with 503 (draining)
or 429 (at capacity), is tried once more on the next server; when no other
takes the socket, the client gets a server's refusal with its ``Retry-After``. A
server that dies while the socket is open gets every context still open an
``error`` message naming the server, then a close with 1011; the client opens
a new socket, which goes elsewhere.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
from typing import Any

from fastapi import Response, WebSocket
from starlette.websockets import WebSocketDisconnect
from websockets.asyncio.client import ClientConnection, connect
from websockets.client import ClientProtocol
from websockets.http11 import Request, Response as HandshakeResponse
from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidStatus

from lyre.common.api_keys import authorized
from lyre.fleet.router.headers import request_headers
from lyre.fleet.router.identity import SERVER_HEADER, Identity, IdentityError, identity_of, service_of, voice_in_message
from lyre.fleet.router.proxy_http import RETRY_REASONS, error_response
from lyre.fleet.router.state import RouterState
from lyre.fleet.router.twilio_gate import is_twilio, twilio_refusal

__all__ = ["relay_socket"]

log = logging.getLogger("lyre.fleet.router")

# The handshake's own: the router's connection to the server makes its own.
_HANDSHAKE = frozenset({"sec-websocket-key", "sec-websocket-version", "sec-websocket-extensions",
                        "sec-websocket-protocol"})
_MAX_MESSAGE = 16 * 2**20
_TRY_AGAIN_LATER = 1013
_SERVER_WENT_AWAY = 1011
_POLICY = 1008
# Why no server took a socket, by the service it needed.
_NONE_SERVES = {"agent": "no server in the fleet can hold a conversation now (text to speech, speech to text and "
                         "a think step); for live transcription connect with ?intent=transcription"}


async def relay_socket(ws: WebSocket) -> None:
    state: RouterState = ws.app.state.router
    path = ws.url.path
    if is_twilio(path):
        if (why := twilio_refusal(state.config, ws)) is not None:
            state.metrics.failures.labels("unauthorized").inc()
            await ws.send_denial_response(error_response(403, why, "authentication_error"))
            return
    elif not authorized(state.config.api_key, ws.headers, ws.query_params):
        await ws.send_denial_response(error_response(403, "missing or wrong API key (send Authorization: Bearer "
                                                          "KEY, X-API-Key: KEY or ?api_key=KEY)",
                                                     "authentication_error"))
        return
    try:
        identity = identity_of(ws.headers, ws.query_params)
    except IdentityError as exc:
        await ws.send_denial_response(error_response(400, str(exc), "invalid_request_error"))
        return
    if (full := state.full()) is not None:
        state.metrics.failures.labels("inflight_limit").inc()
        await ws.send_denial_response(error_response(503, full, headers={"Retry-After": "1"}))
        return
    client = ws.client.host if ws.client else None
    if (over := state.over_share(client)) is not None:
        state.metrics.failures.labels("client_share").inc()
        await ws.send_denial_response(error_response(429, over, "rate_limit_error", headers={"Retry-After": "1"}))
        return
    first: str | bytes | None = None
    if identity.kind == "any" and service_of(path, ws.query_params) == "tts":
        await ws.accept()
        first = await _first_message(ws, state.config.first_message_timeout_s)
        if first is None:
            return
        identity = _identity_from_first(first, identity)
    upstream = await _connect(ws, state, identity, first is not None)
    if upstream is None:
        return
    url, conn = upstream
    lease = state.lease(url, client)
    try:
        if first is None:
            await ws.accept(subprotocol=conn.subprotocol, headers=[(SERVER_HEADER.encode(), url.encode())])
        else:
            await conn.send(first)
        await _Relay(ws, conn, url, path, state).run(first)
    finally:
        await conn.close()
        lease.release()


async def _first_message(ws: WebSocket, timeout_s: float) -> str | bytes | None:
    """The first message of an accepted socket; None (the socket closed) when it leaves or is too slow to send one:
    until it comes, the socket holds a connection and names no server to count it against."""
    try:
        async with asyncio.timeout(timeout_s):
            message = await ws.receive()
    except TimeoutError:
        await _close(ws, _POLICY, f"no message in {timeout_s:g} s: name the voice in the first message, or "
                                  "connect with ?voice= or ?session=")
        return None
    if message["type"] == "websocket.disconnect":
        return None
    return message.get("text") if message.get("text") is not None else message.get("bytes")


def _identity_from_first(first: str | bytes | None, fallback: Identity) -> Identity:
    try:
        voice = voice_in_message(json.loads(first)) if isinstance(first, str) else None
    except ValueError:
        voice = None  # the server will say what is wrong with it
    return Identity(f"voice:{voice}", voice) if voice else fallback


async def _connect(ws: WebSocket, state: RouterState, identity: Identity,
                   accepted: bool) -> tuple[str, ClientConnection] | None:
    """The upstream socket (the first server, else the next one); on failure the client is told and None returned."""
    path = ws.url.path
    target = path + (f"?{ws.url.query}" if ws.url.query else "")
    # The handshake's Host goes as the client sent it, not as the websockets client would write it (below).
    headers = request_headers(ws.headers, ws.client.host if ws.client else None, drop=_HANDSHAKE | {"host"},
                              scheme="https" if ws.url.scheme == "wss" else "http")
    asked = functools.partial(_AsAsked, host=ws.headers.get("host"))
    service = service_of(path, ws.query_params)
    offered = [p.strip() for p in ws.headers.get("sec-websocket-protocol", "").split(",") if p.strip()]
    failed: list[str] = []
    refused: tuple[str, HandshakeResponse] | None = None  # (server, its refusal): passed on if no other takes it
    call = ws.query_params.get("call_id")  # a backend attaching to a call: the server holding it, and no other
    for attempt in range(2):
        if call is not None:
            if attempt > 0 or (url := state.holder(call)) is None:
                break
        else:
            if (route := state.choose(identity, service, path, exclude=failed)) is None:
                break
            url = route.server
        try:
            conn = await connect("ws" + url.removeprefix("http") + target, additional_headers=headers,
                                 subprotocols=offered or None, open_timeout=state.config.connect_timeout_s,
                                 max_size=_MAX_MESSAGE, compression=None, ping_interval=None,  # type: ignore[arg-type]
                                 create_connection=asked)
            return url, conn
        except InvalidStatus as exc:  # refused: no key, service off, or busy (the next server may take it)
            refused = url, exc.response
            if attempt > 0 or exc.response.status_code not in RETRY_REASONS:
                break
            failed.append(url)
            state.metrics.retries.labels(RETRY_REASONS[exc.response.status_code]).inc()
        except (OSError, TimeoutError, InvalidHandshake) as exc:
            log.warning("WebSocket %s: server %s unreachable (%r)", path, url, exc)
            failed.append(url)
            state.metrics.retries.labels("unreachable").inc()
    if refused is not None:  # the client hears the server's own reason
        await _refuse(ws, accepted, *refused)
        return None
    state.metrics.failures.labels("no_answer" if failed else "no_server").inc()
    reason = (f"no server answered: tried {', '.join(failed)}" if failed
              else f"no server in the fleet holds call {call!r}" if call is not None
              else _NONE_SERVES.get(service or "", f"no server in the fleet serves {service} now"))
    if accepted:
        await ws.close(_TRY_AGAIN_LATER, reason[:120])  # a close reason is at most 123 bytes
    else:
        await ws.send_denial_response(error_response(502 if failed else 404 if call is not None else 503, reason))
    return None


async def _refuse(ws: WebSocket, accepted: bool, url: str, refused: HandshakeResponse) -> None:
    """A server's refused handshake passed on as that answer, or, on a socket already accepted (routed by its first
    message), as a close: 1013 when the server was busy, else 1008."""
    if accepted:
        code = _TRY_AGAIN_LATER if refused.status_code in RETRY_REASONS else _POLICY
        await ws.close(code, f"server refused the socket ({refused.status_code})")
        return
    headers = {"content-type": refused.headers.get("content-type", "application/json"), SERVER_HEADER: url}
    if (retry_after := refused.headers.get("retry-after")) is not None:
        headers["retry-after"] = retry_after
    await ws.send_denial_response(Response(bytes(refused.body or b""), refused.status_code, headers=headers))


class _AsAsked(ClientConnection):
    """An upstream socket whose handshake carries the Host the client asked the router for, as the router's
    HTTP requests do (lyre.fleet.router.headers): websockets writes the server's own, and a second Host header
    would be refused."""

    def __init__(self, protocol: ClientProtocol, *, host: str | None, **kwargs: Any) -> None:
        super().__init__(protocol, **kwargs)
        if host:
            opening = protocol.connect

            def as_asked() -> Request:
                request = opening()
                del request.headers["Host"]
                request.headers["Host"] = host
                return request

            protocol.connect = as_asked  # type: ignore[method-assign]


class _Relay:
    """Messages both ways until one side closes; the contexts still open, for a clear error if the server dies."""

    def __init__(self, ws: WebSocket, conn: ClientConnection, url: str, path: str, state: RouterState) -> None:
        self.ws, self.conn, self.url, self.state = ws, conn, url, state
        self.tts = service_of(path, ws.query_params) == "tts"
        self.open: set[str] = set()  # context ids the client started and the server has not ended
        self.server_gone = False  # a send to the server found its connection closed

    async def run(self, first: str | bytes | None) -> None:
        if first is not None:
            self._client_said(first)
        up = asyncio.create_task(self._client_to_server())
        down = asyncio.create_task(self._server_to_client())
        done, pending = await asyncio.wait((up, down), return_when=asyncio.FIRST_COMPLETED)
        if self.server_gone and down in pending:  # let the reading side tell the client why
            done, pending = await asyncio.wait(pending, timeout=self.state.config.connect_timeout_s)
            done = done | {up}
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
        for task in done:
            task.result()

    async def _client_to_server(self) -> None:
        while True:
            message = await self.ws.receive()
            if message["type"] == "websocket.disconnect":
                await self.conn.close(message.get("code", 1000))
                return
            data = message.get("text") if message.get("text") is not None else message.get("bytes")
            self._client_said(data)
            try:
                await self.conn.send(data)
            except ConnectionClosed:
                self.server_gone = True
                return

    async def _server_to_client(self) -> None:
        try:
            async for data in self.conn:
                self._server_said(data)
                if isinstance(data, str):
                    await self.ws.send_text(data)
                else:
                    await self.ws.send_bytes(data)
        except ConnectionClosed as exc:
            if exc.rcvd is None:  # no close frame: the server died or the connection broke
                await self._server_died()
                return
        except WebSocketDisconnect:
            return
        code = self.conn.close_code or 1000
        await _close(self.ws, code, self.conn.close_reason or "")

    async def _server_died(self) -> None:
        self.state.metrics.failures.labels("mid_stream").inc()
        log.warning("server %s went away with a WebSocket open (%d contexts)", self.url, len(self.open))
        message = f"server {self.url} went away; open a new socket (it will go elsewhere)"
        try:
            for context in sorted(self.open):
                await self.ws.send_text(json.dumps({"type": "error", "context_id": context, "error": message,
                                                    "done": True}))
            if not self.tts:
                await self.ws.send_text(json.dumps({"type": "error", "error": {"type": "server_error",
                                                                               "message": message}}))
        except (WebSocketDisconnect, RuntimeError):
            return
        await _close(self.ws, _SERVER_WENT_AWAY, f"server {self.url} went away"[:120])

    def _client_said(self, data: str | bytes) -> None:
        if self.tts and (message := _json(data)) is not None:
            context = message.get("context_id")
            if isinstance(context, str):
                if message.get("cancel") is True:
                    self.open.discard(context)
                else:
                    self.open.add(context)

    def _server_said(self, data: str | bytes) -> None:
        if self.tts and self.open and (message := _json(data)) is not None:
            if message.get("done") is True or message.get("type") in ("done", "error"):
                self.open.discard(message.get("context_id"))  # type: ignore[arg-type]


def _json(data: str | bytes) -> dict[str, Any] | None:
    if not isinstance(data, str):
        return None
    try:
        message = json.loads(data)
    except ValueError:
        return None
    return message if isinstance(message, dict) else None


async def _close(ws: WebSocket, code: int, reason: str) -> None:
    try:
        await ws.close(code, reason)
    except (RuntimeError, WebSocketDisconnect):
        pass  # already closed, or the client has gone
