"""Conversations through a fleet: a real redis-server, a ``lyre serve --no-tts --stt`` (it can transcribe but not
talk), a ``lyre serve --stt --llm-url ...`` (it can talk, thinking elsewhere) and a ``lyre route``.

A /v1/realtime socket is a conversation unless it asks for transcription; it goes only to a server that can hold
one, and a server that cannot refuses it rather than open a transcription session in its place.
"""

from __future__ import annotations

import asyncio
import json
import xml.etree.ElementTree as ET
from collections.abc import Iterator

import httpx
import pytest
import redis
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed, InvalidStatus

from fleet_processes import Process, Redis, close_all, route, serve, wait_ready
from lyre.fleet.records import ServerRecord, server_key
from polling import eventually
from speech import SENTENCES, speak_wav
from webrtc_peer import Peer

pytestmark = pytest.mark.slow

ADMIN_KEY = "fleet-admin"
TWILIO_TOKEN = "fleet-twilio-token"
ADMIN = {"Authorization": f"Bearer {ADMIN_KEY}"}


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
    talker = serve(store.url, "--stt", "--llm-url", "http://127.0.0.1:9/v1", "--no-smart-turn", "--max-streams", "1",
                   "--admin-key", ADMIN_KEY, "--twilio-auth-token", TWILIO_TOKEN)
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
    assert event["type"] == "session.created" and event["session"]["type"] == "transcription"


def test_word_times_voice_uploads_and_calls_work_behind_the_router(fleet: Fleet) -> None:
    router = fleet.router.url
    aligned = httpx.post(router + "/v1/audio/alignments", data={"text": SENTENCES[0]}, timeout=120,
                         files={"file": ("said.wav", speak_wav(SENTENCES[0]), "audio/wav")})
    assert aligned.status_code == 200, aligned.text
    assert [w["text"] for w in aligned.json()["words"]] == SENTENCES[0].split()

    # A reference voice uploaded through the router, with the servers' admin key (not the router's); the
    # fleet shares it through Redis, so any server lists it; a delete through the router reaches every one.
    uploaded = httpx.post(router + "/v1/audio/voices", headers=ADMIN, timeout=120, data={"name": "routed",
                          "text": SENTENCES[1]}, files={"file": ("clip.wav", speak_wav(SENTENCES[1]), "audio/wav")})
    assert uploaded.status_code == 201, uploaded.text
    assert eventually(lambda: "routed" in _voices(fleet.talker.url), timeout=15)
    assert httpx.delete(router + "/v1/audio/voices/routed", headers=ADMIN, timeout=30).status_code == 200
    assert eventually(lambda: "routed" not in _voices(fleet.talker.url), timeout=15)

    async def call() -> tuple[httpx.Response, httpx.Response]:
        peer = Peer()
        async with httpx.AsyncClient(base_url=router, timeout=60) as http:
            answer = await http.post("/v1/realtime/calls", content=await peer.offer(),
                                     headers={"content-type": "application/sdp"})
            assert answer.status_code == 201, answer.text
            await peer.connect(answer.text)
            await peer.until("session.created", timeout=30)
            hung = await http.delete(answer.headers["location"])  # the hang-up finds the call's own server
        await peer.close()
        return answer, hung

    answer, hung = asyncio.run(call())
    assert answer.headers["x-lyre-server"] == fleet.talker.url  # the only server that can hold a conversation
    assert hung.status_code == 204 and hung.headers["x-lyre-server"] == fleet.talker.url
    assert eventually(lambda: _sessions(fleet.talker) == 0, timeout=10)


def test_a_phone_call_comes_through_the_router(fleet: Fleet) -> None:
    # Twilio signs the URL it was given, the router's; the webhook's TwiML sends the stream back to the router
    # (not to the server behind it), and the stream's signature and credential hold there.
    from twilio.request_validator import RequestValidator

    signer = RequestValidator(TWILIO_TOKEN)
    webhook = fleet.router.url + "/v1/twilio/voice"
    form = {"CallSid": "CA" + "7" * 32, "AccountSid": "AC" + "0" * 32, "From": "+15550001111", "To": "+15550002222"}
    twiml = httpx.post(webhook, data=form, headers={"X-Twilio-Signature": signer.compute_signature(webhook, form)},
                       timeout=10)
    assert twiml.status_code == 200, twiml.text
    stream = ET.fromstring(twiml.text.split("?>", 1)[1]).find("Connect/Stream")
    assert stream is not None and stream.attrib["url"].startswith(fleet.router.url.replace("http", "ws") + "/")
    url, parameters = stream.attrib["url"], {p.attrib["name"]: p.attrib["value"] for p in stream.findall("Parameter")}

    async def call() -> int | None:
        async with connect(url, additional_headers={"X-Twilio-Signature": signer.compute_signature(url, {})}) as ws:
            await ws.send(json.dumps({"event": "connected", "protocol": "Call", "version": "1.0.0"}))
            await ws.send(json.dumps({"event": "start", "streamSid": "MZ" + "7" * 32, "start": {
                "accountSid": "AC" + "0" * 32, "streamSid": "MZ" + "7" * 32, "callSid": form["CallSid"],
                "tracks": ["inbound"], "customParameters": parameters,
                "mediaFormat": {"encoding": "audio/x-mulaw", "sampleRate": 8000, "channels": 1}}}))
            assert eventually(lambda: _sessions(fleet.talker) == 1, timeout=10)  # admitted: a session holds
            await ws.send(json.dumps({"event": "stop", "streamSid": "MZ" + "7" * 32, "stop": {}}))
            with pytest.raises(ConnectionClosed):
                async with asyncio.timeout(20):
                    while True:
                        await ws.recv()
            return ws.close_code

    assert asyncio.run(call()) == 1000
    assert eventually(lambda: _sessions(fleet.talker) == 0, timeout=10)


def _voices(url: str) -> list[str]:
    return [v["id"] for v in httpx.get(url + "/v1/audio/voices", timeout=10).json()["voices"]]


def _sessions(server: Process) -> float:
    for line in httpx.get(server.url + "/metrics", timeout=10).text.splitlines():
        if line.startswith("lyre_realtime_sessions "):
            return float(line.split()[1])
    raise KeyError("lyre_realtime_sessions")


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
