"""A stand-in for ``lyre serve`` behind the router, run as its own process: it registers in the fleet as a
server does (lyre.fleet.member) and answers the servers' routes with what it saw, so a test can see what the
router passed on, when, and how much.

    python tests/fleet/upstream_stub.py --port PORT --redis redis://... --services tts,stt[,agent]

- every answer (and a socket's first message) names this server and echoes the request's headers and query;
- ``POST /v1/audio/transcriptions`` counts the body as it arrives (``GET /progress/{x-test-id}`` reads the
  count while the upload is still going) and answers with the total;
- ``POST /v1/audio/speech`` ``{"delay_s": D, "chunks": N, "chunk_s": S, "chunk_bytes": B}`` waits D before
  its headers, then streams N chunks of B bytes (default 1 KiB) S apart;
- ``GET /v1/models`` answers with a hop-by-hop header of its own (``Connection: x-up-hop``, ``X-Up-Hop``);
- any other route echoes what came, with its method;
- ``?refuse=URL&status=S`` on the speech route or a socket: the server at URL (or every server, for ``all``)
  refuses it with S (default 429) and ``Retry-After: 7``, as a busy server does.
"""

from __future__ import annotations

import argparse
import asyncio
import json
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import uvicorn
from fastapi import FastAPI, Request, Response, WebSocket
from fastapi.responses import JSONResponse, StreamingResponse
from starlette.websockets import WebSocketDisconnect

from lyre.fleet.records import ServerRecord
from lyre.fleet.member import FleetLoad, Membership


def create_stub(url: str, redis_url: str, services: tuple[str, ...]) -> FastAPI:
    progress: Counter[str] = Counter()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        member = Membership(redis_url, ServerRecord(url=url, capacity=64, services=services, ttl_s=2.0),
                            lambda: FleetLoad(0))
        await member.start()
        try:
            yield
        finally:
            await member.leave()

    app = FastAPI(lifespan=lifespan)

    def seen(request: Request | WebSocket) -> dict[str, object]:
        return {"server": url, "path": request.url.path, "query": dict(request.query_params),
                "headers": [[k, v] for k, v in request.headers.items()]}

    def refusal(request: Request | WebSocket) -> JSONResponse | None:
        """The busy answer the request asks this server for, or None."""
        if request.query_params.get("refuse") not in (url, "all"):
            return None
        status = int(request.query_params.get("status", "429"))
        return JSONResponse({"error": {"message": f"server {url} is busy", "type": "rate_limit_error"}}, status,
                            headers={"Retry-After": "7"})

    @app.get("/ready")
    async def ready() -> dict[str, bool]:
        return {"ready": True}

    @app.get("/v1/models")
    async def models(request: Request) -> JSONResponse:
        return JSONResponse(seen(request), headers={"Connection": "x-up-hop", "X-Up-Hop": "1"})

    @app.post("/v1/audio/transcriptions")
    async def upload(request: Request) -> dict[str, object]:
        key = request.headers.get("x-test-id", "")
        async for piece in request.stream():
            progress[key] += len(piece)
        return {**seen(request), "bytes": progress[key]}

    @app.get("/progress/{key}")
    async def received(key: str) -> dict[str, int]:
        return {"bytes": progress[key]}

    @app.post("/v1/audio/speech")
    async def speech(request: Request) -> Response:
        body = await request.json()
        if (busy := refusal(request)) is not None:
            return busy
        await asyncio.sleep(float(body.get("delay_s", 0)))

        async def chunks() -> AsyncIterator[bytes]:
            yield (json.dumps(seen(request)) + "\n").encode()
            for _ in range(int(body.get("chunks", 0))):
                await asyncio.sleep(float(body.get("chunk_s", 0)))
                yield b"x" * int(body.get("chunk_bytes", 1024))

        return StreamingResponse(chunks(), media_type="application/octet-stream")

    async def socket(ws: WebSocket) -> None:
        if (busy := refusal(ws)) is not None:
            await ws.send_denial_response(busy)
            return
        await ws.accept()
        await ws.send_text(json.dumps(seen(ws)))
        try:
            while True:
                await ws.send_text(await ws.receive_text())
        except WebSocketDisconnect:
            return

    app.add_api_websocket_route("/v1/tts/websocket", socket)
    app.add_api_websocket_route("/v1/realtime", socket)
    app.add_api_websocket_route("/v1/twilio/media-stream", socket)
    app.add_api_websocket_route("/v1/twilio/media-stream/{credential}", socket)

    @app.api_route("/{rest:path}", methods=["GET", "POST", "PUT", "DELETE"])
    async def anything(request: Request) -> dict[str, object]:
        """Every other route a server has: what came, and which method."""
        await request.body()
        return {**seen(request), "method": request.method}

    return app


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--redis", required=True)
    parser.add_argument("--services", default="tts,stt")
    args = parser.parse_args()
    url = f"http://127.0.0.1:{args.port}"
    app = create_stub(url, args.redis, tuple(args.services.split(",")))
    uvicorn.run(app, host="127.0.0.1", port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
