"""API keys on requests: where a client may put one, and the check. Plain Python, shared by the server
and the router (which must not import the server), so both read a key the same way.
"""

from __future__ import annotations

import hmac
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import parse_qsl

__all__ = ["API_KEY_HEADER", "API_KEY_PARAM", "RequireKey", "authorized", "bearer", "matches", "offered_key"]

API_KEY_HEADER = "x-api-key"  # what Cartesia clients send
API_KEY_PARAM = "api_key"  # browsers cannot set a WebSocket's headers, only its URL


def bearer(headers: Mapping[str, str]) -> str:
    """The token of ``Authorization: Bearer TOKEN`` (the scheme in any case), or ""."""
    auth = headers.get("authorization", "")
    return auth[7:].strip() if auth[:7].lower() == "bearer " else ""


def offered_key(headers: Mapping[str, str], query: Mapping[str, str] | None = None,
                header: str | None = API_KEY_HEADER, param: str | None = API_KEY_PARAM) -> str:
    """The key a request offers: its Bearer token, else ``header``'s value, else the ``param`` query parameter."""
    return (bearer(headers) or (headers.get(header, "") if header else "")
            or (query.get(param, "") if query is not None and param else ""))


def matches(offered: str, expected: str) -> bool:
    """Compared in constant time, so the time taken tells nothing of how much of the key was right."""
    return hmac.compare_digest(offered.encode(), expected.encode())


def authorized(expected: str | None, headers: Mapping[str, str], query: Mapping[str, str]) -> bool:
    """True when no key is configured, or the request carries it: ``Authorization: Bearer KEY``,
    ``X-API-Key: KEY`` or ``?api_key=KEY``."""
    return expected is None or matches(offered_key(headers, query), expected)


class RequireKey:
    """ASGI middleware: an HTTP request without the key gets ``refuse()`` (a 401) before anything of it is
    read or routed. Paths in ``open_paths`` stay open, and the requests ``admin(method, path)`` names check
    their own (admin) key; sockets check theirs at the handshake.

    Plain ASGI rather than BaseHTTPMiddleware, which would sit between a streaming response and the
    client's disconnect.
    """

    def __init__(self, app: Any, api_key: str | None, open_paths: frozenset[str], admin: Callable[[str, str], bool],
                 refuse: Callable[[], Any]) -> None:
        self.app = app
        self.api_key = api_key
        self.open_paths = open_paths
        self.admin = admin
        self.refuse = refuse

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        path = scope.get("path", "")
        if (scope["type"] != "http" or self.api_key is None or path in self.open_paths
                or self.admin(scope.get("method", ""), path)):
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        query = dict(parse_qsl(scope.get("query_string", b"").decode("latin-1")))
        if authorized(self.api_key, headers, query):
            await self.app(scope, receive, send)
            return
        await self.refuse()(scope, receive, send)
