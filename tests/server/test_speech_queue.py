"""`POST /v1/audio/speech` not marked live waits in the admission queue; a live one is refused at once
(lyre.server.admission), against real `lyre serve` processes."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest

from polling import eventually
from serving import Server, running_server

pytestmark = pytest.mark.slow


_LONG = " ".join(f"This is sentence number {i} of a long reply." for i in range(8))


def _bucket(server: Server, name: str, le: str) -> float:
    """A histogram's cumulative count at the bucket ``le``, from /metrics."""
    text = httpx.get(f"{server.url}/metrics", timeout=10).text
    return next(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
                if line.startswith(f'{name}_bucket{{le="{le}"}}'))


def _idle(server: Server) -> bool:
    return server.metric("lyre_queued_requests") == 0 and server.metric("lyre_active_streams") == 0


async def _speak(url: str, **extra: Any) -> tuple[int, bytes]:
    body = {"input": "Caller number one says hello.", "max_tokens": 70, "response_format": "pcm", **extra}
    async with httpx.AsyncClient(timeout=120) as http:
        r = await http.post(f"{url}/v1/audio/speech", json=body)
        return r.status_code, r.content


def test_plain_requests_the_rates_cannot_take_now_wait_their_turn_and_live_ones_are_refused() -> None:
    # Listeners taken to play 200 times faster than real time: the measured rates serve one such stream at most
    # (the one alone is always admitted), so three of four sent together were refused at once; not marked live,
    # they now wait for room, and a request marked live is still refused.
    with running_server("--playback-rate", "200", "--max-seq-len", "512") as server:
        async def together() -> list[tuple[int, bytes]]:
            return list(await asyncio.gather(*(_speak(server.url, seed=i) for i in range(4))))

        answers = asyncio.run(together())
        assert [status for status, _ in answers] == [200] * 4
        assert all(audio for _, audio in answers)
        assert server.metric("lyre_queue_wait_seconds_count") == 4
        assert _bucket(server, "lyre_queue_wait_seconds", "0.025") < 4  # some waited for room
        assert eventually(lambda: _idle(server))

        with httpx.Client(timeout=60) as http, http.stream(
                "POST", f"{server.url}/v1/audio/speech",
                json={"input": _LONG, "max_tokens": 250, "response_format": "pcm"}) as first:
            assert first.status_code == 200, first.read()
            chunks = first.iter_bytes()  # kept: an iterator dropped closes the response
            next(chunks)  # it plays: its listener counts
            refused = http.post(f"{server.url}/v1/audio/speech",
                                json={"input": "And me?", "max_tokens": 14, "priority": "realtime"})
            assert refused.status_code == 429 and refused.headers["retry-after"] == "1"
            assert "server is at capacity" in refused.json()["error"]["message"]
        assert eventually(lambda: _idle(server))


def test_a_full_queue_is_refused_naming_it_and_a_waiter_that_leaves_frees_its_place() -> None:
    with running_server("--max-streams", "1", "--max-queue", "1", "--no-admit-on-rates",
                        "--max-seq-len", "1024") as server:

        async def main() -> None:
            async with httpx.AsyncClient(timeout=60) as http, http.stream(
                    "POST", f"{server.url}/v1/audio/speech",
                    json={"input": "A long reply.", "max_tokens": 700, "response_format": "pcm"}) as first:
                assert first.status_code == 200
                waiter = asyncio.create_task(_speak(server.url))
                assert await asyncio.to_thread(eventually, lambda: server.metric("lyre_queued_requests") == 1, 30)
                status, body = await _speak(server.url)
                assert status == 429 and b"queue is full" in body
                waiter.cancel()  # its client goes away while it waits
                with pytest.raises(asyncio.CancelledError):
                    await waiter
                assert await asyncio.to_thread(eventually, lambda: server.metric("lyre_queued_requests") == 0)
                assert server.metric("lyre_active_streams") == 1  # the first still plays

        asyncio.run(main())
        assert eventually(lambda: _idle(server), 30)
