"""Optional API key: Bearer auth on HTTP and on the WebSocket handshake."""

from __future__ import annotations

import hmac
from collections.abc import Mapping

from fastapi import WebSocket, status

__all__ = ["authorized", "refuse_unauthorized"]


def authorized(expected: str | None, headers: Mapping[str, str], query: Mapping[str, str]) -> bool:
    """True when no key is configured, or the request carries it.

    Accepted: ``Authorization: Bearer KEY``, ``X-API-Key: KEY`` (what Cartesia
    clients send), or ``?api_key=KEY`` (browsers cannot set WebSocket headers).
    Compared in constant time.
    """
    if expected is None:
        return True
    offered = ""
    auth = headers.get("authorization", "")
    if auth[:7].lower() == "bearer ":
        offered = auth[7:].strip()
    offered = offered or headers.get("x-api-key", "") or query.get("api_key", "")
    return hmac.compare_digest(offered.encode(), expected.encode())


async def refuse_unauthorized(websocket: WebSocket, expected: str | None) -> bool:
    """Refuse the handshake (HTTP 403) and return True when the socket lacks the key.

    Closing before accepting fails the client's connect at once, rather than on its first send.
    """
    if authorized(expected, websocket.headers, websocket.query_params):
        return False
    await websocket.close(code=status.WS_1008_POLICY_VIOLATION, reason="missing or wrong API key")
    return True

