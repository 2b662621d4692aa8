"""Optional API key: Bearer auth on HTTP and on the WebSocket handshake (read as `lyre.common.api_keys` reads it)."""

from __future__ import annotations

from typing import Any

from fastapi import Request, WebSocket, status
from starlette.exceptions import HTTPException

from lyre.common.api_keys import authorized, matches, offered_key
from lyre.server.errors import error_response

__all__ = ["authorized", "is_admin", "refuse_socket", "refuse_unauthorized", "require_admin"]


def is_admin(request: Request, admin_key: str | None) -> bool:
    """The request carries the admin key (there is one)."""
    return admin_key is not None and matches(offered_key(request.headers, header="x-admin-key", param=None), admin_key)


def require_admin(request: Request, off: str) -> None:
    """Nothing when the request carries the admin key (``--admin-key``; as ``Authorization: Bearer`` or
    ``X-Admin-Key``); 401 when it does not, and 404 saying ``off`` when the server has no admin key."""
    expected = request.app.state.lyre.config.admin_key
    if expected is None:
        raise HTTPException(404, off)
    if not is_admin(request, expected):
        raise HTTPException(401, "missing or wrong admin key (send Authorization: Bearer ADMIN_KEY)",
                            headers={"WWW-Authenticate": "Bearer"})


async def refuse_unauthorized(websocket: WebSocket, expected: str | None) -> bool:
    """Refuse the handshake (HTTP 403) and return True when the socket lacks the key.

    Closing before accepting fails the client's connect at once, rather than on its first send.
    """
    if authorized(expected, websocket.headers, websocket.query_params):
        return False
    await websocket.close(code=status.WS_1008_POLICY_VIOLATION, reason="missing or wrong API key")
    return True


async def refuse_socket(websocket: WebSocket, state: Any, off: str | None) -> bool:
    """Refuse a socket's handshake, and return True, when it lacks the API key (403) or when the
    service it asks for is off on this server (``off``, the reason: 404 with an OpenAI-shaped body)."""
    if await refuse_unauthorized(websocket, state.config.api_key):
        state.metrics.errors.labels("unauthorized").inc()
        return True
    if off is not None:
        await websocket.send_denial_response(error_response(404, off, "invalid_request_error"))
        return True
    return False
