"""Optional API key: Bearer auth on HTTP and on the WebSocket handshake (read as `lyre.api_keys` reads it)."""

from __future__ import annotations

from typing import Any

from fastapi import WebSocket, status

from lyre.api_keys import authorized
from lyre.server.errors import error_response

__all__ = ["authorized", "refuse_socket", "refuse_unauthorized"]


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
