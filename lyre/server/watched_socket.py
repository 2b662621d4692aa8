"""A WebSocket whose listener must keep taking what it is sent: the rule lyre.server.watched_response keeps for
streamed HTTP, for the TTS socket, ``/v1/realtime`` and Twilio's media streams.

A client that stops reading (a paused player, a crashed reader whose socket stays open, a line dead one way)
fills the socket's buffers; then every send waits (uvicorn's waits while the transport's buffer is over its
high-water mark), and without a bound the socket's streams, admission slots, engine and codec work and session
are held for as long as the connection stays open. Here a send that waits more than ``write_timeout_s`` cuts
the socket:

- the send raises `Stalled`, and so does every send after it: what the listener took is in order, with
  nothing missing from it, and nothing goes after a gap;
- the stall is logged and counted (``on_stall``: ``lyre_stalled_listeners_total{api}``);
- the socket's reader, waiting in `receive`, is woken with `Stalled` too, so the surface ends as for a client
  gone, freeing all it held, and then closes the socket with `STALLED` and the stall's reason. The close
  frame queues behind what the listener never took: `close` waits for it a bounded time.

`STALLED` is 1008 (policy violation), as for a client that leaves events unread: the listener broke the
server's rule; 1011 would say the server failed. A send that finds the client gone (or that uvicorn has given
up on it, a ping unanswered: a RuntimeError) raises `Gone` and wakes the reader with a disconnect, since
uvicorn may hold a socket it gave up on open until its buffer drains, and tell the reader nothing.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from starlette.status import WS_1008_POLICY_VIOLATION
from starlette.types import Message
from starlette.websockets import WebSocket, WebSocketDisconnect, WebSocketState

if TYPE_CHECKING:
    from lyre.server.state import ServerState

__all__ = ["STALLED", "Gone", "Stalled", "WatchedSocket"]

STALLED = WS_1008_POLICY_VIOLATION
_CLOSE_REASON_CHARS = 120  # a close reason is at most 123 bytes

log = logging.getLogger("lyre.server")


class Gone(Exception):
    """Nothing more can be sent on the socket: the client has left, or (`Stalled`) been cut."""


class Stalled(Gone):
    """The listener took nothing for the write timeout: the socket is cut."""


class WatchedSocket:
    """One WebSocket's sends, each bounded by ``write_timeout_s``, and its reader; see the module docstring."""

    def __init__(self, websocket: WebSocket, write_timeout_s: float, on_stall: Callable[[], None],
                 api: str = "websocket") -> None:
        """``api``: the surface, for the log."""
        self.websocket = websocket
        self.write_timeout_s = write_timeout_s
        self.stall: Stalled | None = None  # set once a send has stalled
        self._on_stall = on_stall
        self._api = api
        self._gone = False
        self._reader: asyncio.Task[Any] | None = None  # the task waiting in receive()
        self._woken = False  # the reader was cancelled here, to be told the socket is over

    @classmethod
    def of(cls, websocket: WebSocket, state: ServerState, api: str) -> WatchedSocket:
        """The socket watched by the server's ``write_timeout_s``, its stalls counted under ``api``."""
        return cls(websocket, state.config.write_timeout_s, lambda: state.metrics.stalled.labels(api).inc(), api)

    async def send_text(self, text: str) -> None:
        """Send ``text``; `Stalled` when the listener has not taken it within the write timeout, `Gone` when
        the client has left (and each again on every later send)."""
        self._check()
        try:
            async with asyncio.timeout(self.write_timeout_s):
                await self.websocket.send_text(text)
        except TimeoutError:
            self.stall = Stalled(f"the listener took nothing for {self.write_timeout_s:g} s")
            log.warning("%s socket: %s: cut, what it held freed", self._api, self.stall)
            self._on_stall()
            self._end()
        except (WebSocketDisconnect, RuntimeError):  # RuntimeError: uvicorn has closed the socket
            self._gone = True
            self._end()

    async def receive(self) -> Message:
        """The client's next message; once a send has found the client gone, a disconnect; once one has
        stalled, `Stalled`. A reader waiting here when that happens is woken."""
        if not (self._gone or self.stall is not None):
            task = self._reader = asyncio.current_task()
            assert task is not None
            try:
                return await self.websocket.receive()
            except asyncio.CancelledError:
                if not self._woken:
                    raise
                task.uncancel()
            finally:
                self._reader, self._woken = None, False
        if self.stall is not None:
            raise Stalled(*self.stall.args)
        return {"type": "websocket.disconnect", "code": 1006}

    async def close(self, code: int, reason: str, within: float | None = None) -> None:
        """Close the socket with ``code`` and ``reason`` unless it is closed already, waiting at most ``within``
        seconds (default: the write timeout) for the close frame to go."""
        websocket = self.websocket
        if (websocket.client_state != WebSocketState.CONNECTED
                or websocket.application_state != WebSocketState.CONNECTED):
            return
        try:
            await asyncio.wait_for(websocket.close(code, reason[:_CLOSE_REASON_CHARS]),
                                   self.write_timeout_s if within is None else within)
        except (TimeoutError, WebSocketDisconnect, RuntimeError):
            pass  # a listener that takes nothing, or one that has left

    def _check(self) -> None:
        if self.stall is not None:
            raise Stalled(*self.stall.args)
        if self._gone:
            raise Gone("the client has left")

    def _end(self) -> None:
        """Wake the reader, then raise what the send found."""
        if self._reader is not None and not self._woken:
            self._woken = True
            self._reader.cancel()
        self._check()
