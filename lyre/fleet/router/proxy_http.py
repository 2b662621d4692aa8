"""HTTP requests through the router: routed by identity, sent over pooled connections, streamed back unbuffered.

The upstream client is aiohttp's: on loopback one round trip through it cost
0.8-0.9 ms against 2.1 ms through httpx's AsyncClient (measured side by side
against one ``lyre serve``), which alone was more than the router's budget.

A body is read before it goes on, up to ``max_body_bytes``, where the routing
key may be in it (a speech request's voice, when no session names the route:
a larger Content-Length is refused before any of it is read), or where its
Content-Length says it is that small anyway; it is kept so a retry can resend
it. Every other body (an audio upload, anything sent chunked) streams through
to the server as it arrives, and the server applies its own limits. The
response is never held: its bytes go to the client as the server writes them.

A request whose server cannot be reached, or answers 503 (draining, not
ready) or 429 (at capacity: its streams, queue or adapter slots are full, or
its measured rates cannot serve one more stream without gaps), is retried
once on the next server, while nothing has reached the client and no byte of
a streamed body has left. When no other server takes it, the client gets a
server's own refusal (the next one's, else the first's) with its
``Retry-After``, not a 502. Once the response has
started, a server that dies ends it: an SSE stream gets an ``error`` event
naming the server, any other body is cut short (the client's HTTP library
reports an incomplete body), and the next request goes elsewhere.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import AsyncIterator
from urllib.parse import parse_qsl

import aiohttp
from fastapi import Request, Response
from fastapi.responses import JSONResponse, StreamingResponse
from starlette.requests import ClientDisconnect
from starlette.types import Receive, Scope, Send

from lyre.fleet.router.headers import request_headers, response_headers
from lyre.fleet.router.identity import (SERVER_HEADER, IdentityError, call_of, identity_of, json_body, key_in_body,
                                  service_of)
from lyre.fleet.router.state import Lease, RouterState
from lyre.fleet.router.twilio_gate import TWILIO_VOICE, twilio_refusal

__all__ = ["RETRY_REASONS", "error_response", "forward"]

log = logging.getLogger("lyre.fleet.router")

# Draining or not ready (503), at capacity (429): the next server may take it.
RETRY_REASONS = {503: "unavailable", 429: "at_capacity"}
_SMALL = 64 * 1024  # a response with a length at most this is read whole and sent in one write; others stream
_CLIENT_LEFT = 499  # nginx's code for it: written nowhere, since nobody is there to read it


def error_response(status: int, message: str, kind: str = "server_error",
                   headers: dict[str, str] | None = None) -> JSONResponse:
    """An OpenAI-shaped error, as the servers answer theirs."""
    return JSONResponse({"error": {"message": message, "type": kind, "param": None, "code": None}}, status,
                        headers=headers)


async def forward(request: Request) -> Response:
    """Send ``request`` to the server its identity routes to; stream the answer back."""
    state: RouterState = request.app.state.router
    started = time.perf_counter()
    path = request.url.path
    try:
        identity = identity_of(request.headers, request.query_params)
    except IdentityError as exc:
        return error_response(400, str(exc), "invalid_request_error")
    if (full := state.full()) is not None:
        state.metrics.failures.labels("inflight_limit").inc()
        return error_response(503, full, headers={"Retry-After": "1"})
    client = request.client.host if request.client else None
    if (over := state.over_share(client)) is not None:
        state.metrics.failures.labels("client_share").inc()
        return error_response(429, over, "rate_limit_error", headers={"Retry-After": "1"})
    body: bytes | None = None  # None: the body streams through unread
    routed_by_body = identity.kind != "session" and key_in_body(path)
    twilio = path == TWILIO_VOICE  # read: its signature covers its form
    if routed_by_body or twilio or _small_body(request, state.config.max_body_bytes):
        read = await _read_body(request, state.config.max_body_bytes)
        if isinstance(read, Response):  # too large, or the client left while sending it
            if read.status_code == 413:
                state.metrics.failures.labels("body_too_large").inc()
            return read
        body = read
        if twilio and (why := twilio_refusal(state.config, request, _form(request, body))) is not None:
            state.metrics.failures.labels("unauthorized").inc()
            return error_response(403, why, "authentication_error")
        if routed_by_body:
            identity = identity_of(request.headers, request.query_params,
                                   json_body(body, request.headers.get("content-type", "")))
    service = service_of(path, request.query_params)
    pinned = None  # a request about one call goes to the server holding it, wherever the ring would put it
    if (call := call_of(path)) is not None and (pinned := state.holder(call)) is None:
        return error_response(404, f"no call {call!r} in this fleet: it was never made, or its server has left",
                              "invalid_request_error")
    headers = request_headers(request.headers, request.client.host if request.client else None,
                              keep_length=body is None, scheme=request.url.scheme)
    target = path + (f"?{request.url.query}" if request.url.query else "")
    failed: list[str] = []
    refusal: Response | None = None  # the first server's 503 or 429, passed on when there is no next server
    for attempt in range(1 if pinned else 2):  # the first server, then once more on the next
        if pinned is None:
            route = state.choose(identity, service, path, exclude=failed)
            if route is None:
                break
            url = route.server
        else:
            url = pinned
        if attempt == 0:
            state.metrics.overhead.observe(time.perf_counter() - started)
        sent = time.perf_counter()
        lease = state.lease(url, client)
        upload = _Upload(request) if body is None else None
        try:
            response = await state.client.request(request.method, url + target, headers=headers,
                                                  data=body if upload is None else upload.chunks(),
                                                  allow_redirects=False)
        except (aiohttp.ClientError, TimeoutError) as exc:
            lease.release()
            log.warning("%s %s: server %s failed before answering (%r)", request.method, path, url, exc)
            if upload is not None and upload.started:  # part of the body is gone: it cannot be sent again
                state.metrics.failures.labels("no_answer").inc()
                return error_response(502, f"server {url} failed while the request body was sent ({exc!r})")
            failed.append(url)
            state.metrics.retries.labels("unreachable").inc()
            continue
        except ClientDisconnect:
            lease.release()
            return Response(status_code=_CLIENT_LEFT)
        except BaseException:
            lease.release()
            raise
        state.metrics.upstream_first_byte.observe(time.perf_counter() - sent)
        if (response.status in RETRY_REASONS and attempt == 0 and not pinned
                and (upload is None or not upload.started)):
            refusal = await _small(response, url, lease, state)  # a short error: read whole, kept to pass on
            failed.append(url)
            state.metrics.retries.labels(RETRY_REASONS[response.status]).inc()
            continue
        if response.content_length is not None and response.content_length <= _SMALL:  # a whole answer: one write
            return await _small(response, url, lease, state)
        return _Relayed(response, url, lease, state)
    if refusal is not None and refusal.status_code in RETRY_REASONS:
        return refusal  # no next server, or it could not be reached: the first one's reason and Retry-After
    if failed:
        state.metrics.failures.labels("no_answer").inc()
        return error_response(502, f"no server answered {path}: tried {', '.join(failed)}")
    state.metrics.failures.labels("no_server").inc()
    what = f"serves {service}" if service else "is up"
    return error_response(503, f"no server in the fleet {what} now" + (" (the ring is stale: Redis is away)"
                                                                         if state.view.stale else ""))


def _form(request: Request, body: bytes) -> list[tuple[str, str]]:
    """The POST parameters of a form body (none for any other)."""
    if not request.headers.get("content-type", "").startswith("application/x-www-form-urlencoded"):
        return []
    return parse_qsl(body.decode("utf-8", "replace"), keep_blank_values=True)


def _small_body(request: Request, limit: int) -> bool:
    """No body, or one whose Content-Length is within ``limit``: cheap to hold for a retry."""
    length = request.headers.get("content-length")
    if length is None:
        return "transfer-encoding" not in request.headers
    return length.isdigit() and int(length) <= limit


async def _read_body(request: Request, limit: int) -> bytes | Response:
    """The whole body, or a 413 once it is past ``limit`` (at once when its Content-Length says so)."""
    too_large = error_response(413, f"request body over the router's limit of {limit} bytes", "invalid_request_error")
    length = request.headers.get("content-length", "")
    if length.isdigit() and int(length) > limit:
        return too_large
    body = bytearray()
    try:
        async for piece in request.stream():
            body += piece
            if len(body) > limit:
                return too_large
    except ClientDisconnect:
        return Response(status_code=_CLIENT_LEFT)
    return bytes(body)


class _Upload:
    """The client's body passed on as it arrives; ``started`` once any of it has gone to a server."""

    def __init__(self, request: Request) -> None:
        self._request = request
        self.started = False

    async def chunks(self) -> AsyncIterator[bytes]:
        self.started = True
        async for piece in self._request.stream():
            if piece:
                yield piece


def _headers(response: Response, upstream: aiohttp.ClientResponse, url: str, drop: frozenset[str] = frozenset()
             ) -> None:
    """The server's end-to-end headers onto ``response``, and the one naming the server."""
    pairs = [(k.decode("latin-1"), v.decode("latin-1")) for k, v in upstream.raw_headers]
    response.raw_headers += [(k.lower().encode("latin-1"), v.encode("latin-1"))
                             for k, v in response_headers(pairs) if k.lower() not in drop]
    response.raw_headers.append((SERVER_HEADER.encode(), url.encode()))


async def _small(upstream: aiohttp.ClientResponse, url: str, lease: Lease, state: RouterState) -> Response:
    try:
        body = await upstream.read()
    except (aiohttp.ClientError, TimeoutError) as exc:
        upstream.close()
        state.metrics.failures.labels("mid_stream").inc()
        return error_response(502, f"server {url} failed while answering ({exc!r})")
    finally:
        upstream.release()
        lease.release()
    response = Response(body, upstream.status)  # its own Content-Length, from the body
    _headers(response, upstream, url, drop=frozenset({"content-length"}))
    return response


class _Relayed(StreamingResponse):
    """A server's answer streamed back as it comes.

    The connection and the in-flight count are given back when the response ends, however it ends: here,
    not in the body's generator, which the ASGI server may never start (a client gone before the answer),
    or leave suspended for the garbage collector to close.
    """

    def __init__(self, upstream: aiohttp.ClientResponse, url: str, lease: Lease, state: RouterState) -> None:
        super().__init__(self._chunks(upstream, url, state), status_code=upstream.status)
        _headers(self, upstream, url)
        self._upstream, self._lease = upstream, lease
        self._whole = False  # read to its end: the connection can go back to the pool

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            if self._whole:
                self._upstream.release()
            else:
                self._upstream.close()  # the client left, or the server failed: the server sees the connection close
            self._lease.release()

    async def _chunks(self, upstream: aiohttp.ClientResponse, url: str, state: RouterState) -> AsyncIterator[bytes]:
        sse = upstream.headers.get("content-type", "").startswith("text/event-stream")
        try:
            async for chunk in upstream.content.iter_any():
                yield chunk
            self._whole = True
        except (aiohttp.ClientError, TimeoutError) as exc:
            state.metrics.failures.labels("mid_stream").inc()
            log.warning("server %s failed mid-response (%r)", url, exc)
            if not sse:
                raise  # the response is cut short: the client sees an incomplete body, not a complete-looking one
            error = {"type": "error", "error": {"message": f"server {url} failed mid-stream; retry the request",
                                                "type": "server_error"}}
            yield f"data: {json.dumps(error)}\n\n".encode()
