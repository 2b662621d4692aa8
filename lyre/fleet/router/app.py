"""The router's FastAPI app: ``create_router_app(config)``; the fleet is read in its lifespan."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import aiohttp
from fastapi import FastAPI, Request, Response
from fastapi.responses import JSONResponse
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from lyre.common.api_keys import RequireKey
from lyre.fleet.router.hot_voices import HOT_PREFIX
from lyre.fleet.router.hot_voices import router as hot_voices_router
from lyre.fleet.router.config import RouterConfig
from lyre.fleet.router.fleet_view import FleetView
from lyre.fleet.router.identity import CALLS
from lyre.fleet.router.metrics import RouterMetrics
from lyre.fleet.router.proxy_http import error_response, forward
from lyre.fleet.router.proxy_socket import relay_socket
from lyre.fleet.router.state import RouterState

__all__ = ["HTTP_ROUTES", "SOCKET_ROUTES", "create_router_app"]

# What the router passes on: the servers' APIs, with the methods they take.
HTTP_ROUTES = (
    ("/v1/audio/speech", "POST"),
    ("/v1/audio/voices", "GET"),
    ("/v1/audio/voices", "POST"),  # a reference voice: any server takes it, the fleet shares it through Redis
    ("/v1/audio/voices/{name}", "DELETE"),
    ("/v1/models", "GET"),
    ("/v1/audio/transcriptions", "POST"),
    ("/v1/audio/alignments", "POST"),
    ("/v1/chat/completions", "POST"),
    (CALLS, "POST"),
    (CALLS + "/{call_id}", "DELETE"),  # to the server holding the call, named in its id
    (CALLS + "/{call_id}/hangup", "POST"),
    ("/v1/twilio/voice", "POST"),
    ("/", "GET"),  # the playground page
)
SOCKET_ROUTES = ("/v1/tts/websocket", "/v1/realtime", "/v1/twilio/media-stream", "/v1/twilio/media-stream/{credential}")
# Requests that cannot carry the router's key, and that the server guards with a key of its own: uploads and
# deletes of reference voices (the servers' admin key, in the same Bearer header), which the router passes on
# for the server to refuse what it must; and Twilio's webhook and media stream, which pass on Twilio's
# signature, checked by the router too (lyre.fleet.router.twilio_gate).
_SERVERS_OWN_KEY = (("POST", "/v1/audio/voices"), ("DELETE", "/v1/audio/voices/"), ("POST", "/v1/twilio/voice"))
# Answered without the router's API key: the probes, and the playground page (as a server answers it).
_OPEN_PATHS = frozenset({"/health", "/ready", "/"})


def create_router_app(config: RouterConfig) -> FastAPI:
    metrics = RouterMetrics()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        view = FleetView(config.redis, config.vnodes, config.poll_s,
                         on_change=lambda event, url: metrics.membership.labels(event).inc())
        timeout = aiohttp.ClientTimeout(total=None, connect=config.connect_timeout_s,
                                        sock_read=config.upstream_timeout_s)
        # Admission is each server's job; the router bounds only what it holds open itself (max_inflight, checked
        # before a request is sent, so the pool never makes one wait).
        connector = aiohttp.TCPConnector(limit=config.max_inflight, keepalive_timeout=60)
        # Passed through as they are: no decompression, no headers of the client's own.
        async with aiohttp.ClientSession(connector=connector, timeout=timeout, auto_decompress=False,
                                         skip_auto_headers=("User-Agent", "Accept-Encoding", "Content-Type")
                                         ) as client:
            app.state.router = RouterState(config, view, client, metrics)
            await view.start()
            try:
                yield
            finally:
                await view.close()

    app = FastAPI(title="lyre router", version="0.1.0", lifespan=lifespan)
    app.add_middleware(RequireKey, api_key=config.api_key, open_paths=_OPEN_PATHS, admin=_own_key, refuse=_refuse)
    for path, method in HTTP_ROUTES:
        app.router.add_route(path, forward, methods=[method], include_in_schema=False)  # Starlette's: no FastAPI layer
    for path in SOCKET_ROUTES:
        app.add_api_websocket_route(path, relay_socket)
    app.include_router(hot_voices_router)

    @app.get("/health")
    async def health(request: Request) -> dict[str, object]:
        """Alive; ``stale`` while Redis is away and the router routes on the last ring it read."""
        state: RouterState = request.app.state.router
        view = state.view
        loads = state.loads()
        return {
            "status": "stale" if view.stale else "ok",
            "stale_ring": view.stale,
            "stale_since": view.stale_since,
            "redis_error": view.last_error or None,
            "ring": sorted(view.ring.servers),
            "servers": [{"url": url, "load": loads[url], "inflight": state.inflight[url], "capacity": r.capacity,
                         "draining": r.draining, "services": list(r.services), "adapters": list(r.adapters)}
                        for url, r in sorted(view.servers.items())],
            "hot_voices": view.hot,
        }

    @app.get("/ready")
    async def ready(request: Request) -> JSONResponse:
        """200 while at least one server is on the ring."""
        ok = len(request.app.state.router.view.ring) > 0
        return JSONResponse({"ready": ok}, status_code=200 if ok else 503)

    @app.get("/metrics")
    async def prometheus(request: Request) -> Response:
        state: RouterState = request.app.state.router
        metrics.stale.set(1 if state.view.stale else 0)
        metrics.ring_servers.set(len(state.view.ring))
        for url, record in state.view.servers.items():
            metrics.server_load.labels(url).set(record.load)
        return Response(generate_latest(metrics.registry), media_type=CONTENT_TYPE_LATEST)

    return app


def _own_key(method: str, path: str) -> bool:
    """Requests the router's key does not guard: its own admin API (its admin key), and `_SERVERS_OWN_KEY`."""
    return path.startswith(HOT_PREFIX) or any(
        method == m and (path == p or (p.endswith("/") and path.startswith(p) and len(path) > len(p)))
        for m, p in _SERVERS_OWN_KEY)


def _refuse() -> Response:
    return error_response(401, "missing or wrong API key (send Authorization: Bearer KEY)", "authentication_error",
                          headers={"WWW-Authenticate": "Bearer"})
