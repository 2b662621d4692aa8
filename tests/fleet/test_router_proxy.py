"""What the router does to a request on its way through, against real processes on loopback: a redis-server,
two stand-in servers (tests/fleet/upstream_stub.py) that register as servers do and echo what reached them, and a
``lyre route`` with its own API key and limits.

The tests share one fleet; each leaves nothing in flight behind it.
"""

from __future__ import annotations

import asyncio
import json
import signal
import socket
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from typing import Any
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed, InvalidStatus

from fleet_processes import Process, Redis, close_all, route, wait_ready
from polling import eventually
from serving import _free_port

pytestmark = pytest.mark.slow

KEY = "router-key"
AUTH = {"authorization": f"Bearer {KEY}"}
TWILIO_TOKEN = "router-twilio-token"
MAX_INFLIGHT = 3
PER_CLIENT = 2  # --max-inflight-per-client
BODY_LIMIT = 64 * 1024
STUB = Path(__file__).with_name("upstream_stub.py")


class Fleet:
    def __init__(self, plain: Process, talker: Process, router: Process, redis_url: str) -> None:
        self.plain, self.talker, self.router = plain, talker, router  # talker: also conversations and chat
        self.redis_url = redis_url

    @property
    def ws(self) -> str:
        return self.router.url.replace("http", "ws")

    def inflight(self) -> dict[str, int]:
        servers = httpx.get(self.router.url + "/health", timeout=5).json()["servers"]
        return {s["url"]: s["inflight"] for s in servers}

    def idle(self) -> bool:
        return all(n == 0 for n in self.inflight().values())


def _stub(redis_url: str, services: str) -> Process:
    port = _free_port()
    cmd = [sys.executable, str(STUB), "--port", str(port), "--redis", redis_url, "--services", services]
    return Process(cmd, f"http://127.0.0.1:{port}").start()


@pytest.fixture(scope="module")
def fleet() -> Iterator[Fleet]:
    redis = Redis().start()
    stubs = [_stub(redis.url, "tts,stt"), _stub(redis.url, "tts,stt,agent,chat")]
    router = route(redis.url, "--api-key", KEY, "--max-inflight", str(MAX_INFLIGHT), "--max-inflight-per-client",
                   str(PER_CLIENT), "--max-body-bytes",
                   str(BODY_LIMIT), "--first-message-timeout", "0.5", "--twilio-auth-token", TWILIO_TOKEN)
    try:
        wait_ready(stubs)
        wait_ready([router], path="/health")
        f = Fleet(stubs[0], stubs[1], router, redis.url)
        assert eventually(lambda: len(httpx.get(router.url + "/health", timeout=5).json()["ring"]) == 2, timeout=10)
        yield f
        assert "Traceback" not in router.output(), router.output()
    finally:
        close_all([router, *stubs])
        redis.stop()


def _raw(url: str, head: str, timeout_s: float = 5.0, source: str | None = None) -> str:
    """Send only a request's head (no body, whatever its Content-Length says); the status line that comes back."""
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=timeout_s,
                                  source_address=(source, 0) if source else None) as s:
        s.sendall(head.encode() + b"\r\n")
        return s.recv(65536).decode(errors="replace").split("\r\n", 1)[0]


def _headers(seen: dict) -> dict[str, str]:  # type: ignore[type-arg]
    return {k: v for k, v in seen["headers"]}


def test_the_router_key_is_checked_before_anything_else(fleet: Fleet) -> None:
    # 100 MB announced, none sent: the answer comes without waiting for it.
    status = _raw(fleet.router.url, "POST /v1/audio/transcriptions HTTP/1.1\r\nHost: x\r\n"
                                    "Content-Type: application/octet-stream\r\nContent-Length: 100000000\r\n")
    assert " 401 " in status, status
    assert httpx.get(fleet.router.url + "/v1/models", timeout=5).status_code == 401
    wrong = httpx.get(fleet.router.url + "/v1/models", headers={"authorization": "Bearer nope"}, timeout=5)
    assert wrong.status_code == 401 and "API key" in wrong.json()["error"]["message"]
    for headers, query in ((AUTH, ""), ({"x-api-key": KEY}, ""), ({}, f"?api_key={KEY}")):
        assert httpx.get(fleet.router.url + "/v1/models" + query, headers=headers, timeout=5).status_code == 200
    assert httpx.get(fleet.router.url + "/health", timeout=5).status_code == 200  # probes need no key

    async def sockets() -> str:
        with pytest.raises(InvalidStatus) as refused:
            async with connect(fleet.ws + "/v1/tts/websocket?voice=tara"):
                pass
        assert refused.value.response.status_code == 403
        async with connect(fleet.ws + f"/v1/tts/websocket?voice=tara&api_key={KEY}") as ws:
            return json.loads(await ws.recv())["server"]

    assert asyncio.run(sockets()) in (fleet.plain.url, fleet.talker.url)


def test_an_upload_streams_through_to_its_server_as_it_is_sent(fleet: Fleet) -> None:
    """40 MiB, past the 32 MiB the router once held; the server has bytes before the client has sent them all."""
    piece, pieces = b"\0" * 2**20, 40
    early: list[int] = []

    def body() -> Iterator[bytes]:
        yield piece
        deadline = time.monotonic() + 20
        while not early and time.monotonic() < deadline:
            for stub in (fleet.plain, fleet.talker):
                if (n := httpx.get(stub.url + "/progress/up-1", timeout=5).json()["bytes"]) > 0:
                    early.append(n)
            time.sleep(0.05)
        for _ in range(pieces - 1):
            yield piece

    r = httpx.post(fleet.router.url + "/v1/audio/transcriptions", content=body(), timeout=60,
                   headers={**AUTH, "x-test-id": "up-1", "content-type": "application/octet-stream"})
    assert r.status_code == 200, r.text
    assert r.json()["bytes"] == pieces * len(piece)
    assert early, "the server saw nothing until the whole upload had reached the router"
    assert fleet.idle()


def test_a_body_the_router_must_read_is_refused_past_its_limit_before_it_is_read(fleet: Fleet) -> None:
    status = _raw(fleet.router.url, f"POST /v1/audio/speech HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {KEY}\r\n"
                                    f"Content-Type: application/json\r\nContent-Length: {10 * BODY_LIMIT}\r\n")
    assert " 413 " in status, status
    small = httpx.post(fleet.router.url + "/v1/audio/speech", json={"voice": "tara"}, headers=AUTH, timeout=10)
    assert small.status_code == 200 and json.loads(small.content.splitlines()[0])["path"] == "/v1/audio/speech"


def test_hop_by_hop_headers_stay_behind_and_x_forwarded_for_is_added(fleet: Fleet) -> None:
    sent = {**AUTH, "connection": "keep-alive, x-secret-hop", "x-secret-hop": "1", "keep-alive": "timeout=5",
            "x-forwarded-for": "203.0.113.7", "x-end-to-end": "kept"}
    r = httpx.get(fleet.router.url + "/v1/models", headers=sent, timeout=5)
    seen = _headers(r.json())
    assert "x-secret-hop" not in seen and "keep-alive" not in seen
    assert seen["x-end-to-end"] == "kept" and seen["authorization"] == AUTH["authorization"]
    assert seen["x-forwarded-for"] == "203.0.113.7, 127.0.0.1"
    assert "x-up-hop" not in r.headers  # named in the server's Connection header: not the client's business

    async def socket_headers() -> dict[str, str]:
        async with connect(fleet.ws + "/v1/tts/websocket?voice=tara",
                           additional_headers={**AUTH, "x-secret-hop": "1", "connection": "Upgrade, x-secret-hop"}
                           ) as ws:
            return _headers(json.loads(await ws.recv()))

    seen = asyncio.run(socket_headers())
    assert "x-secret-hop" not in seen and seen["x-forwarded-for"] == "127.0.0.1"


def _client_at(address: str) -> httpx.Client:
    """A client whose connections leave from ``address`` (loopback has all of 127.0.0.0/8)."""
    return httpx.Client(timeout=30, headers=AUTH, transport=httpx.HTTPTransport(local_address=address))


def test_past_the_inflight_limit_a_request_gets_503_at_once(fleet: Fleet) -> None:
    slow = {"voice": "tara", "chunks": 200, "chunk_s": 0.1}
    with httpx.Client(timeout=30, headers=AUTH) as client, _client_at("127.0.0.2") as other:
        held = [client.stream("POST", fleet.router.url + "/v1/audio/speech", json=slow) for _ in range(PER_CLIENT)]
        held += [other.stream("POST", fleet.router.url + "/v1/audio/speech", json=slow)]  # each within its share
        try:
            for stream in held:
                assert stream.__enter__().status_code == 200
            assert sum(fleet.inflight().values()) == MAX_INFLIGHT
            started = time.monotonic()
            refused = client.post(fleet.router.url + "/v1/audio/speech", json={"voice": "tara"})
            assert refused.status_code == 503 and refused.headers["retry-after"] == "1", refused.text
            assert time.monotonic() - started < 2
            assert "in flight" in refused.json()["error"]["message"]
        finally:
            for stream in held:
                stream.__exit__(None, None, None)
    assert eventually(fleet.idle, timeout=10), fleet.inflight()


def test_one_client_past_its_share_gets_429_and_the_others_still_get_through(fleet: Fleet) -> None:
    """One client address holds its share (--max-inflight-per-client 2) of the router's 3: its next request and
    socket get 429 naming the share, while another address's request is still proxied."""
    slow = {"voice": "tara", "chunks": 200, "chunk_s": 0.1}
    with _client_at("127.0.0.3") as greedy, _client_at("127.0.0.4") as other:
        held = [greedy.stream("POST", fleet.router.url + "/v1/audio/speech", json=slow) for _ in range(PER_CLIENT)]
        try:
            for stream in held:
                assert stream.__enter__().status_code == 200
            refused = greedy.post(fleet.router.url + "/v1/audio/speech", json={"voice": "tara"})
            assert refused.status_code == 429 and refused.headers["retry-after"] == "1", refused.text
            assert "share" in refused.json()["error"]["message"] and "127.0.0.3" in refused.json()["error"]["message"]
            refused_socket = _raw(fleet.router.url,
                                  f"GET /v1/tts/websocket?voice=tara&api_key={KEY} HTTP/1.1\r\nHost: x\r\n"
                                  "Upgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 13\r\n"
                                  "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n", source="127.0.0.3")
            assert " 429 " in refused_socket, refused_socket
            assert other.post(fleet.router.url + "/v1/audio/speech", json={"voice": "tara"}).status_code == 200
        finally:
            for stream in held:
                stream.__exit__(None, None, None)
    assert eventually(fleet.idle, timeout=10), fleet.inflight()


def test_a_busy_server_is_passed_over_once_and_its_refusal_reaches_the_client_when_none_takes_it(
        fleet: Fleet) -> None:
    """A 429 (at capacity) or 503 (draining) goes to the next server; with every server busy the client gets the
    last one's own answer and Retry-After, not a 502. Over HTTP and at a socket's handshake alike."""
    speech = fleet.router.url + "/v1/audio/speech"
    home = httpx.post(speech, json={"voice": "busy"}, headers=AUTH, timeout=10).headers["x-lyre-server"]
    other = ({fleet.plain.url, fleet.talker.url} - {home}).pop()
    before = _retries(fleet)
    for status in (429, 503):
        moved = httpx.post(speech + f"?refuse={home}&status={status}", json={"voice": "busy"}, headers=AUTH,
                           timeout=10)
        assert moved.status_code == 200 and moved.headers["x-lyre-server"] == other, moved.text
        assert json.loads(moved.content.splitlines()[0])["server"] == other
        refused = httpx.post(speech + f"?refuse=all&status={status}", json={"voice": "busy"}, headers=AUTH,
                             timeout=10)
        assert refused.status_code == status and refused.headers["retry-after"] == "7", refused.text
        assert refused.headers["x-lyre-server"] == other
        assert refused.json()["error"]["message"] == f"server {other} is busy"

    async def sockets() -> tuple[str, InvalidStatus]:
        async with connect(fleet.ws + f"/v1/tts/websocket?voice=busy&refuse={home}", additional_headers=AUTH) as ws:
            served_by = json.loads(await ws.recv())["server"]
        with pytest.raises(InvalidStatus) as refused:
            async with connect(fleet.ws + "/v1/tts/websocket?voice=busy&refuse=all", additional_headers=AUTH):
                pass
        return served_by, refused.value

    served_by, refused = asyncio.run(sockets())
    assert served_by == other
    assert refused.response.status_code == 429 and refused.response.headers["retry-after"] == "7"
    assert refused.response.headers["x-lyre-server"] == other and b"is busy" in refused.response.body
    after = _retries(fleet)
    assert after["at_capacity"] - before["at_capacity"] == 4 and after["unavailable"] - before["unavailable"] == 2
    assert eventually(fleet.idle, timeout=10), fleet.inflight()


def _retries(fleet: Fleet) -> Counter[str]:
    """The router's ``lyre_router_retries_total`` by reason (0 for a reason not yet seen)."""
    metrics = httpx.get(fleet.router.url + "/metrics", headers=AUTH, timeout=5)
    assert metrics.status_code == 200, metrics.text
    return Counter({sample.labels["reason"]: sample.value for family in text_string_to_metric_families(metrics.text)
                    if family.name == "lyre_router_retries" for sample in family.samples
                    if sample.name == "lyre_router_retries_total"})


def test_a_socket_that_names_no_voice_must_send_its_first_message_in_time(fleet: Fleet) -> None:
    async def run() -> int | None:
        async with connect(fleet.ws + "/v1/tts/websocket", additional_headers=AUTH) as ws:
            with pytest.raises(ConnectionClosed):
                await asyncio.wait_for(ws.recv(), 10)
            return ws.close_code

    assert asyncio.run(run()) == 1008


def test_the_inflight_count_is_given_back_when_the_client_leaves_before_the_answer_starts(fleet: Fleet) -> None:
    """The client gives up while the server still holds its headers back; the count must not stay taken."""
    assert fleet.idle()
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(fleet.router.url + "/v1/audio/speech", headers=AUTH, timeout=httpx.Timeout(5, read=0.3),
                   json={"voice": "tara", "delay_s": 3.0, "chunks": 20, "chunk_s": 0.05})
    assert eventually(lambda: sum(fleet.inflight().values()) == 1, timeout=2)  # the router still waits for it
    assert eventually(fleet.idle, timeout=10), fleet.inflight()

    # And mid-stream: a reader that stops reading and leaves.
    got = threading.Event()

    def leave_mid_stream() -> None:
        with httpx.stream("POST", fleet.router.url + "/v1/audio/speech", headers=AUTH, timeout=30,
                          json={"voice": "tara", "chunks": 200, "chunk_s": 0.05}) as r:
            for _ in r.iter_bytes():
                got.set()
                return

    reader = threading.Thread(target=leave_mid_stream)
    reader.start()
    assert got.wait(10)
    reader.join(10)
    assert eventually(fleet.idle, timeout=10), fleet.inflight()


def test_a_conversation_goes_only_to_a_server_that_can_hold_one(fleet: Fleet) -> None:
    async def first(path: str) -> dict:  # type: ignore[type-arg]
        async with connect(fleet.ws + path, additional_headers=AUTH) as ws:
            return json.loads(await ws.recv())

    async def run() -> tuple[set[str], set[str]]:
        talks = {(await first(f"/v1/realtime?model=x&session=c-{i}"))["server"] for i in range(12)}
        listens = {(await first(f"/v1/realtime?intent=transcription&session=t-{i}"))["server"] for i in range(24)}
        return talks, listens

    talks, listens = asyncio.run(run())
    assert talks == {fleet.talker.url}
    assert listens == {fleet.plain.url, fleet.talker.url}  # transcription needs speech to text only
    assert eventually(fleet.idle, timeout=10), fleet.inflight()


def test_a_stream_still_running_at_shutdown_is_cut_after_the_grace(fleet: Fleet) -> None:
    """A stream that would run for minutes does not hold the router's shutdown past --shutdown-grace."""
    router = route(fleet.redis_url, "--api-key", KEY, "--shutdown-grace", "1")
    try:
        wait_ready([router], path="/health")
        assert eventually(lambda: len(httpx.get(router.url + "/health", timeout=5).json()["ring"]) == 2, timeout=10)
        got = threading.Event()
        ended = threading.Event()

        def listen() -> None:
            try:
                with httpx.stream("POST", router.url + "/v1/audio/speech", headers=AUTH, timeout=60,
                                  json={"voice": "tara", "chunks": 600, "chunk_s": 0.1}) as r:
                    for _ in r.iter_bytes():
                        got.set()
            except httpx.HTTPError:
                pass  # cut mid-body
            ended.set()

        listener = threading.Thread(target=listen)
        listener.start()
        assert got.wait(10)
        router.process.send_signal(signal.SIGTERM)
        started = time.monotonic()
        router.process.wait(timeout=30)
        assert time.monotonic() - started < 10  # the grace, then the cut; not the stream's minute
        assert ended.wait(10)
        listener.join(10)
    finally:
        router.close()


def _server_routes() -> tuple[list[tuple[str, str]], list[str]]:
    """Every public route of a ``lyre serve`` (method, path) and its sockets, read from the app itself, so a
    route added to the server and not to the router fails here."""
    from starlette.routing import WebSocketRoute

    from lyre.server import ServerConfig, create_app

    http: list[tuple[str, str]] = []
    sockets: list[str] = []
    routes = list(create_app(ServerConfig()).router.routes)
    while routes:
        r = routes.pop()
        if (inner := getattr(r, "original_router", None)) is not None:  # an included router
            routes += inner.routes
        elif isinstance(r, WebSocketRoute) or type(r).__name__ == "APIWebSocketRoute":
            sockets.append(r.path)
        elif getattr(r, "include_in_schema", True) and r.path not in ("/health", "/ready", "/metrics"):
            http += [(m, r.path) for m in r.methods if m != "HEAD"]
    return sorted(http), sorted(sockets)


def test_every_public_route_of_a_server_is_forwarded_and_calls_go_to_their_own_server(fleet: Fleet) -> None:
    from lyre.fleet.records import server_tag

    http, sockets = _server_routes()
    agent_only = ("/v1/realtime/calls", "/v1/twilio", "/v1/realtime")
    for method, path in http:
        if "{call_id}" in path:
            continue  # below: a call's own server, whatever the ring says
        if path.startswith("/v1/adapters"):
            continue  # one server's own folders and slots: an operator asks that server, not the fleet
        url = fleet.router.url + path.replace("{name}", "somebody")
        headers = {"authorization": "Bearer the-servers-admin-key"} if path.startswith(
            "/v1/audio/voices") and method != "GET" else AUTH  # the server checks its own key
        answer = httpx.request(method, url, headers=headers, json={"voice": "tara"} if method == "POST" else None,
                               timeout=10)
        assert answer.status_code == 200, (method, path, answer.text)
        # The server sees the address the client asked for, and how: it builds and checks URLs from them.
        seen = _headers(answer.json())
        assert seen["host"] == fleet.router.url.removeprefix("http://") and seen["x-forwarded-proto"] == "http"
        served = answer.headers["x-lyre-server"]
        assert served in (fleet.plain.url, fleet.talker.url), (method, path)
        if path.startswith(agent_only):
            assert served == fleet.talker.url, (method, path)  # only a server that can hold a conversation
    for path in sockets:
        async def first(path: str = path) -> dict[str, Any]:
            query = f"?api_key={KEY}" if path.startswith("/v1/twilio") else f"?voice=tara&api_key={KEY}"
            async with connect(fleet.ws + path.replace("{credential}", "CA1.2.3.4.5") + query) as ws:
                return json.loads(await ws.recv())  # type: ignore[no-any-return]

        seen = asyncio.run(first())
        assert seen["server"] in (fleet.plain.url, fleet.talker.url), path
        assert [v for k, v in seen["headers"] if k == "host"] == [fleet.router.url.removeprefix("http://")], path
        if path.startswith(agent_only):
            assert seen["server"] == fleet.talker.url, path
    # A call's id names its server's tag: its hang-up reaches that server on any ring, and an id whose server is
    # not in the fleet is a 404 from the router.
    for holder in (fleet.plain, fleet.talker):
        call = f"rtc_{server_tag(holder.url)}_{'ab' * 12}"
        for method, tail in (("DELETE", ""), ("POST", "/hangup")):
            answer = httpx.request(method, f"{fleet.router.url}/v1/realtime/calls/{call}{tail}", headers=AUTH,
                                   timeout=10)
            assert answer.status_code == 200 and answer.json()["server"] == holder.url, answer.text
    for stray in (f"rtc_{'0' * 12}_{'ab' * 12}", "rtc_untagged"):
        answer = httpx.delete(f"{fleet.router.url}/v1/realtime/calls/{stray}", headers=AUTH, timeout=10)
        assert answer.status_code == 404 and stray in answer.json()["error"]["message"]

    # A backend attaching to a call (the sideband socket) goes to the server holding it, whatever the ring says.
    async def attached(call: str) -> dict[str, Any]:
        async with connect(f"{fleet.ws}/v1/realtime?call_id={call}&api_key={KEY}") as ws:
            return json.loads(await ws.recv())  # type: ignore[no-any-return]

    for holder in (fleet.plain, fleet.talker):
        assert asyncio.run(attached(f"rtc_{server_tag(holder.url)}_{'cd' * 12}"))["server"] == holder.url
    with pytest.raises(InvalidStatus) as refused:
        asyncio.run(attached(f"rtc_{'0' * 12}_{'cd' * 12}"))
    assert refused.value.response.status_code == 404
    assert fleet.idle()


def test_twilio_passes_a_keyed_router_only_on_twilios_signature(fleet: Fleet) -> None:
    """Twilio cannot send the router's key: its webhook and streams pass on its signature, checked by the router
    (--twilio-auth-token); a forged or missing one is refused before any server sees it."""
    from lyre.common.twilio_signature import signature

    webhook = fleet.router.url + "/v1/twilio/voice?instructions=Say+hi"
    form = {"CallSid": "CA" + "1" * 32, "From": "+15550001111"}
    unsigned = httpx.post(webhook, data=form, timeout=10)
    forged = httpx.post(webhook, data=form, headers={"x-twilio-signature": signature("wrong", webhook, form.items())},
                        timeout=10)
    for refused in (unsigned, forged):
        assert refused.status_code == 403 and "X-Twilio-Signature" in refused.json()["error"]["message"]
        assert "x-lyre-server" not in refused.headers  # no server saw it
    changed = httpx.post(webhook, data={**form, "From": "+15559999999"},
                         headers={"x-twilio-signature": signature(TWILIO_TOKEN, webhook, form.items())}, timeout=10)
    assert changed.status_code == 403  # the signature covers the form
    signed = httpx.post(webhook, data=form, headers={"x-twilio-signature": signature(TWILIO_TOKEN, webhook,
                                                                                     form.items())}, timeout=10)
    assert signed.status_code == 200 and signed.headers["x-lyre-server"] == fleet.talker.url, signed.text

    stream = fleet.ws + "/v1/twilio/media-stream"

    async def opened(headers: dict[str, str]) -> str:
        async with connect(stream, additional_headers=headers) as ws:
            return json.loads(await ws.recv())["server"]  # type: ignore[no-any-return]

    with pytest.raises(InvalidStatus) as info:
        asyncio.run(opened({}))
    assert info.value.response.status_code == 403
    assert asyncio.run(opened({"x-twilio-signature": signature(TWILIO_TOKEN, stream)})) == fleet.talker.url


def test_a_keyed_router_without_twilios_token_refuses_twilio_unless_it_brings_the_key() -> None:
    from starlette.requests import Request

    from lyre.fleet.router import RouterConfig
    from lyre.fleet.router.twilio_gate import twilio_refusal

    def request(query: str = "") -> Request:
        return Request({"type": "http", "method": "POST", "path": "/v1/twilio/voice", "query_string": query.encode(),
                        "headers": [(b"host", b"router"), (b"x-twilio-signature", b"anything")],
                        "scheme": "http", "server": ("router", 80)})

    keyed = RouterConfig(redis="redis://x", api_key=KEY)
    why = twilio_refusal(keyed, request())
    assert why is not None and "--twilio-auth-token" in why
    assert twilio_refusal(keyed, request(f"api_key={KEY}")) is None  # the key in the webhook's URL
    assert twilio_refusal(RouterConfig(redis="redis://x"), request()) is None  # an open router passes it on
