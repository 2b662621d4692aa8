"""Conversations through a fleet: a real redis-server, a ``lyre serve --no-tts --stt`` (it can transcribe but not
talk), a ``lyre serve --stt --llm-url ...`` (it can talk, thinking elsewhere) and a ``lyre route``.

A /v1/realtime socket is a conversation unless it asks for transcription; it goes only to a server that can hold
one, and a server that cannot refuses it rather than open a transcription session in its place.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator

import httpx
import pytest
import redis
from websockets.asyncio.client import connect
from websockets.exceptions import InvalidStatus

from fleet_processes import Process, Redis, close_all, route, serve, wait_ready
from lyre.fleet import ServerRecord, server_key
from polling import eventually

pytestmark = pytest.mark.slow


class Fleet:
    def __init__(self, redis_url: str, listener: Process, talker: Process, router: Process) -> None:
        self.redis_url, self.listener, self.talker, self.router = redis_url, listener, talker, router

    def record(self, server: Process) -> ServerRecord:
        client = redis.Redis.from_url(self.redis_url)
        try:
            return ServerRecord.from_json(client.get(server_key(server.url)))
        finally:
            client.close()


@pytest.fixture(scope="module")
def fleet() -> Iterator[Fleet]:
    store = Redis().start()
    # The think step's endpoint is never reached here: a session opens without asking it anything.
    listener = serve(store.url, "--no-tts", "--stt", "--max-streams", "1")
    talker = serve(store.url, "--stt", "--llm-url", "http://127.0.0.1:9/v1", "--no-smart-turn", "--max-streams", "1")
    router = route(store.url)
    try:
        wait_ready([listener, talker])
        wait_ready([router])
        f = Fleet(store.url, listener, talker, router)
        yield f
    finally:
        close_all((router, talker, listener))
        store.stop()


async def _first_event(url: str) -> tuple[str | None, dict]:  # type: ignore[type-arg]
    """The server that took the socket (named by the router) and the first event it sent."""
    async with connect(url) as ws:
        return ws.response.headers.get("x-lyre-server"), json.loads(await asyncio.wait_for(ws.recv(), 30))


def test_a_server_advertises_conversations_only_when_it_can_hold_them(fleet: Fleet) -> None:
    assert fleet.record(fleet.listener).services == ("stt",)
    assert fleet.record(fleet.talker).services == ("tts", "stt", "agent")  # thinks with --llm-url: no chat


def test_the_router_sends_a_conversation_only_to_a_server_that_can_hold_one(fleet: Fleet) -> None:
    base = fleet.router.url.replace("http", "ws") + "/v1/realtime"

    async def run() -> tuple[list[tuple[str, str]], set[str]]:
        talks = [await _first_event(f"{base}?model=lyre&session=talk-{i}") for i in range(8)]
        listens = {(await _first_event(f"{base}?intent=transcription&session=t-{i}"))[0] for i in range(16)}
        return [(server, event["type"]) for server, event in talks], listens

    talks, listens = asyncio.run(run())
    assert talks == [(fleet.talker.url, "session.created")] * 8
    assert listens == {fleet.listener.url, fleet.talker.url}


def test_a_server_that_cannot_talk_refuses_a_conversation_and_says_how_to_transcribe(fleet: Fleet) -> None:
    base = fleet.listener.url.replace("http", "ws") + "/v1/realtime"

    async def refused() -> InvalidStatus:
        with pytest.raises(InvalidStatus) as info:
            async with connect(base + "?model=lyre"):
                pass
        return info.value

    refusal = asyncio.run(refused())
    assert refusal.response.status_code == 404
    message = json.loads(refusal.response.body)["error"]["message"]
    assert "cannot hold a conversation" in message and "intent=transcription" in message
    _, event = asyncio.run(_first_event(base + "?intent=transcription"))
    assert event["type"] == "transcription_session.created"


def test_with_no_server_able_to_talk_the_router_says_so(fleet: Fleet) -> None:
    fleet.talker.stop()
    assert eventually(lambda: fleet.talker.url not in _ring(fleet), timeout=15)

    async def refused() -> InvalidStatus:
        with pytest.raises(InvalidStatus) as info:
            async with connect(fleet.router.url.replace("http", "ws") + "/v1/realtime?model=lyre"):
                pass
        return info.value

    refusal = asyncio.run(refused())
    assert refusal.response.status_code == 503
    assert "conversation" in json.loads(refusal.response.body)["error"]["message"]


def _ring(fleet: Fleet) -> list[str]:
    return httpx.get(fleet.router.url + "/health", timeout=5).json()["ring"]
