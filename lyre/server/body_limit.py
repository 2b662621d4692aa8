"""Request bodies capped before they are read: by Content-Length, or while a chunked body streams in."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from fastapi import Request, Response
from fastapi.routing import APIRoute
from starlette.exceptions import HTTPException
from starlette.types import Message, Receive

__all__ = ["CappedReceive", "LimitedBodyRoute", "ServerLimitRoute"]


class BodyTooLarge(Exception):
    """Raised by the capped receive; FastAPI turns it into a generic 400, which the route replaces."""


class CappedReceive:
    """An ASGI receive that fails once more than ``limit`` body bytes have come."""

    def __init__(self, receive: Receive, limit: int) -> None:
        self._receive = receive
        self._left = limit
        self.exceeded = False

    async def __call__(self) -> Message:
        message = await self._receive()
        if message["type"] == "http.request":
            self._left -= len(message.get("body", b""))
            if self._left < 0:
                self.exceeded = True
                raise BodyTooLarge
        return message


class LimitedBodyRoute(APIRoute):
    """A route whose body is refused with 413 before more than its limit is read.

    ``body_limit(request)`` gives the limit in bytes and the 413's message,
    so a route reads its server's own setting; ``before_body(request)`` (e.g.
    "this service is off") runs before any of the body is read.
    """

    body_limit: Callable[[Request], tuple[int, str]]
    before_body: Callable[[Request], None] = staticmethod(lambda request: None)  # type: ignore[assignment]

    def get_route_handler(self) -> Callable[[Request], Awaitable[Response]]:
        handle = super().get_route_handler()

        async def limited(request: Request) -> Response:
            self.before_body(request)
            limit, message = self.body_limit(request)
            length = request.headers.get("content-length", "")
            if length.isdigit() and int(length) > limit:
                raise HTTPException(413, message)
            capped = CappedReceive(request.receive, limit)
            try:
                return await handle(Request(request.scope, capped))
            except HTTPException:
                if capped.exceeded:
                    raise HTTPException(413, message) from None
                raise

        return limited


def _server_limit(request: Request) -> tuple[int, str]:
    limit = request.app.state.lyre.config.max_body_bytes
    return limit, f"the request body is over this server's limit of {limit} bytes"


class ServerLimitRoute(LimitedBodyRoute):
    """A route whose body is capped at the server's ``max_body_bytes`` (a JSON request, a form)."""

    body_limit = staticmethod(_server_limit)
