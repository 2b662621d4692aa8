"""Bounded concurrency: a fixed number of streams, a bounded queue, then 429.

Two kinds of request meet the measured rates (``overloaded()``, lyre.tts.listeners) differently. A *live* one
(someone listens as it is made: a request marked ``"priority": "realtime"``, a WebSocket context) is refused
at once when they cannot take one more, so a router can place it on another server while it is still worth
hearing; a caller that passes no ``overloaded`` (an agent's reply) is never refused for the rates. Any other
(a file being saved, a client that said nothing) waits in the same FIFO queue until they can and a slot is
free: re-asked whenever a stream ends, and every `RECHECK_S` since the rates change without one ending. Both
kinds wait there for a free slot; a full queue, or a wait past ``timeout_s``, is a 429.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass

from lyre.server.client_shares import ClientShares

__all__ = ["RECHECK_S", "Admission", "Check", "Overloaded"]

RECHECK_S = 0.25  # how often the queue's head asks the rates again when no stream has ended

# Would one more stream fit now: nothing against it (False, None, ""), else True or why not.
Check = Callable[[], bool | str]


class Overloaded(Exception):
    """A live request the rates cannot take, a full queue, or a wait past the queue's timeout: a 429."""

    def __init__(self, message: str, retry_after_s: int) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


@dataclass(eq=False)
class _Waiter:
    """One queued request: granted a slot when ``fits`` (None: any free slot does) has nothing against it."""

    granted: asyncio.Future[None]
    fits: Check | None


def _reason(why: bool | str) -> str:
    return why if isinstance(why, str) else "its streams are falling behind their listeners"


class Admission:
    """Admits at most ``max_active`` streams; up to ``max_queue`` more wait in FIFO order, each at most
    ``timeout_s`` (who waits and who is refused at once: the module's docstring)."""

    def __init__(self, max_active: int, max_queue: int, timeout_s: float, per_client: int | None = None) -> None:
        """``per_client``: the streams, running or queued, one client address may hold (None: no share)."""
        self.max_active = max_active
        self.shares = ClientShares(per_client, "speech streams")
        self.max_queue = max_queue
        self.timeout_s = timeout_s
        self.active = 0
        self._waiters: deque[_Waiter] = deque()
        self.last_wait_s = 0.0
        self._held: bool | str = False  # why the rates held the line's head back when last asked, if they did

    @property
    def queued(self) -> int:
        return len(self._waiters)

    @asynccontextmanager
    async def slot(self, overloaded: Check | None = None, live: bool = True,
                   client: str | None = None) -> AsyncIterator[float]:
        """Hold one stream slot for the block; yields the seconds spent queued.

        ``overloaded()`` true, or a reason, says the streams already running cannot take one more (they would
        only all be late). A ``live`` request is refused at once then; any other waits in the queue until it
        says nothing. Overloaded (429) when the queue is full, the wait times out, or ``client`` holds its share
        already, naming which.
        """
        if (over := self.shares.refusal(client)) is not None:
            raise Overloaded(over, retry_after_s=1)
        with self.shares.hold(client):
            async with self._slot(overloaded, live) as wait:
                yield wait

    @asynccontextmanager
    async def _slot(self, overloaded: Check | None, live: bool) -> AsyncIterator[float]:
        start = time.perf_counter()
        if live and overloaded is not None and (why := overloaded()):
            raise Overloaded(f"server is at capacity: {_reason(why)}; retry shortly", retry_after_s=1)
        fits = None if live else overloaded
        if self.active < self.max_active and not self._waiters and (fits is None or not fits()):
            self.active += 1
        else:
            await self._queue(fits)
        wait = time.perf_counter() - start
        self.last_wait_s = wait
        try:
            yield wait
        finally:
            self._release()

    async def _queue(self, fits: Check | None) -> None:
        """Wait in line until `_grant` hands this request a slot (counted in ``active`` by then)."""
        if len(self._waiters) >= self.max_queue:
            raise Overloaded(f"server is at capacity: its queue is full ({self.active} streams, {self.queued} "
                             "waiting); retry shortly", retry_after_s=1)
        loop = asyncio.get_running_loop()
        waiter = _Waiter(loop.create_future(), fits)
        self._waiters.append(waiter)
        deadline = loop.time() + self.timeout_s
        try:
            while not waiter.granted.done():
                left = deadline - loop.time()
                if left <= 0:
                    raise Overloaded(self._gave_up(), retry_after_s=2)
                # A release grants at once; the timeout re-asks the rates (none to ask: only the deadline).
                await asyncio.wait((waiter.granted,), timeout=min(left, RECHECK_S) if fits else left)
                self._grant()
        except BaseException:  # gave up or cancelled (its client left): out of the line, nothing held
            if waiter in self._waiters:
                self._waiters.remove(waiter)
                self._grant()  # the one behind may go now
            elif waiter.granted.done():
                self._release()  # granted just as it gave up: pass the slot on
            raise

    def _gave_up(self) -> str:
        if self._held:
            return (f"waited {self.timeout_s:g} s in the queue for room at the measured rates "
                    f"({_reason(self._held)}); retry later")
        return f"waited {self.timeout_s:g} s in the queue for a free stream ({self.active} streams); retry later"

    def _grant(self) -> None:
        """Admit from the front of the line while a slot is free and the front request fits; in order, so
        one the rates cannot take yet holds back those behind it (a long file never waits forever)."""
        self._held = False
        while self._waiters and self.active < self.max_active:
            head = self._waiters[0]
            if head.fits is not None and (why := head.fits()):
                self._held = why
                return
            self._waiters.popleft()
            self.active += 1
            head.granted.set_result(None)

    def _release(self) -> None:
        """Free a slot, and offer it to the line."""
        self.active -= 1
        self._grant()
