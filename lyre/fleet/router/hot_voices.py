"""The hot-voice admin API: give a popular voice N placements on the ring, shared by every router through Redis.

    GET    /v1/router/hot-voices              every hot voice, its placements and the servers they land on
    PUT    /v1/router/hot-voices/{voice}      {"placements": N}  (1 makes it an ordinary voice again)
    DELETE /v1/router/hot-voices/{voice}

Only with ``--admin-key`` (Bearer), else 404. A change is published on the
fleet channel, so every router reads it at once.
"""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field
from redis.exceptions import RedisError

from lyre.common.api_keys import bearer, matches
from lyre.fleet.records import EVENTS_CHANNEL, HOT_KEY
from lyre.fleet.router.proxy_http import error_response
from lyre.fleet.router.ring import placement_keys
from lyre.fleet.router.state import RouterState

__all__ = ["HOT_PREFIX", "MAX_PLACEMENTS", "router"]

HOT_PREFIX = "/v1/router/hot-voices"
MAX_PLACEMENTS = 64

router = APIRouter()


class Placements(BaseModel):
    placements: int = Field(ge=1, le=MAX_PLACEMENTS, description="how many servers the voice is spread over")


def _refused(request: Request) -> JSONResponse | None:
    state: RouterState = request.app.state.router
    key = state.config.admin_key
    if key is None:
        return error_response(404, "the hot-voice admin API is off (start the router with --admin-key)",
                              "invalid_request_error")
    if not matches(bearer(request.headers), key):
        return error_response(401, "missing or wrong admin key (send Authorization: Bearer ADMIN_KEY)",
                              "authentication_error")
    return None


def where(state: RouterState, voice: str, placements: int) -> list[str | None]:
    """The server each placement of ``voice`` lands on now (no load bound)."""
    return [state.view.ring.home(f"voice:{key}") for key in placement_keys(voice, placements)]


@router.get(HOT_PREFIX)
async def list_hot(request: Request) -> JSONResponse:
    if (refused := _refused(request)) is not None:
        return refused
    state: RouterState = request.app.state.router
    return JSONResponse({"voices": [{"voice": v, "placements": n, "servers": where(state, v, n)}
                                    for v, n in sorted(state.view.hot.items())], "stale": state.view.stale})


@router.put(HOT_PREFIX + "/{voice}")
async def set_hot(voice: str, body: Placements, request: Request) -> JSONResponse:
    if (refused := _refused(request)) is not None:
        return refused
    return await _store(request, voice, body.placements)


@router.delete(HOT_PREFIX + "/{voice}")
async def delete_hot(voice: str, request: Request) -> JSONResponse:
    if (refused := _refused(request)) is not None:
        return refused
    return await _store(request, voice, 1)


async def _store(request: Request, voice: str, placements: int) -> JSONResponse:
    state: RouterState = request.app.state.router
    redis = state.view.redis
    try:
        if placements == 1:
            await redis.hdel(HOT_KEY, voice)
        else:
            await redis.hset(HOT_KEY, voice, placements)
        await redis.publish(EVENTS_CHANNEL, f"hot {voice}")
    except (RedisError, OSError) as exc:
        return error_response(503, f"Redis is away, so the hot voices cannot change now: {exc}")
    await state.view.refresh()
    return JSONResponse({"voice": voice, "placements": placements, "servers": where(state, voice, placements)})
