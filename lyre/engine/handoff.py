"""What passes between the event loops and the engine's thread, both ways.

`Outbox`: each request's tokens, and its end, for its stream on its own
loop; queued under the engine's lock as a step is booked and handed over in
one thread-safe call per loop (`Outbox.flush`), so a step wakes each loop
once, not once per token. `StepOps`: work an event loop asks the engine's
thread to do between two steps (under its lock, or in slices without it),
and the futures its callers await.
"""

from __future__ import annotations

import asyncio
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable, Iterator

from lyre.engine.sequence import FinishReason, Request, RequestStatus
from lyre.engine.stream import RequestStream
from lyre.common.loops import call_soon_per_loop, settle_futures

__all__ = ["Outbox", "StepOps"]

_Delivery = tuple[RequestStream, list[int], bool, "BaseException | None"]


class Outbox:
    """The open streams, and what is queued for them; every method but `flush` runs under ``lock``."""

    def __init__(self, lock: threading.Condition) -> None:
        self._lock = lock
        # Weak: a stream nobody holds is collected, and its finalizer aborts the request.
        self._streams: weakref.WeakValueDictionary[str, RequestStream] = weakref.WeakValueDictionary()
        self._queued: list[tuple[asyncio.AbstractEventLoop, _Delivery]] = []

    def open(self, req: Request, abort: Callable[[str], None]) -> RequestStream:
        """The stream ``req``'s tokens will go to (on the running event loop)."""
        stream = RequestStream(abort, req)
        self._streams[req.request_id] = stream
        return stream

    def send(self, req: Request, tokens: list[int], error: BaseException | None = None) -> None:
        """Queue a step's tokens for the request's stream, with its end once it has finished."""
        stream = self._streams.pop(req.request_id, None) if req.finished else self._streams.get(req.request_id)
        if stream is not None and (tokens or req.finished):
            self._queued.append((stream.loop, (stream, tokens, req.finished, error)))

    def fail_all(self, error: BaseException) -> None:
        """End every open stream with ``error``, from this table alone (the scheduler may be what failed)."""
        for stream in list(self._streams.values()):
            req = stream.request
            if not req.finished:
                req.status, req.finish_reason = RequestStatus.FINISHED, FinishReason.ERROR
            self._queued.append((stream.loop, (stream, [], True, error)))
        self._streams.clear()

    def flush(self) -> None:
        """Hand what is queued to the event loops (takes the lock itself)."""
        with self._lock:
            queued, self._queued = self._queued, []
        call_soon_per_loop(queued, _deliver_all)


class StepOps:
    """Work queued for the engine's thread between two steps. Queued and settled under the engine's lock;
    a sliced job's slices run without it."""

    def __init__(self) -> None:
        self._queue: deque[tuple[Callable[[], None], asyncio.AbstractEventLoop, asyncio.Future[None]]] = deque()
        self._jobs: deque[tuple[Iterator[None], asyncio.AbstractEventLoop, asyncio.Future[None]]] = deque()

    def __bool__(self) -> bool:
        return bool(self._queue or self._jobs)

    def add(self, op: Callable[[], None]) -> asyncio.Future[None]:
        """Queue ``op``; the future (on the running loop) settles once it has run, with what it raised."""
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._queue.append((op, done.get_loop(), done))
        return done

    def add_sliced(self, job: Iterator[None]) -> asyncio.Future[None]:
        """Queue ``job``, run one ``next`` at a time; the future settles once it is exhausted, or with what it
        raised."""
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._jobs.append((job, done.get_loop(), done))
        return done

    def run_all(self, refuse: BaseException | None = None) -> None:
        """Run every queued op (or, with ``refuse``, fail each, and every sliced job, with it) and settle its
        caller."""
        settled: list[tuple[asyncio.AbstractEventLoop, asyncio.Future[None], BaseException | None]] = []
        while self._queue:
            op, loop, done = self._queue.popleft()
            outcome = refuse
            if refuse is None:
                try:
                    op()
                except Exception as exc:  # the caller gets it; the engine carries on
                    outcome = exc
            settled.append((loop, done, outcome))
        while refuse is not None and self._jobs:
            job, loop, done = self._jobs.popleft()
            try:
                job.close()  # a job begun settles what it holds (its finally clauses run)
            except Exception:  # its own cleanup failed: its caller still hears why the job was dropped
                pass
            settled.append((loop, done, refuse))
        settle_futures(settled)

    def run_slice(self, lock: threading.Condition, budget_s: float) -> None:
        """Slices of the oldest sliced job until ``budget_s`` has passed (at least one), without ``lock`` held
        (taken only to pick and settle the job)."""
        with lock:
            if not self._jobs:
                return
            job, loop, done = self._jobs[0]
        outcome: BaseException | None = None
        until = time.perf_counter() + budget_s
        try:
            while True:
                next(job)
                if time.perf_counter() >= until:
                    return
        except StopIteration:
            pass
        except Exception as exc:  # the caller gets it; the engine carries on
            outcome = exc
        with lock:
            self._jobs.popleft()
            settle_futures([(loop, done, outcome)])


def _deliver_all(deliveries: list[_Delivery]) -> None:
    for stream, tokens, ended, error in deliveries:
        stream._deliver(tokens, ended, error)
