"""HAProxy and nginx in front of real ``lyre serve`` processes, with deploy/haproxy and deploy/nginx's
configurations as shipped (tests/proxy_processes.py puts the fleet's addresses in): a session stays on one
server over HTTP, SSE, both WebSockets and a WebRTC call's set-up and hang-up; audio is not held back; a
killed server's sessions move and the others stay; a draining server takes no new session while its open
streams finish.

Three servers that can hold a conversation (thinking at an endpoint never asked), one HAProxy and one nginx in
front of all three. The tests share them and run in file order: the last two kill one server and drain another.
"""

from __future__ import annotations

import asyncio
import json
import signal
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import httpx
import pytest
from websockets.asyncio.client import connect

from fleet_processes import Process, close_all, wait_ready
from polling import eventually
from proxy_processes import PROXIES, Proxy, binary, start_proxy
from serving import _free_port
from webrtc_peer import Peer

pytestmark = [pytest.mark.slow, pytest.mark.skipif(
    any(binary(kind) is None for kind in PROXIES),
    reason="haproxy or nginx is not installed (scripts/test.sh installs both: apt-get install haproxy nginx)")]

SHORT = {"max_tokens": 28, "seed": 1, "trim_silence": False}  # 4 frames
SESSIONS = [f"s{i}" for i in range(24)]


class Fleet:
    def __init__(self, servers: list[Process], proxies: dict[str, Proxy]) -> None:
        self.servers, self.proxies = servers, proxies

    def where(self, proxy: Proxy, sessions: list[str], via: str = "header") -> dict[str, str]:
        """The server each session lands on, from real requests through ``proxy`` (the header, or ?session=)."""
        out = {}
        with httpx.Client(base_url=proxy.url, timeout=10) as client:
            for session in sessions:
                headers, params = ({"x-lyre-session": session}, {}) if via == "header" else ({}, {"session": session})
                r = client.get("/v1/models", headers=headers, params=params)
                assert r.status_code == 200, (proxy.kind, r.text)
                out[session] = proxy.server_of(r.headers)
        return out


@pytest.fixture(scope="module")
def fleet() -> Iterator[Fleet]:
    servers = []
    for _ in range(3):
        port = _free_port()
        # Three servers share two cores here: admission on the measured rates would refuse what the proxies'
        # routing is tested with, so each admits up to --max-streams.
        cmd = ["-m", "lyre.cli", "serve", "--port", str(port), "--log-level", "warning", "--max-streams", "4",
               "--stt", "--llm-url", "http://127.0.0.1:9/v1", "--no-smart-turn", "--no-admit-on-rates"]
        servers.append(Process([sys.executable, *cmd], f"http://127.0.0.1:{port}").start())
    folder = tempfile.TemporaryDirectory()
    urls = [s.url for s in servers]
    proxies = {kind: start_proxy(kind, urls, Path(folder.name, kind)) for kind in PROXIES}
    try:
        wait_ready(servers)
        wait_ready([p.process for p in proxies.values()])
        f = Fleet(servers, proxies)
        for proxy in proxies.values():  # every server in use (HAProxy's first checks passed)
            assert eventually(lambda p=proxy: set(f.where(p, SESSIONS).values()) == set(urls), timeout=15)
        yield f
        for proxy in proxies.values():
            assert proxy.process.process.poll() is None, proxy.process.output()
    finally:
        close_all([p.process for p in proxies.values()] + servers)
        folder.cleanup()


@pytest.fixture(params=PROXIES)
def proxy(request: pytest.FixtureRequest, fleet: Fleet) -> Proxy:
    return fleet.proxies[request.param]


def _sse_speech(proxy: Proxy, headers: dict[str, str], params: dict[str, str], voice: str = "tara"
                ) -> tuple[str, list[str]]:
    """A speech request streamed as server-sent events: the server that answered, and the events' types."""
    body = {"input": "Hello there.", "voice": voice, "response_format": "pcm", "stream_format": "sse", **SHORT}
    r = httpx.post(proxy.url + "/v1/audio/speech", json=body, headers=headers, params=params, timeout=60)
    assert r.status_code == 200, (proxy.kind, r.text)
    assert r.headers["content-type"].startswith("text/event-stream")
    events = [json.loads(line[5:])["type"] for line in r.text.splitlines() if line.startswith("data:")]
    return proxy.server_of(r.headers), events


def test_a_session_stays_on_one_server_over_http_and_sse(fleet: Fleet, proxy: Proxy) -> None:
    by_header, by_query = fleet.where(proxy, SESSIONS), fleet.where(proxy, SESSIONS, via="query")
    assert by_header == by_query  # the header and the query parameter are one key
    assert len(set(by_header.values())) == 3, by_header  # and different sessions spread
    for session in SESSIONS[:3]:
        server, events = _sse_speech(proxy, {"x-lyre-session": session}, {})
        assert server == by_header[session], session
        assert "speech.audio.delta" in events and events[-1] == "speech.audio.done", events
    # Without a session, the voice is the key (?voice=, which both read; HAProxy reads the JSON body's too).
    with httpx.Client(timeout=10) as client:
        homes = {proxy.server_of(client.get(proxy.url + "/v1/models", params={"voice": "leo"}).headers)
                 for _ in range(4)}
    assert len(homes) == 1, homes
    if proxy.kind == "haproxy":
        assert {_sse_speech(proxy, {}, {}, voice="leo")[0] for _ in range(2)} == homes


def test_both_websockets_stay_with_their_session(fleet: Fleet, proxy: Proxy) -> None:
    sessions = SESSIONS[6:9]
    homes = fleet.where(proxy, sessions)

    async def run(session: str) -> tuple[str, list[str], str, str]:
        first = {"context_id": "c1", "voice": {"mode": "id", "id": "tara"}, "transcript": "Hello there.",
                 "continue": False, **{k: SHORT[k] for k in ("max_tokens", "seed")}}
        async with connect(f"{proxy.ws}/v1/tts/websocket?session={session}") as ws:
            await ws.send(json.dumps(first))
            kinds = []
            while not kinds or kinds[-1] not in ("done", "error"):
                kinds.append(json.loads(await asyncio.wait_for(ws.recv(), 60))["type"])
            tts = proxy.server_of(ws.response.headers)
        async with connect(f"{proxy.ws}/v1/realtime?model=lyre",
                           additional_headers={"x-lyre-session": session}) as ws:
            created = json.loads(await asyncio.wait_for(ws.recv(), 30))["type"]
            realtime = proxy.server_of(ws.response.headers)
        return tts, kinds, realtime, created

    for session in sessions:
        tts, kinds, realtime, created = asyncio.run(run(session))
        assert tts == realtime == homes[session], (session, tts, realtime, homes[session])
        assert "chunk" in kinds and kinds[-1] == "done", kinds
        assert created == "session.created"


def test_a_webrtc_call_is_set_up_and_hung_up_on_its_sessions_server(fleet: Fleet, proxy: Proxy) -> None:
    session = SESSIONS[9]
    home = fleet.where(proxy, [session])[session]

    async def call() -> tuple[httpx.Response, httpx.Response]:
        peer = Peer()
        async with httpx.AsyncClient(base_url=proxy.url, timeout=60, headers={"x-lyre-session": session}) as http:
            answer = await http.post("/v1/realtime/calls", content=await peer.offer(),
                                     headers={"content-type": "application/sdp"})
            assert answer.status_code == 201, answer.text
            await peer.connect(answer.text)
            await peer.until("session.created", timeout=30)
            hung = await http.delete(answer.headers["location"])  # found by the session it was set up with
        await peer.close()
        return answer, hung

    answer, hung = asyncio.run(call())
    assert proxy.server_of(answer.headers) == home
    assert hung.status_code == 204, hung.text
    assert proxy.server_of(hung.headers) == home


def test_audio_reaches_the_client_as_it_is_made_not_held_until_the_end(fleet: Fleet) -> None:
    """Through each proxy at once: the audio arrives in pieces spread over the time the server takes to make
    it. A buffered answer (about 60 KiB) would come in one burst at the end, its reads within milliseconds."""
    body = {"input": "Hello there, how are you doing today?", "voice": "tara", "response_format": "pcm",
            "max_tokens": 112, "seed": 1, "trim_silence": False}  # 16 frames, several chunks

    async def timeline(proxy: Proxy) -> list[float]:
        async with httpx.AsyncClient(timeout=60) as client:
            start = time.perf_counter()
            async with client.stream("POST", proxy.url + "/v1/audio/speech", json=body) as r:
                assert r.status_code == 200
                return [time.perf_counter() - start async for _ in r.aiter_raw()]

    async def both() -> list[list[float]]:
        return await asyncio.gather(*(timeline(p) for p in fleet.proxies.values()))

    for kind, times in zip(fleet.proxies, asyncio.run(both())):
        assert len(times) >= 3, (kind, times)
        assert times[-1] - times[0] > 0.1, (kind, times)


def test_a_killed_servers_sessions_move_and_the_others_stay(fleet: Fleet) -> None:
    dead = fleet.servers[2]
    before = {kind: fleet.where(p, SESSIONS) for kind, p in fleet.proxies.items()}
    dead.stop(signal.SIGKILL)
    for kind, proxy in fleet.proxies.items():
        after = fleet.where(proxy, SESSIONS)  # every request answered: the proxy passes over the dead server
        moved = {s for s in SESSIONS if after[s] != before[kind][s]}
        assert moved == {s for s in SESSIONS if before[kind][s] == dead.url}, (kind, before[kind], after)
        assert moved, kind  # some did live there


def test_a_draining_server_takes_no_new_session_while_its_open_streams_finish(fleet: Fleet) -> None:
    draining = fleet.servers[0]
    body = {"input": "Hello there, how are you doing today? I hope the weather is fine where you are.",
            "voice": "tara", "response_format": "pcm", "max_tokens": 280, "seed": 1, "trim_silence": False}
    keys = {kind: next(s for s, url in fleet.where(p, SESSIONS).items() if url == draining.url)
            for kind, p in fleet.proxies.items()}
    with ExitStack() as stack, httpx.Client(timeout=120) as client:
        streams = {}
        for kind, proxy in fleet.proxies.items():
            r = stack.enter_context(client.stream("POST", proxy.url + "/v1/audio/speech", json=body,
                                                  headers={"x-lyre-session": keys[kind]}))
            assert r.status_code == 200 and proxy.server_of(r.headers) == draining.url
            chunks = r.iter_raw()
            streams[kind] = (chunks, len(next(chunks)))
        draining.process.send_signal(signal.SIGTERM)
        for kind, proxy in fleet.proxies.items():
            # New requests of the same session go elsewhere at once, while the server is still up.
            assert eventually(lambda p=proxy, k=keys[kind]: fleet.where(p, [k])[k] != draining.url, timeout=10)
            assert all(fleet.where(proxy, [keys[kind]])[keys[kind]] != draining.url for _ in range(3))
        assert draining.process.poll() is None, "the server left before its streams finished"
        for kind, (chunks, first) in streams.items():
            rest = sum(len(c) for c in chunks)  # the whole answer, or httpx raises on a body cut short
            assert rest > 0, kind
    assert eventually(lambda: draining.process.poll() is not None, timeout=40), "the drained server did not exit"
