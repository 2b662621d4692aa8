"""``/v1/realtime`` over real sockets: a ``lyre serve --no-tts`` process, and for the socket's own
limits (API key, idle timeout, speech to text off) an in-process app with small settings."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import io
import json
import socket
import time
import wave
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from realtime_types import check_event
from serving import Server, running_server, serving_in_thread
from speech import SENTENCES, normalise, speak_pcm16, wer
from websockets.asyncio.client import ClientConnection, connect
from websockets.client import ClientProtocol
from websockets.exceptions import ConnectionClosed, InvalidStatus
from websockets.protocol import State
from websockets.uri import parse_uri

from lyre.server.sockets import realtime_socket as realtime
from lyre.server.admission import Admission
from lyre.server.config import ServerConfig
from lyre.server.metrics import Metrics
from lyre.server.sockets.realtime_socket import REALTIME_PATH, router
from lyre.server.state import ServerState
from lyre.stt import Transcriber

TRANSCRIPTION = "conversation.item.input_audio_transcription"
COMPLETED = f"{TRANSCRIPTION}.completed"
MANUAL = {"type": "transcription_session.update",
          "session": {"input_audio_transcription": {"language": "en"}, "turn_detection": None}}
CHUNK_MS = 40
_MAX_SESSIONS = 3  # lyre serve --stt-max-sessions
# Whisper base's int8 kernels differ by CPU, and so do a few of the words it hears in espeak's speech: a
# transcript is held to a word error rate, on sentences it hears right on every kernel set tried
# (CTranslate2's AVX2, AVX and generic kernels, oneDNN's GEMMs and MKL's).
MAX_WER = 0.2


@pytest.fixture(scope="module")
def server() -> Iterator[Server]:
    with running_server("--no-tts", "--stt-max-sessions", str(_MAX_SESSIONS)) as running:
        yield running


def _url(server: Server) -> str:
    return f"{server.ws_url}{REALTIME_PATH}?intent=transcription"


async def _event(ws: ClientConnection, timeout: float = 60.0) -> dict[str, Any]:
    """The next event; a GA-named one held to the openai SDK's types (tests/realtime_types.py)."""
    event = json.loads(await asyncio.wait_for(ws.recv(), timeout))
    if not event["type"].startswith("transcription_session."):  # beta's names: the beta clients' own
        check_event(event)
    return event


async def _until(ws: ClientConnection, kind: str) -> list[dict[str, Any]]:
    """Every event up to and including the first of ``kind``."""
    events = [await _event(ws)]
    while events[-1]["type"] != kind:
        events.append(await _event(ws))
    return events


def _append(pcm: bytes) -> str:
    return json.dumps({"type": "input_audio_buffer.append", "audio": base64.b64encode(pcm).decode()})


BETA_HEADER = {"OpenAI-Beta": "realtime=v1"}  # what OpenAI's beta clients send; GA clients send nothing


async def _transcribe(ws: ClientConnection, pcm: bytes, beta: bool = False) -> dict[str, Any]:
    """One utterance with a manual commit, appended in 100 ms pieces as fast as they go; its completed event.
    The session opens in the shape the client speaks (``beta``: it sent the beta header)."""
    assert (await _event(ws))["type"] == ("transcription_session.created" if beta else "session.created")
    await ws.send(json.dumps(MANUAL))
    assert (await _event(ws))["type"] == "transcription_session.updated"
    for i in range(0, len(pcm), 4800):
        await ws.send(_append(pcm[i:i + 4800]))
    await ws.send(json.dumps({"type": "input_audio_buffer.commit"}))
    return (await _until(ws, COMPLETED))[-1]


def test_speech_streamed_in_real_time_is_transcribed_while_it_is_spoken(server: Server) -> None:
    # 10.4 s: on a small CPU a partial pass takes over a second, and the first words need two.
    speech = speak_pcm16(f"{SENTENCES[10]} {SENTENCES[5]}")
    step = 24 * CHUNK_MS * 2

    async def run() -> tuple[list[tuple[float, dict[str, Any]]], float]:
        async with connect(_url(server)) as ws:
            received: list[tuple[float, dict[str, Any]]] = []

            async def listen() -> None:
                while not received or received[-1][1]["type"] != COMPLETED:
                    received.append((time.monotonic(), await _event(ws)))

            listener = asyncio.create_task(listen())
            # The pause between the two sentences is shorter than 500 ms: one utterance.
            await ws.send(json.dumps({"type": "session.update", "session": {
                "type": "transcription", "audio": {"input": {
                    "format": {"type": "audio/pcm", "rate": 24_000}, "transcription": {"language": "en"},
                    "turn_detection": {"type": "server_vad", "silence_duration_ms": 500}}}}}))
            pcm = bytes(2 * 7200) + speech + bytes(2 * 24_000)  # 300 ms of silence, the speech, 1 s of silence
            start = time.monotonic()
            last_speech_sent = 0.0
            for n, i in enumerate(range(0, len(pcm), step)):
                await ws.send(_append(pcm[i:i + step]))
                if i < 2 * 7200 + len(speech):
                    last_speech_sent = time.monotonic()
                await asyncio.sleep(max(0.0, start + (n + 1) * CHUNK_MS / 1000 - time.monotonic()))
            await asyncio.wait_for(listener, 60)
            return received, last_speech_sent

    received, last_speech_sent = asyncio.run(run())
    events = [event for _, event in received]
    kinds = [e["type"] for e in events if e["type"] != f"{TRANSCRIPTION}.delta"]
    assert kinds == ["session.created", "session.updated", "input_audio_buffer.speech_started",
                     "input_audio_buffer.speech_stopped", "input_audio_buffer.committed", COMPLETED]
    deltas = [(when, e) for when, e in received if e["type"] == f"{TRANSCRIPTION}.delta"]
    assert deltas, "no deltas"
    # The first words came while the sentence was still being spoken.
    assert deltas[0][0] < last_speech_sent, f"first words {deltas[0][0] - last_speech_sent:.1f} s after the speech"
    item = events[2]["item_id"]
    assert all(e["item_id"] == item for _, e in deltas) and events[-1]["item_id"] == item
    text = "".join(e["delta"] for _, e in deltas)
    assert text == text.strip() and "  " not in text
    heard = normalise(events[-1]["transcript"]).split()
    assert sum(w in heard for w in ("calling", "problem", "internet", "connection", "dropping", "evening",
                                    "change", "flight", "later", "date", "meeting", "moved")) >= 10, heard


def test_rest_and_websocket_both_transcribe_the_same_audio(server: Server) -> None:
    # Not the same computation, so not held to the same text: the upload is resampled to int16 and the
    # stream to float, and a live turn's final pass may encode a window fitted to the utterance.
    pcm = speak_pcm16(SENTENCES[9])
    wav = io.BytesIO()
    with wave.open(wav, "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(2)
        out.setframerate(24_000)
        out.writeframes(pcm)
    rest = httpx.post(f"{server.url}/v1/audio/transcriptions", timeout=60,
                      files={"file": ("speech.wav", wav.getvalue(), "audio/wav")},
                      data={"model": "whisper-1", "language": "en"})
    assert rest.status_code == 200, rest.text

    async def run() -> dict[str, Any]:
        async with connect(_url(server)) as ws:
            return await _transcribe(ws, pcm)

    completed = asyncio.run(run())
    for heard in (rest.json()["text"], completed["transcript"]):
        assert wer([SENTENCES[9]], [heard]) <= MAX_WER, heard


def test_two_sessions_at_once_both_complete(server: Server) -> None:
    async def run() -> list[dict[str, Any]]:
        async with connect(_url(server)) as a, connect(_url(server), additional_headers=BETA_HEADER) as b:
            return await asyncio.gather(_transcribe(a, speak_pcm16(SENTENCES[6])),
                                        _transcribe(b, speak_pcm16(SENTENCES[2]), beta=True))

    first, second = asyncio.run(run())
    heard = [first["transcript"], second["transcript"]]
    assert wer([SENTENCES[6], SENTENCES[2]], heard) <= MAX_WER, heard


def test_frames_the_session_cannot_read_get_errors_and_it_goes_on(server: Server) -> None:
    async def run() -> list[dict[str, Any]]:
        async with connect(_url(server)) as ws:
            await _event(ws)
            await ws.send(b"\x00\x01")
            await ws.send("{")
            await ws.send(json.dumps({"type": "input_audio_buffer.commit", "event_id": "c1"}))
            await ws.send(json.dumps(MANUAL))
            return [await _event(ws) for _ in range(4)]

    binary, bad_json, empty, updated = asyncio.run(run())
    assert binary["error"]["code"] == "invalid_event" and "binary frames" in binary["error"]["message"]
    assert bad_json["error"]["code"] == "invalid_json"
    assert empty["error"]["code"] == "input_audio_buffer_commit_empty" and empty["error"]["event_id"] == "c1"
    assert updated["type"] == "transcription_session.updated"


def test_sessions_over_the_limit_are_told_to_try_again_later(server: Server) -> None:
    limit = _MAX_SESSIONS

    async def run() -> None:
        sockets = [await connect(_url(server)) for _ in range(limit)]
        for ws in sockets:
            assert (await _event(ws))["type"] == "session.created"
        async with connect(_url(server)) as extra:
            error = await _event(extra)
            assert error["type"] == "error" and error["error"]["code"] == "session_limit"
            assert f"limit {limit}" in error["error"]["message"]
            with pytest.raises(ConnectionClosed):
                await extra.recv()
            assert extra.close_code == 1013
        await sockets.pop().close()
        # Once one has gone, there is room again (its handler ends just after the close).
        for _ in range(50):
            async with connect(_url(server)) as again:
                if (await _event(again))["type"] == "session.created":
                    break
            await asyncio.sleep(0.05)
        else:
            pytest.fail("no room after a session closed")
        for ws in sockets:
            await ws.close()

    asyncio.run(run())


# -- the socket's own limits, in process --


class _Local:
    def __init__(self, app: FastAPI, port: int) -> None:
        self.app = app
        self.state: ServerState = app.state.lyre
        self.port = port
        self.url = f"ws://127.0.0.1:{port}{REALTIME_PATH}?intent=transcription"  # speech to text only: no agent


@pytest.fixture(scope="module")
def local() -> Iterator[_Local]:
    stt = Transcriber.load()
    config = ServerConfig(tts=False, stt=True, stt_idle_timeout_s=0.5)
    state = ServerState(config=config, tts=None, admission=Admission(1, 1, 1.0), metrics=Metrics(), stt=stt,
                        ready=True)
    app = FastAPI()
    app.state.lyre = state
    app.include_router(router)
    with serving_in_thread(app) as port:
        yield _Local(app, port)
    stt.close()


@contextmanager
def changed(local: _Local, **changes: Any) -> Iterator[None]:
    """Run with some of the state changed: the socket reads it on each connection."""
    saved = {name: getattr(local.state, name) for name in changes}
    for name, value in changes.items():
        setattr(local.state, name, value)
    try:
        yield
    finally:
        for name, value in saved.items():
            setattr(local.state, name, value)


async def _closed_after_error(url: str) -> tuple[dict[str, Any], int | None, str | None]:
    """The error event a socket gets, and the close code and reason that follow it."""
    async with connect(url) as ws:
        events = [await _event(ws, timeout=10)]
        if events[0]["type"] != "error":
            events.append(await _event(ws, timeout=10))
        with pytest.raises(ConnectionClosed):
            await ws.recv()
        return events[-1], ws.close_code, ws.close_reason


def test_the_api_key_is_checked_on_the_handshake(local: _Local) -> None:
    async def refused(url: str, headers: dict[str, str] | None = None) -> int:
        with pytest.raises(InvalidStatus) as info:
            async with connect(url, additional_headers=headers):
                pass
        return info.value.response.status_code

    async def run() -> None:
        assert await refused(local.url) == 403
        assert await refused(local.url, {"Authorization": "Bearer wrong"}) == 403
        for url, headers in ((local.url + "&api_key=sesame", None), (local.url, {"Authorization": "Bearer sesame"})):
            async with connect(url, additional_headers=headers) as ws:
                assert (await _event(ws))["type"] == "session.created"

    with changed(local, config=replace(local.state.config, api_key="sesame")):
        asyncio.run(run())


def test_an_idle_session_is_closed_with_a_reason(local: _Local) -> None:
    error, code, reason = asyncio.run(_closed_after_error(local.url))
    assert error["error"]["code"] == "idle_timeout" and "no event for 0.5 s" in error["error"]["message"]
    assert (code, reason) == (1000, "idle timeout")


def test_a_session_ends_at_its_maximum_duration_however_busy(local: _Local) -> None:
    """OpenAI's sessions last at most their maximum duration (60 minutes): here 1 s, a client sending all along."""
    async def run() -> tuple[list[dict[str, Any]], int | None, float]:
        events: list[dict[str, Any]] = []
        async with connect(local.url) as ws:
            opened = time.monotonic()
            with pytest.raises(ConnectionClosed):
                async with asyncio.timeout(10):
                    while True:
                        await ws.send(_append(bytes(4800)))
                        with contextlib.suppress(TimeoutError):
                            events.append(json.loads(await asyncio.wait_for(ws.recv(), 0.1)))
            return events, ws.close_code, time.monotonic() - opened

    config = replace(local.state.config, realtime_max_session_s=1.0, stt_idle_timeout_s=30)
    with changed(local, config=config):
        events, code, lasted = asyncio.run(run())
    expired = [e for e in events if e["type"] == "error"]
    assert [e["error"]["code"] for e in expired] == ["session_expired"], expired
    assert "maximum duration of 1 s" in expired[0]["error"]["message"]
    assert code == 1000 and 0.9 <= lasted < 5


def test_without_speech_to_text_the_handshake_is_refused_saying_how_to_turn_it_on(local: _Local) -> None:
    async def run() -> InvalidStatus:
        with pytest.raises(InvalidStatus) as refused:
            async with connect(local.url):
                pass
        return refused.value

    with changed(local, stt=None):
        refusal = asyncio.run(run())
    assert refusal.response.status_code == 404
    assert b"--stt" in refusal.response.body


def test_a_client_that_reads_nothing_is_read_no_further_and_dropped(local: _Local,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(realtime, "_MAX_UNSENT", 8)
    monkeypatch.setattr(realtime, "_LAST_SEND_S", 0.3)
    client = ClientProtocol(parse_uri(local.url))  # sans-io: this client never reads after the handshake
    # A long idle timeout: the session must end for not reading, not for going quiet.
    with changed(local, config=replace(local.state.config, stt_idle_timeout_s=30)), socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.connect(("127.0.0.1", local.port))
        client.send_request(client.connect())
        sock.sendall(b"".join(client.data_to_send()))
        while client.state is State.CONNECTING:
            client.receive_data(sock.recv(4096))
        assert client.state is State.OPEN
        # Each unknown type comes back in a 60 kB error event: megabytes soon fill every buffer on the way.
        sock.settimeout(0.5)
        with pytest.raises(OSError):
            for _ in range(1000):
                client.send_text(json.dumps({"type": "x" * 60_000}).encode())
                sock.sendall(b"".join(client.data_to_send()))
        # The server stopped reading; its session ends soon after, though the client still holds the socket.
        deadline = time.monotonic() + 5
        while realtime.RealtimeSessions.of(local.app).open and time.monotonic() < deadline:
            time.sleep(0.05)
        assert realtime.RealtimeSessions.of(local.app).open == 0
