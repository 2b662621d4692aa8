"""One pipeline for both transports, and capacity on playback deadlines, against real `lyre serve` processes."""

from __future__ import annotations

import asyncio
import base64
import json
import time
from typing import Any

import httpx
import pytest
from websockets.asyncio.client import connect

from lyre.bench.clients import Job, Result, make_transport
from polling import eventually
from serving import running_server

pytestmark = pytest.mark.slow

def _uncut(done: dict[str, Any]) -> dict[str, Any]:
    """A context's done without the segments it names as cut (the demo model runs each to its max_tokens)."""
    return {k: v for k, v in done.items() if k != "cut_segments"}


def _context(transcript: str, more: bool, **extra: Any) -> str:
    return json.dumps({"context_id": "reply", "voice": {"mode": "id", "id": "tara"}, "transcript": transcript,
                       "continue": more, **extra})


def test_a_context_holds_its_stream_for_its_whole_reply_and_http_meanwhile_gets_429() -> None:
    sentences = ["The first sentence arrives now. ", "A second follows a second later. ", "And the last one."]
    with running_server("--max-streams", "1", "--max-queue", "0", "--max-seq-len", "512") as server:

        async def main() -> tuple[list[dict[str, Any]], list[int]]:
            statuses: list[int] = []
            async with connect(server.ws_url + "/v1/tts/websocket") as ws, httpx.AsyncClient() as http:
                async def receive() -> list[dict[str, Any]]:
                    messages = []
                    while not (message := json.loads(await ws.recv()))["done"]:
                        messages.append(message)
                    return [*messages, message]

                receiving = asyncio.create_task(receive())
                for i, sentence in enumerate(sentences):  # three sentences over two seconds
                    await ws.send(_context(sentence, i < 2, max_tokens=42, seed=1))
                    r = await http.post(f"{server.url}/v1/audio/speech", timeout=30,
                                        json={"input": "Me too.", "max_tokens": 14, "response_format": "pcm"})
                    statuses.append(r.status_code)
                    if i < 2:
                        await asyncio.sleep(1.0)
                return await receiving, statuses

        messages, statuses = asyncio.run(main())
    assert statuses == [429, 429, 429]
    assert [m["type"] for m in messages[:-1]] == ["chunk"] * (len(messages) - 1)
    assert _uncut(messages[-1]) == {"type": "done", "context_id": "reply", "done": True}
    pcm = b"".join(base64.b64decode(m["data"]) for m in messages[:-1])
    assert len(pcm) >= 3 * 2 * 2048  # every sentence was spoken (at least a frame each)


def test_when_streams_fall_behind_their_listeners_new_requests_get_429() -> None:
    # Listeners taken to play 200 times faster than real time: no device keeps up with that.
    with running_server("--max-streams", "4", "--playback-rate", "200", "--max-seq-len", "1024") as server:
        with httpx.Client(timeout=60) as http, http.stream(
                "POST", f"{server.url}/v1/audio/speech",
                json={"input": "A long reply that falls behind.", "max_tokens": 700, "response_format": "pcm"}) as first:
            assert first.status_code == 200
            chunks = first.iter_bytes()
            next(chunks)  # playback has started: from now on the stream has a deadline it cannot meet
            assert eventually(lambda: server.metric("lyre_engine_streams_behind") >= 1)
            refused = http.post(f"{server.url}/v1/audio/speech",  # marked live: refused, not queued
                                json={"input": "And me?", "max_tokens": 14, "priority": "realtime"})
            assert refused.status_code == 429 and "falling behind" in refused.json()["error"]["message"]
            assert refused.headers["retry-after"] == "1"
            started = time.monotonic()
            more = [len(next(chunks)) for _ in range(4)]  # the stream already running carries on
            assert all(more) and time.monotonic() - started < 60
        assert server.metric("lyre_engine_deadline_misses_total") >= 1


async def _at_once(url: str, streams: int) -> list[Result]:
    """``streams`` speech requests sent together, each on its own connection, by the bench's HTTP client."""
    transport = make_transport(url, "http", api_key=None, timeout_s=60, pooled=True)
    try:
        jobs = [Job(f"Caller number {i} says hello.", "tara", 70, i) for i in range(streams)]
        return list(await asyncio.gather(*(transport.channel().speak(job) for job in jobs)))
    finally:
        await transport.aclose()


async def _live_at_once(url: str, streams: int) -> list[httpx.Response]:
    """``streams`` speech requests marked live (``"priority": "realtime"``) sent together."""
    async with httpx.AsyncClient(timeout=60) as http:
        return list(await asyncio.gather(*(http.post(f"{url}/v1/audio/speech", json={
            "input": f"Caller number {i} says hello.", "max_tokens": 70, "seed": i, "response_format": "pcm",
            "priority": "realtime"}) for i in range(streams))))


def test_by_default_a_live_stream_the_measured_rates_cannot_serve_is_refused_and_told_when_to_retry() -> None:
    # Listeners taken to play 4 times faster than real time: the rates this CPU measures serve one such stream
    # at most, whatever its speed (two need 8 real-time streams' worth of codec and engine). Requests not
    # marked live wait for room instead (tests/server/test_speech_queue.py).
    with running_server("--playback-rate", "4", "--max-seq-len", "512") as server:
        answers = asyncio.run(_live_at_once(server.url, 4))
        refused = [r for r in answers if r.status_code != 200]
        served = [r for r in answers if r.status_code == 200]
        assert served and all(r.content for r in served)  # the first is alone, and always admitted
        assert refused and all(r.status_code == 429 for r in refused)
        for r in refused:
            assert "of the device at the measured rates" in r.json()["error"]["message"]
            assert r.headers["retry-after"] == "1"
        counted = httpx.get(f"{server.url}/metrics", timeout=10).text
        assert f'lyre_errors_total{{kind="overloaded"}} {len(refused)}.0' in counted
    with running_server("--playback-rate", "4", "--max-seq-len", "512", "--no-admit-on-rates") as server:
        results = asyncio.run(_at_once(server.url, 4))  # admitted up to --max-streams, whatever the rates say
        assert [r.error for r in results] == [None] * 4 and all(r.chunks for r in results)
