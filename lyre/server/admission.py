"""Bounded concurrency: a fixed number of streams, a bounded queue, then 429."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

__all__ = ["Admission", "Overloaded"]


class Overloaded(Exception):
    """No stream is free and the queue is full (or the wait timed out)."""

    def __init__(self, message: str, retry_after_s: int) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


class Admission:
    """Admits at most ``max_active`` streams; up to ``max_queue`` more wait in FIFO order."""

    def __init__(self, max_active: int, max_queue: int, timeout_s: float) -> None:
        self.max_active = max_active
        self.max_queue = max_queue
        self.timeout_s = timeout_s
        self.active = 0
        self._waiters: list[asyncio.Future[None]] = []
        self.last_wait_s = 0.0

    @property
    def queued(self) -> int:
        return len(self._waiters)

    @asynccontextmanager
    async def slot(self, overloaded: Callable[[], bool | str] | None = None) -> AsyncIterator[float]:
        """Hold one stream slot for the block; yields the seconds spent queued.

        ``overloaded()`` true (the streams already running are falling behind
        their listeners), or a reason, refuses at once: one more would only make them all late.
        """
        start = time.perf_counter()
        if overloaded is not None and (why := overloaded()):
            reason = why if isinstance(why, str) else "its streams are falling behind their listeners"
            raise Overloaded(f"server is at capacity: {reason}; retry shortly", retry_after_s=1)
        if self.active >= self.max_active or self._waiters:
            if len(self._waiters) >= self.max_queue:
                raise Overloaded(
                    f"server is at capacity ({self.active} streams, {self.queued} queued); retry shortly",
                    retry_after_s=1,
                )
            waiter = asyncio.get_running_loop().create_future()
            self._waiters.append(waiter)
            try:
                await asyncio.wait_for(asyncio.shield(waiter), self.timeout_s)
            except TimeoutError:
                if waiter.done() and not waiter.cancelled():
                    self._release()  # granted just as we gave up: pass it on
                raise Overloaded(f"waited {self.timeout_s:.0f} s for a free stream; retry later", 2) from None
            except asyncio.CancelledError:
                if waiter.done() and not waiter.cancelled():
                    self._release()
                raise
            finally:
                if waiter in self._waiters:
                    self._waiters.remove(waiter)
        else:
            self.active += 1
        wait = time.perf_counter() - start
        self.last_wait_s = wait
        try:
            yield wait
        finally:
            self._release()

    def _release(self) -> None:
        """Hand the slot to the oldest live waiter, or free it."""
        while self._waiters:
            waiter = self._waiters.pop(0)
            if not waiter.done():
                waiter.set_result(None)  # the slot passes over: active stays the same
                return
        self.active -= 1
