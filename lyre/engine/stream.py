"""One request's tokens on the caller's event loop, handed over by the engine's thread."""

from __future__ import annotations

import asyncio
import weakref
from collections import deque
from collections.abc import Callable

from lyre.engine.sequence import FinishReason, Request

__all__ = ["RequestStream"]


class RequestStream:
    """The tokens of one request, as they are made: iterate it, or `take` several at a time.

    Closing it, cancelling the task that awaits it, or dropping every
    reference to it aborts the request, so its KV-cache slot is freed at the
    engine's next step.
    """

    def __init__(self, abort: Callable[[str], None], req: Request) -> None:
        self._abort = abort
        self._req = req
        self._loop = asyncio.get_running_loop()
        self._tokens: deque[int] = deque()
        self._ended = False
        self._error: BaseException | None = None
        self._waiter: asyncio.Future[None] | None = None
        self._want = 1  # tokens the waiting consumer needs before it is worth waking
        # A consumer that stops iterating without closing must not leave the request generating.
        self._finalizer = weakref.finalize(self, abort, req.request_id)

    @property
    def request_id(self) -> str:
        return self._req.request_id

    @property
    def finish_reason(self) -> FinishReason | None:
        """Why the request ended, once it has."""
        return self._req.finish_reason

    @property
    def request(self) -> Request:
        return self._req

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        return self._loop

    def __aiter__(self) -> RequestStream:
        return self

    async def __anext__(self) -> int:
        while not self._tokens and not self._ended:
            await self._wait(1)
        if self._tokens:
            return self._tokens.popleft()
        if self._error is not None:
            error, self._error = self._error, None
            raise error
        raise StopAsyncIteration

    @property
    def ready(self) -> int:
        """Tokens made and not yet taken."""
        return len(self._tokens)

    @property
    def ended(self) -> bool:
        """Whether the request has ended (its last tokens may still be waiting to be taken)."""
        return self._ended

    async def take(self, at_least: int = 1, within: float | None = None) -> list[int]:
        """Wait until ``at_least`` tokens are ready, the request has ended, or ``within`` seconds have
        passed; return every ready token.

        One wake-up for several steps' tokens: a consumer that can only use
        whole frames asks for a frame's worth. ``within`` bounds the wait for a
        consumer with work of its own to do by then (what it has may be []).
        ``[]`` with `ended` means the request is over; if it failed, the error
        is raised instead (after its last tokens).
        """
        if within is not None and len(self._tokens) < at_least and not self._ended:
            timer = self._loop.call_later(max(0.0, within), self._wake_up)
            try:
                await self._wait(at_least)
            finally:
                timer.cancel()
        while len(self._tokens) < at_least and not self._ended and within is None:
            await self._wait(at_least)
        if not self._tokens and self._error is not None:
            error, self._error = self._error, None
            raise error
        return self.take_ready()

    def take_ready(self) -> list[int]:
        """The tokens already made and not yet taken, without waiting."""
        tokens = list(self._tokens)
        self._tokens.clear()
        return tokens

    async def aclose(self) -> None:
        """Stop consuming: the engine frees the request's slot at its next step."""
        if not self._ended:
            self._abort(self.request_id)

    async def __aenter__(self) -> RequestStream:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def _wait(self, want: int) -> None:
        self._want = want
        self._waiter = self._loop.create_future()
        try:
            await self._waiter
        except asyncio.CancelledError:
            self._abort(self.request_id)
            raise
        finally:
            self._waiter = None

    def _wake_up(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    def _deliver(self, tokens: list[int], ended: bool, error: BaseException | None) -> None:
        """On the stream's loop: a step's tokens, and whether (and how) the request ended."""
        self._tokens.extend(tokens)
        if ended:
            self._ended, self._error = True, error
            self._finalizer.detach()
        waiter = self._waiter
        if waiter is not None and not waiter.done() and (ended or len(self._tokens) >= self._want):
            waiter.set_result(None)
