"""The FastAPI app: ``create_app(config)`` loads the model in its lifespan."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from importlib.resources import files
from typing import TYPE_CHECKING
from urllib.parse import parse_qsl

from fastapi import FastAPI, Request, Response
from fastapi.responses import HTMLResponse, JSONResponse
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.types import ASGIApp, Receive, Scope, Send

from lyre.engine import EngineConfig, SamplingParams
from lyre.server import speech, websocket
from lyre.server.admission import Admission
from lyre.server.auth import authorized
from lyre.server.config import ServerConfig
from lyre.server.errors import document_errors, error_response, install_error_handlers
from lyre.server.metrics import Metrics
from lyre.server.state import ServerState
from lyre.tts import TTS, TTSConfig

if TYPE_CHECKING:
    from lyre.baseline import NaiveTTS

__all__ = ["create_app"]

log = logging.getLogger("lyre.server")

# Reachable without the API key: liveness, readiness and the playground page itself.
_OPEN_PATHS = frozenset({"/health", "/ready", "/"})
_DRAIN_GRACE_S = 30.0


def _load(config: ServerConfig) -> TTS | NaiveTTS:
    if config.engine == "naive":
        # Needs transformers: imported only when asked for.
        from lyre.baseline import NaiveTTS

        return NaiveTTS.load(config.model, config.codec, config.device, config.max_input_chars)
    engine = EngineConfig(max_batch=config.max_streams, max_seq_len=config.max_seq_len, device=config.device)
    return TTS.load(config.model, config.codec, engine, TTSConfig(max_input_chars=config.max_input_chars))


async def _warm_up(tts: TTS) -> None:
    """One short utterance through engine and codec, so the first user does not pay for it."""
    async for _ in tts.stream("Ready.", None, SamplingParams(max_tokens=21, seed=0), trim=False):
        pass


def create_app(config: ServerConfig, tts: TTS | None = None) -> FastAPI:
    """The app for ``config``. Pass ``tts`` to serve an already-loaded pipeline."""

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        start = time.perf_counter()
        loaded = tts or await asyncio.to_thread(_load, config)
        state = ServerState(
            config=config,
            tts=loaded,
            admission=Admission(config.max_streams, config.max_queue, config.queue_timeout_s),
            metrics=Metrics(loaded.engine.stats, loaded.codec.stats),
        )
        app.state.lyre = state
        await _warm_up(loaded)
        state.ready = True
        log.info("lyre ready in %.1f s", time.perf_counter() - start)
        try:
            yield
        finally:
            # Stop admitting, give in-flight streams a grace period, then stop the engine
            # and codec (which ends any stream still running).
            state.draining = True
            state.ready = False
            deadline = time.monotonic() + _DRAIN_GRACE_S
            while state.admission.active and time.monotonic() < deadline:
                await asyncio.sleep(0.05)
            if tts is None:
                loaded.close()

    app = FastAPI(title="lyre", version="0.1.0", lifespan=lifespan)
    install_error_handlers(app)
    document_errors(app)
    app.add_middleware(_ApiKey, api_key=config.api_key)
    app.include_router(speech.router)
    app.include_router(websocket.router)

    @app.get("/health")
    async def health() -> dict[str, str]:
        """Alive (the process answers)."""
        return {"status": "ok"}

    @app.get("/ready", responses={503: {"description": "Loading, warming up or shutting down"}})
    async def ready(request: Request) -> JSONResponse:
        """Model loaded and warmed up; 503 until then and while shutting down."""
        state: ServerState | None = getattr(request.app.state, "lyre", None)
        ok = state is not None and state.ready
        return JSONResponse({"ready": ok}, status_code=200 if ok else 503)

    @app.get("/v1/audio/voices")
    async def voices(request: Request) -> dict[str, list[dict[str, str]]]:
        return {"voices": [{"id": v, "name": v} for v in request.app.state.lyre.tts.voices]}

    @app.get("/v1/models")
    async def models() -> dict[str, object]:
        return {"object": "list", "data": [{"id": "orpheus", "object": "model", "created": 0, "owned_by": "lyre"}]}

    @app.get("/metrics", response_class=Response,
             responses={200: {"description": "Prometheus text format", "content": {CONTENT_TYPE_LATEST: {}}}})
    async def metrics(request: Request) -> Response:
        state: ServerState = request.app.state.lyre
        state.metrics.queued.set(state.admission.queued)
        state.metrics.active.set(state.admission.active)
        return Response(generate_latest(state.metrics.registry), media_type=CONTENT_TYPE_LATEST)

    @app.get("/", response_class=HTMLResponse, include_in_schema=False)
    async def playground() -> HTMLResponse:
        return HTMLResponse(files("lyre.server").joinpath("playground.html").read_text())

    return app


class _ApiKey:
    """401 for HTTP requests without the key (the WebSocket checks its own handshake).

    Plain ASGI rather than BaseHTTPMiddleware, which would sit between a
    streaming response and the client's disconnect.
    """

    def __init__(self, app: ASGIApp, api_key: str | None) -> None:
        self.app = app
        self.api_key = api_key

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or self.api_key is None or scope["path"] in _OPEN_PATHS:
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        query = dict(parse_qsl(scope.get("query_string", b"").decode("latin-1")))
        if authorized(self.api_key, headers, query):
            await self.app(scope, receive, send)
            return
        response = error_response(401, "missing or wrong API key (send Authorization: Bearer KEY)",
                                  "authentication_error", headers={"WWW-Authenticate": "Bearer"})
        await response(scope, receive, send)
