"""A closed-loop stream refused by the server waits the server's Retry-After before its next request."""

from __future__ import annotations

import asyncio

from lyre.bench.clients import RETRY_AFTER_MAX_S, Channel, Job, Result, retry_after
from lyre.bench.load import ChannelPool, JobSource, LevelPlan, run_level


def test_retry_after_reads_seconds_and_falls_back_to_one_second() -> None:
    assert retry_after("3", 429) == 3.0
    assert retry_after(" 2 ", 503) == 2.0
    assert retry_after(None, 429) == 1.0
    assert retry_after("Wed, 21 Oct 2026 07:28:00 GMT", 503) == 1.0  # a date: not read, the default
    assert retry_after("-5", 429) == 1.0
    assert retry_after("86400", 429) == RETRY_AFTER_MAX_S  # a stream is not parked for a day
    assert retry_after("3", 500) is None and retry_after(None, 400) is None  # not a refusal: no wait


class _Refusing(Channel):
    """Refuses every other request with a Retry-After of ``wait_s``; the rest complete at once."""

    def __init__(self, wait_s: float) -> None:
        self.wait_s = wait_s
        self.sent: list[float] = []

    async def speak(self, job: Job) -> Result:
        loop = asyncio.get_running_loop()
        self.sent.append(loop.time())
        if len(self.sent) % 2:
            return Result(error="http_429", retry_after_s=self.wait_s)
        return Result(e2e_s=0.0)


class _OneChannel:
    """A transport that hands out the one channel under test."""

    def __init__(self, channel: Channel) -> None:
        self._channel = channel

    def channel(self) -> Channel:
        return self._channel

    async def aclose(self) -> None:
        pass


def test_a_refused_stream_waits_its_retry_after_before_its_next_request() -> None:
    channel = _Refusing(wait_s=0.3)
    plan = LevelPlan(mode="concurrency", load=1, warmup=0, duration_s=30.0, max_requests=4)
    records = asyncio.run(run_level(plan, ChannelPool(_OneChannel(channel)),  # type: ignore[arg-type]
                                    JobSource(["Hello."], "tara", 14, None)))
    assert [r.result.error for r in records] == ["http_429", None, "http_429", None]
    gaps = [b - a for a, b in zip(channel.sent, channel.sent[1:])]
    assert 0.29 <= gaps[0] < 0.55  # after a refusal: its wait
    assert gaps[1] < 0.3  # after a completed request: at once, as a closed loop does
    assert gaps[2] >= 0.29
