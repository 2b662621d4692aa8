"""A real fleet on loopback: redis-server, three `lyre serve --register` processes, two `lyre route` replicas.

The tests share one fleet and run in file order: the last ones stop Redis
and kill a server.
"""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
import threading
from collections import Counter
from collections.abc import Iterator

import httpx
import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosedError

from fleet_processes import Process, Redis, close_all, route, serve, wait_ready
from lyre.models.demo import DemoPaths
from lyre.orpheus import SAMPLES_PER_FRAME
from polling import eventually

pytestmark = pytest.mark.slow

ADMIN = "hot-admin"
SERVER_ADMIN = "adapter-admin"
SHORT = {"max_tokens": 28, "seed": 1, "trim_silence": False}  # 4 frames
LOAD_FACTOR = 1.25


class Fleet:
    def __init__(self, redis: Redis, servers: list[Process], routers: list[Process]) -> None:
        self.redis, self.servers, self.routers = redis, servers, routers

    def health(self, router: int = 0) -> dict:  # type: ignore[type-arg]
        return httpx.get(self.routers[router].url + "/health", timeout=5).json()

    def ring(self, router: int = 0) -> list[str]:
        return self.health(router)["ring"]

    def where(self, sessions: list[str], router: int = 0) -> dict[str, str]:
        """The server each session lands on, from real proxied requests."""
        with httpx.Client(base_url=self.routers[router].url, timeout=10) as client:
            out = {}
            for session in sessions:
                r = client.get("/v1/audio/voices", headers={"x-lyre-session": session})
                assert r.status_code == 200, r.text
                out[session] = r.headers["x-lyre-server"]
            return out


@pytest.fixture(scope="module")
def fleet() -> Iterator[Fleet]:
    redis = Redis().start()
    # Three servers share two cores here: each admits up to --max-streams (not on its measured rates), so the
    # routing under test is not mixed with refusals.
    servers = [serve(redis.url, "--max-streams", "4", "--admin-key", SERVER_ADMIN, "--no-admit-on-rates")
               for _ in range(3)]
    routers = [route(redis.url, "--admin-key", ADMIN, "--load-factor", str(LOAD_FACTOR)) for _ in range(2)]
    try:
        wait_ready(servers)
        wait_ready(routers)
        f = Fleet(redis, servers, routers)
        for i in range(2):
            assert eventually(lambda i=i: len(f.ring(i)) == 3, timeout=10), f.health(i)
        yield f
    finally:
        close_all(routers + servers)
        redis.stop()


def _speak(router: Process, voice: str, **extra: object) -> httpx.Response:
    return httpx.post(router.url + "/v1/audio/speech", timeout=60,
                      json={"input": "Hello there.", "voice": voice, "response_format": "pcm", **SHORT, **extra})


def test_the_same_voice_reaches_the_same_server_through_either_router(fleet: Fleet) -> None:
    answers = [_speak(fleet.routers[i % 2], "tara") for i in range(4)]
    assert all(r.status_code == 200 for r in answers), [r.text for r in answers]
    assert all(len(r.content) == 4 * SAMPLES_PER_FRAME * 2 for r in answers)
    assert len({r.headers["x-lyre-server"] for r in answers}) == 1
    assert answers[0].headers["x-lyre-server"] in fleet.ring()


def test_two_router_replicas_route_every_session_alike_and_use_every_server(fleet: Fleet) -> None:
    sessions = [f"user-{i}" for i in range(60)]
    first, second = fleet.where(sessions, 0), fleet.where(sessions, 1)
    assert first == second
    assert set(first.values()) == {s.url for s in fleet.servers}


def test_the_websocket_handshake_names_its_server_and_audio_comes_back(fleet: Fleet) -> None:
    async def run() -> tuple[str, list[str]]:
        async with connect(fleet.routers[0].url.replace("http", "ws") + "/v1/tts/websocket?voice=tara") as ws:
            server = ws.response.headers["x-lyre-server"]
            await ws.send(json.dumps({"context_id": "c1", "voice": {"mode": "id", "id": "tara"},
                                      "transcript": "Hi.", "continue": False, **SHORT}))
            kinds = [json.loads(m)["type"] async for m in _until_done(ws)]
            return server, kinds

    server, kinds = asyncio.run(run())
    assert server == _speak(fleet.routers[1], "tara").headers["x-lyre-server"]
    assert kinds[-1] == "done" and "chunk" in kinds


def test_bad_session_ids_and_admin_calls_get_clear_errors(fleet: Fleet) -> None:
    r = httpx.get(fleet.routers[0].url + "/v1/models", headers={"x-lyre-session": "x" * 300})
    assert r.status_code == 400 and "session id" in r.json()["error"]["message"]
    r = httpx.put(fleet.routers[0].url + "/v1/router/hot-voices/tara", json={"placements": 2})
    assert r.status_code == 401
    r = httpx.put(fleet.routers[0].url + "/v1/router/hot-voices/tara", json={"placements": 0},
                  headers={"authorization": f"Bearer {ADMIN}"})
    assert r.status_code == 422


def test_a_hot_voice_spreads_over_its_placements_and_every_router_agrees(fleet: Fleet) -> None:
    auth = {"authorization": f"Bearer {ADMIN}"}
    r = httpx.put(fleet.routers[0].url + "/v1/router/hot-voices/mia", json={"placements": 3}, headers=auth)
    assert r.status_code == 200, r.text
    assert eventually(lambda: fleet.health(1)["hot_voices"] == {"mia": 3}, timeout=5)
    listed = httpx.get(fleet.routers[1].url + "/v1/router/hot-voices", headers=auth).json()["voices"]
    assert listed[0]["voice"] == "mia" and len(listed[0]["servers"]) == 3
    status = subprocess.run([sys.executable, "-m", "lyre.cli", "route", "status", "--redis", fleet.redis.url],
                            capture_output=True, text=True, timeout=60)
    assert status.returncode == 0, status.stderr
    assert "mia: 3 placements" in status.stdout and all(s.url in status.stdout for s in fleet.servers)
    try:
        # Held-open sockets for mia: least load first, so they go to every server its placements land on.
        homes = set(listed[0]["servers"])
        servers = asyncio.run(_hold_sockets(fleet.routers[0], ["mia"] * 6))
        assert homes <= set(servers)
    finally:
        assert httpx.delete(fleet.routers[0].url + "/v1/router/hot-voices/mia", headers=auth).status_code == 200
    assert eventually(lambda: fleet.health(1)["hot_voices"] == {}, timeout=5)


def test_a_cloned_voice_goes_to_the_placement_whose_server_holds_its_adapter(
        fleet: Fleet, demo: DemoPaths, tmp_path_factory: pytest.TempPathFactory) -> None:
    from adapters import make_adapter

    folder = make_adapter(tmp_path_factory.mktemp("clone"), demo.model, seed=0, speaker="tara")
    auth = {"authorization": f"Bearer {ADMIN}"}
    r = httpx.put(fleet.routers[0].url + "/v1/router/hot-voices/clone", json={"placements": 4}, headers=auth)
    homes = r.json()["servers"]
    holder = next((url for url in homes if url != homes[0]), homes[0])  # not the first placement, if it can be
    loaded = httpx.post(holder + "/v1/adapters", json={"name": "clone", "path": str(folder)}, timeout=60,
                        headers={"authorization": f"Bearer {SERVER_ADMIN}"})
    assert loaded.status_code == 201, loaded.text
    try:
        for i in range(2):  # its next heartbeat tells every router
            assert eventually(lambda i=i: any(s["url"] == holder and s["adapters"] == ["clone"]
                                              for s in fleet.health(i)["servers"]), timeout=10)
        answers = [_speak(fleet.routers[i % 2], "clone") for i in range(4)]
        assert [r.status_code for r in answers] == [200] * 4, answers[0].text
        assert {r.headers["x-lyre-server"] for r in answers} == {holder}
        assert _router_metric(fleet, 'lyre_router_requests_total{api="/v1/audio/speech",placement="adapter"') >= 2
    finally:
        httpx.delete(fleet.routers[0].url + "/v1/router/hot-voices/clone", headers=auth)
        httpx.delete(holder + "/v1/adapters/clone", headers={"authorization": f"Bearer {SERVER_ADMIN}"})


def test_bounded_load_keeps_max_over_average_at_most_c_under_a_skewed_voice_mix(fleet: Fleet) -> None:
    # A Zipf-like mix over 6 voices (weights about 1/rank): 36 sockets held open at once, an average of 12.
    assert eventually(lambda: all(s["inflight"] == 0 for s in fleet.health()["servers"]), timeout=5)
    voices = [v for v, n in zip(("tara", "leah", "jess", "leo", "dan", "zac"), (15, 7, 5, 4, 3, 2)) for _ in range(n)]
    servers = asyncio.run(_hold_sockets(fleet.routers[0], voices))
    loads = Counter(servers)
    average = len(voices) / 3
    assert max(loads.values()) <= LOAD_FACTOR * average, loads
    assert len(loads) == 3


def test_a_server_joins_then_drains_finishing_its_stream_while_a_websocket_keeps_its_server(fleet: Fleet) -> None:
    """One extra server for both (a server start is the slow part): it joins, takes a stream, is stopped
    mid-stream (draining at once, the stream finishes, then it leaves); a socket opened before it joined
    keeps its server throughout."""
    before = _websocket_requests(fleet)

    async def run() -> tuple[str, list[str], dict[str, object]]:
        async with connect(fleet.routers[0].url.replace("http", "ws") + "/v1/tts/websocket",
                           additional_headers={"x-lyre-session": "long-call"}) as ws:
            server = ws.response.headers["x-lyre-server"]
            got = await asyncio.to_thread(_join_then_drain, fleet)
            await ws.send(json.dumps({"context_id": "c", "voice": {"mode": "id", "id": "leo"},
                                      "transcript": "Still here.", "continue": False, **SHORT}))
            kinds = [json.loads(m)["type"] async for m in _until_done(ws)]
            return server, kinds, got

    server, kinds, got = asyncio.run(run())
    assert got["stream"] == {"server": got["url"], "bytes": 40 * SAMPLES_PER_FRAME * 2}
    assert kinds[-1] == "done" and "chunk" in kinds
    after = _websocket_requests(fleet)
    assert {url for url in after if after[url] != before.get(url, 0)} == {server}


def _join_then_drain(fleet: Fleet) -> dict[str, object]:
    extra = serve(fleet.redis.url, "--max-streams", "2")
    try:
        wait_ready([extra])
        assert eventually(lambda: extra.url in fleet.ring() and extra.url in fleet.ring(1), timeout=10)
        session = next(s for s, url in fleet.where([f"d-{i}" for i in range(40)]).items() if url == extra.url)
        got: dict[str, object] = {}
        started = threading.Event()

        def stream() -> None:
            with httpx.stream("POST", fleet.routers[0].url + "/v1/audio/speech", timeout=120,
                              headers={"x-lyre-session": session},
                              json={"input": "A longer answer.", "voice": "dan", "response_format": "pcm",
                                    "max_tokens": 280, "seed": 3, "trim_silence": False}) as r:
                got["server"] = r.headers["x-lyre-server"]
                total = 0
                for chunk in r.iter_bytes():
                    total += len(chunk)
                    started.set()
                got["bytes"] = total

        reader = threading.Thread(target=stream)
        reader.start()
        assert started.wait(60)
        extra.process.send_signal(signal.SIGTERM)
        # Marked draining at once (off the ring) while its stream goes on.
        assert eventually(lambda: extra.url not in fleet.ring(), timeout=5)
        reader.join(120)
        # uvicorn ends a graceful shutdown by raising the signal again on itself.
        assert extra.process.wait(60) in (0, -signal.SIGTERM)
        assert "Traceback" not in extra.output()
        assert eventually(lambda: extra.url not in [s["url"] for s in fleet.health()["servers"]], timeout=5)
        return {"url": extra.url, "stream": got}
    finally:
        extra.close()


def test_without_redis_routers_serve_on_their_last_ring_and_recover(fleet: Fleet) -> None:
    sessions = [f"r-{i}" for i in range(20)]
    before = fleet.where(sessions)
    fleet.redis.stop()
    try:
        for i in range(2):
            assert eventually(lambda i=i: fleet.health(i)["stale_ring"], timeout=10)
        assert fleet.health()["status"] == "stale" and len(fleet.ring()) == 3
        assert fleet.where(sessions) == before
        assert _speak(fleet.routers[1], "tara").status_code == 200
    finally:
        fleet.redis.start()
    for i in range(2):
        assert eventually(lambda i=i: not fleet.health(i)["stale_ring"] and len(fleet.ring(i)) == 3, timeout=15)
    assert fleet.where(sessions) == before


def test_a_killed_server_is_retried_past_then_dropped_by_its_ttl_and_only_its_ids_move(fleet: Fleet) -> None:
    sessions = [f"k-{i}" for i in range(150)]
    before = fleet.where(sessions)
    victim = fleet.servers[2]
    on_victim = [s for s, url in before.items() if url == victim.url]
    retries_before = _router_metric(fleet, "lyre_router_retries_total")

    async def doomed_context() -> list[dict]:  # type: ignore[type-arg]
        async with connect(fleet.routers[0].url.replace("http", "ws") + "/v1/tts/websocket",
                           additional_headers={"x-lyre-session": on_victim[0]}) as ws:
            assert ws.response.headers["x-lyre-server"] == victim.url
            await ws.send(json.dumps({"context_id": "doomed", "voice": {"mode": "id", "id": "zoe"},
                                      "transcript": "This will not finish.", "continue": True,
                                      "max_tokens": 1400, "seed": 4}))
            await ws.send(json.dumps({"context_id": "doomed", "transcript": " Not at all.", "continue": False}))
            messages = []
            with pytest.raises(ConnectionClosedError) as closed:
                async for m in ws:
                    messages.append(json.loads(m))
                    if len(messages) == 1:
                        victim.process.kill()  # no drain, no goodbye
            assert closed.value.rcvd is not None and closed.value.rcvd.code == 1011
            return messages

    # An SSE stream on the victim as well, running when it dies.
    events: list[dict] = []  # type: ignore[type-arg]
    streaming = threading.Event()

    def sse() -> None:
        with httpx.stream("POST", fleet.routers[1].url + "/v1/audio/speech", timeout=60,
                          headers={"x-lyre-session": on_victim[1]},
                          json={"input": "A long one.", "voice": "jess", "stream_format": "sse",
                                "response_format": "pcm", "max_tokens": 1400, "seed": 5}) as r:
            for line in r.iter_lines():
                if line.startswith("data: "):
                    events.append(json.loads(line[6:]))
                    streaming.set()

    reader = threading.Thread(target=sse)
    reader.start()
    assert streaming.wait(60)
    messages = asyncio.run(doomed_context())
    reader.join(60)
    assert events[0]["type"] == "speech.audio.delta"
    assert events[-1]["type"] == "error" and victim.url in events[-1]["error"]["message"]
    assert messages[0]["type"] == "chunk"
    assert messages[-1]["type"] == "error" and messages[-1]["context_id"] == "doomed"
    assert victim.url in messages[-1]["error"]
    # Before its record expires the victim is still on the ring: its ids are retried on the next server.
    answered = fleet.where(on_victim[:5])
    assert victim.url not in answered.values()
    assert _router_metric(fleet, "lyre_router_retries_total") > retries_before
    assert eventually(lambda: victim.url not in fleet.ring() and victim.url not in fleet.ring(1), timeout=10)
    after = fleet.where(sessions)
    moved = [s for s in sessions if after[s] != before[s]]
    assert sorted(moved) == sorted(on_victim)  # the other servers' ids stayed put
    assert 0.15 <= len(moved) / len(sessions) <= 0.55  # about 1/3


async def _until_done(ws: object) -> object:
    async for m in ws:  # type: ignore[attr-defined]
        yield m
        if json.loads(m)["type"] in ("done", "error"):
            return


async def _hold_sockets(router: Process, voices: list[str]) -> list[str]:
    """Open one socket per voice, all at once held open; the server each landed on."""
    base = router.url.replace("http", "ws") + "/v1/tts/websocket?voice="
    sockets = []
    try:
        for voice in voices:
            sockets.append(await connect(base + voice))
        return [ws.response.headers["x-lyre-server"] for ws in sockets]
    finally:
        for ws in sockets:
            await ws.close()


def _websocket_requests(fleet: Fleet) -> dict[str, float]:
    out = {}
    for s in fleet.servers:
        if s.process.poll() is None:
            text = httpx.get(s.url + "/metrics", timeout=5).text
            out[s.url] = sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
                             if line.startswith('lyre_requests_total{api="websocket"'))
    return out


def _router_metric(fleet: Fleet, prefix: str) -> float:
    """The sum of router 0's samples whose line starts with ``prefix`` (a name, or a name and its first labels)."""
    text = httpx.get(fleet.routers[0].url + "/metrics", timeout=5).text
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith(prefix if "{" in prefix else (prefix + "{", prefix + " ")))
