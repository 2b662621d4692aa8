"""A streamed answer whose listener must keep taking it.

A client that stops reading a streamed response (a player paused for good, a crashed reader whose socket
stays open) fills the socket's buffers, and then every write waits: without a bound, its stream, its
admission slot and its engine and codec work are held for as long as the connection stays open. Here a chunk
the listener has not taken within ``write_timeout_s`` ends the response: the body is closed (which frees
everything it held, as a disconnect does), the stall counted, and the connection closed. A listener playing
at real time never waits that long: the engine keeps each stream within seconds of its listener.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable
from typing import Any

from starlette.responses import StreamingResponse
from starlette.types import Message, Send

__all__ = ["WatchedStreamingResponse"]

log = logging.getLogger("lyre.server")


class _Stalled(Exception):
    pass


class WatchedStreamingResponse(StreamingResponse):
    """`StreamingResponse`, cut when a write waits more than ``write_timeout_s`` for its listener;
    ``on_stall()`` is called then."""

    def __init__(self, content: AsyncIterator[bytes], *, write_timeout_s: float, on_stall: Callable[[], None],
                 **kwargs: Any) -> None:
        super().__init__(content, **kwargs)
        self.write_timeout_s = write_timeout_s
        self.on_stall = on_stall

    async def stream_response(self, send: Send) -> None:
        async def timed(message: Message) -> None:
            try:
                await asyncio.wait_for(send(message), self.write_timeout_s)
            except TimeoutError:
                raise _Stalled from None

        try:
            await super().stream_response(timed)
        except _Stalled:
            log.warning("a streamed response's listener took nothing for %.0f s: cut, its stream freed",
                        self.write_timeout_s)
            self.on_stall()
            close = getattr(self.body_iterator, "aclose", None)
            if close is not None:
                await close()
