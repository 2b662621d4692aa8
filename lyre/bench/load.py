"""Offering load to one server for one level: N streams back to back, or arrivals at a rate.

Closed loop (``concurrency``): N workers, each with its own channel, send
requests back to back; each worker's first ``warmup`` requests are excluded.
A refused request (429 or 503) counts as sent; its stream then waits the
server's Retry-After before its next, as a client that honours it would
(resending at once would only measure refusals).
Open loop (``rate``): requests arrive at ``rate`` per second with gamma
inter-arrival times (shape ``burstiness``: 1 is Poisson, below 1 burstier),
each on an idle channel or a new one; arrivals in the first ``warmup``
seconds are excluded. Either way a level stops sending ``duration_s`` after
its first measured request or once ``max_requests`` measured requests have
been sent, whichever comes first, and then waits for the requests in flight.
Warm-up is bounded by its own count (or seconds) and the request timeout.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

from lyre.bench.clients import Channel, Job, Result, Transport
from lyre.bench.metrics import Measured

__all__ = ["ChannelPool", "JobSource", "LevelPlan", "Mode", "RequestRecord", "run_level"]

Mode = Literal["concurrency", "rate"]


@dataclass(frozen=True)
class LevelPlan:
    """One level of a sweep; ``warmup`` is requests per worker (concurrency) or seconds (rate)."""

    mode: Mode
    load: float  # streams, or requests per second
    warmup: int
    duration_s: float
    max_requests: int
    burstiness: float = 1.0
    arrival_seed: int = 0


@dataclass(frozen=True)
class JobSource:
    """Request k of every level says text k mod n, so each level (and each server) hears the same sequence."""

    texts: Sequence[str]
    voice: str
    max_tokens: int
    seed: int | None

    def __call__(self, index: int) -> tuple[int, Job]:
        text_index = index % len(self.texts)
        # Seed + k: repeated texts still differ, yet a rerun makes the same requests.
        seed = None if self.seed is None else self.seed + index
        return text_index, Job(self.texts[text_index], self.voice, self.max_tokens, seed)


@dataclass(frozen=True)
class RequestRecord:
    """One request of a level, as sent and as measured."""

    index: int
    text_index: int
    warmup: bool
    sent_at: float  # seconds since the level started
    result: Result

    def measured(self) -> Measured:
        r = self.result
        return Measured(sent_at=self.sent_at, e2e_s=r.e2e_s, chunks=tuple(r.chunks), error=r.error, ttfb_s=r.ttfb_s,
                        leading_silence_s=r.leading_silence_s)


class ChannelPool:
    """Idle channels to one server, reused across requests and levels; new ones made on demand."""

    def __init__(self, transport: Transport) -> None:
        self.transport = transport
        self._idle: list[Channel] = []
        self._all: list[Channel] = []

    def acquire(self) -> Channel:
        if self._idle:
            return self._idle.pop()
        channel = self.transport.channel()
        self._all.append(channel)
        return channel

    def release(self, channel: Channel) -> None:
        self._idle.append(channel)

    async def aclose(self) -> None:
        for channel in self._all:
            await channel.aclose()
        await self.transport.aclose()


class _Level:
    """The shared state of one running level: what has been sent, what has come back."""

    def __init__(self, plan: LevelPlan, jobs: JobSource, on_record: Callable[[RequestRecord], None]) -> None:
        self.plan = plan
        self.jobs = jobs
        self.on_record = on_record
        self.start = time.perf_counter()
        self.records: list[RequestRecord] = []
        self._deadline: float | None = None  # set by the first measured request
        self._measured_sent = 0
        self._next_index = 0

    def claim(self, warmup: bool) -> int | None:
        """The next request's index, or None once the level has sent all it may."""
        if not warmup:
            now = time.perf_counter()
            # The duration bounds the measured requests: a slow warm-up must not eat the window.
            if self._deadline is None:
                self._deadline = now + self.plan.duration_s
            if now >= self._deadline or self._measured_sent >= self.plan.max_requests:
                return None
            self._measured_sent += 1
        index, self._next_index = self._next_index, self._next_index + 1
        return index

    async def send(self, channel: Channel, index: int, warmup: bool) -> Result:
        text_index, job = self.jobs(index)
        sent_at = time.perf_counter() - self.start
        record = RequestRecord(index, text_index, warmup, sent_at, await channel.speak(job))
        self.records.append(record)
        self.on_record(record)
        return record.result


async def _closed_loop(level: _Level, pool: ChannelPool, streams: int) -> None:
    async def worker() -> None:
        channel = pool.acquire()
        try:
            sent = 0
            while (index := level.claim(warmup := sent < level.plan.warmup)) is not None:
                result = await level.send(channel, index, warmup)
                sent += 1
                if result.retry_after_s:
                    await asyncio.sleep(result.retry_after_s)
        finally:
            pool.release(channel)

    await asyncio.gather(*(worker() for _ in range(streams)))


async def _open_loop(level: _Level, pool: ChannelPool) -> None:
    plan = level.plan
    rng = random.Random(plan.arrival_seed)
    shape = plan.burstiness
    scale = 1.0 / (plan.load * shape)  # mean interval shape * scale = 1 / rate
    tasks: set[asyncio.Task[None]] = set()

    async def one(index: int, warmup: bool) -> None:
        channel = pool.acquire()
        try:
            await level.send(channel, index, warmup)
        finally:
            pool.release(channel)

    arrival = level.start
    while True:
        if (wait := arrival - time.perf_counter()) > 0:
            await asyncio.sleep(wait)
        warmup = arrival - level.start < plan.warmup
        if (index := level.claim(warmup)) is None:
            break
        task = asyncio.create_task(one(index, warmup))
        tasks.add(task)
        task.add_done_callback(tasks.discard)
        arrival += rng.gammavariate(shape, scale)
    await asyncio.gather(*tasks)


async def run_level(plan: LevelPlan, pool: ChannelPool, jobs: JobSource,
                    on_record: Callable[[RequestRecord], None] = lambda record: None) -> list[RequestRecord]:
    """Run one level to its end (requests in flight included); the records in the order they were sent."""
    level = _Level(plan, jobs, on_record)
    if plan.mode == "concurrency":
        await _closed_loop(level, pool, int(plan.load))
    else:
        await _open_loop(level, pool)
    return sorted(level.records, key=lambda record: record.index)
