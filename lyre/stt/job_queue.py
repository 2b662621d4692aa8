"""The speech-to-text worker's queue: each session's jobs in order, the sessions taken in turn.

    queue = JobQueue(max_pending=64, policy=BatchLimits(max_batch=4, max_wait_ms=10))
    queue.put(job)              # on the event loop: TranscriberBusy when full, TranscriberClosed once closed
    batch = queue.take()        # on the worker thread: blocks for the next batch; None once closed
    queue.discard(job)          # the caller gave up: the job goes unless it was taken
    jobs = queue.close()        # the jobs still queued, for their callers to be told

Jobs wait in one queue per session and are taken round-robin, so a session
sending many jobs delays the others by at most one job each. Final passes go
before partials: a partial only previews text its final will bring anyway,
while a final is what a user waits on at the end of a turn (benchmarks/stt.py
measured finals waiting behind other sessions' partials). A partial (or an
alignment) is taken with other sessions' jobs of its kind, up to the policy's
``max_batch``, waiting for them until ``max_wait_ms`` after it was queued.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import deque
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field

import numpy as np

from lyre.common.batching import BatchLimits
from lyre.stt.whisper import TranscribeOptions

__all__ = ["Job", "JobQueue", "TranscriberBusy", "TranscriberClosed"]


class TranscriberBusy(RuntimeError):
    """The queue is full; try again later."""


class TranscriberClosed(RuntimeError):
    """The transcriber is shut down."""


@dataclass(eq=False)
class Job:
    """One pass a caller waits on: its audio, what kind of pass, and the future that gets its result."""

    session: Hashable
    audio: np.ndarray  # float32, 16 kHz mono
    future: asyncio.Future
    loop: asyncio.AbstractEventLoop
    options: TranscribeOptions | None = None  # a final pass's; None: a partial or an alignment
    language: str | None = None  # partials and alignments
    words: list[str] | None = None  # an alignment's
    enqueued: float = field(default_factory=time.perf_counter)

    @property
    def kind(self) -> str:
        return "final" if self.options is not None else "align" if self.words is not None else "partial"

    @property
    def partial(self) -> bool:
        return self.kind == "partial"


class JobQueue:
    """Jobs by session, taken in turn; see the module docstring. Safe to use from any thread."""

    def __init__(self, max_pending: int, policy: BatchLimits) -> None:
        self.max_pending = max_pending
        self.policy = policy
        self._queues: dict[Hashable, deque[Job]] = {}
        self._turns: deque[Hashable] = deque()  # sessions with queued jobs, in round-robin order
        self._pending = 0
        self._cond = threading.Condition()
        self._closed = False
        self._wait_total = self._wait_max = 0.0

    def put(self, job: Job) -> None:
        """Queue ``job`` behind its session's others; TranscriberBusy past ``max_pending``, TranscriberClosed
        once closed."""
        with self._cond:
            if self._closed:
                raise TranscriberClosed("the speech-to-text worker is shut down")
            if self._pending >= self.max_pending:
                raise TranscriberBusy(f"the speech-to-text queue is full ({self.max_pending} jobs)")
            queue = self._queues.setdefault(job.session, deque())
            if not queue:
                self._turns.append(job.session)
            queue.append(job)
            self._pending += 1
            self._cond.notify()

    def discard(self, job: Job) -> None:
        """Drop ``job`` if it is still queued (a job already taken runs to its end)."""
        with self._cond:
            queue = self._queues.get(job.session)
            if queue and job in queue:
                queue.remove(job)
                self._pending -= 1
                if not queue:
                    del self._queues[job.session]
                    self._turns.remove(job.session)

    def take(self) -> list[Job] | None:
        """The next session's job; for a partial, more sessions' partials up to the policy. Blocks until
        there is one; None once the queue is closed."""
        with self._cond:
            while not self._turns and not self._closed:
                self._cond.wait()
            if self._closed:
                return None
            first = self._pop_turn(lambda job: job.kind == "final") or self._pop_turn(lambda job: True)
            batch = [first]
            if first.kind != "final" and self.policy.max_batch > 1:  # partials batch; so do alignments
                deadline = first.enqueued + self.policy.max_wait_ms / 1000
                while len(batch) < self.policy.max_batch:
                    taken = {j.session for j in batch}  # one job per session: a session's jobs go in order
                    job = self._pop_turn(lambda job: job.kind == first.kind and job.session not in taken)
                    if job is not None:
                        batch.append(job)
                        continue
                    remaining = deadline - time.perf_counter()
                    if remaining <= 0 or self._closed:
                        break
                    self._cond.wait(remaining)
            now = time.perf_counter()
            for job in batch:
                wait = now - job.enqueued
                self._wait_total += wait
                self._wait_max = max(self._wait_max, wait)
            return batch

    def close(self) -> list[Job]:
        """Refuse new jobs and wake the worker; the jobs that were still queued are returned, to be failed."""
        with self._cond:
            self._closed = True
            jobs = [job for queue in self._queues.values() for job in queue]
            self._queues.clear()
            self._turns.clear()
            self._pending = 0
            self._cond.notify_all()
        return jobs

    def stats(self) -> dict[str, int | float]:
        """What the queue keeps of `STTStats`: jobs pending, and the time taken jobs waited (total, longest)."""
        with self._cond:
            return {"pending": self._pending, "queue_wait_total_s": self._wait_total,
                    "queue_wait_max_s": self._wait_max}

    def _pop_turn(self, wanted: Callable[[Job], bool]) -> Job | None:
        """Pop the head job of the first session in turn whose head is ``wanted``; it goes to the back."""
        for session in list(self._turns):
            queue = self._queues[session]
            if not wanted(queue[0]):
                continue
            job = queue.popleft()
            self._pending -= 1
            self._turns.remove(session)
            if queue:
                self._turns.append(session)
            else:
                del self._queues[session]
            return job
        return None
