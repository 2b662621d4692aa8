"""How long a conversation on ``/v1/realtime`` lives: a quiet client keeps it (a person reading a reply and
thinking), ``idle_timeout_ms`` prompts a quiet user as OpenAI's does, and a client gone without a word is found
by the server's WebSocket pings and its slot freed. (The maximum duration: tests/server/test_realtime_ws.py.)

Through a real ``lyre serve --stt --llm-url`` (demo TTS, Whisper base) thinking at the scripted endpoint
(tests/scripted_thinker.py), with short limits: a transcription session idles out after 1 s, pings every
second.
"""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import Iterator
from typing import Any

import pytest
from polling import eventually
from scripted_thinker import REPLY, thinking_at
from serving import Server, running_server
from test_agent import Talk
from websockets.asyncio.client import connect
from websockets.client import ClientProtocol
from websockets.protocol import State
from websockets.uri import parse_uri

@pytest.fixture(scope="module")
def server() -> Iterator[Server]:
    with thinking_at() as url, running_server(
            "--stt", "--llm-url", url, "--llm-model", "scripted", "--max-seq-len", "384", "--stt-idle-timeout", "1",
            "--ws-ping", "1") as running:
        yield running


def _say(text: str) -> dict[str, Any]:
    return {"type": "conversation.item.create",
            "item": {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}}


def test_a_quiet_user_is_prompted_after_idle_timeout_ms_and_the_session_stays_open(server: Server) -> None:
    async def run() -> tuple[Talk, float, float]:
        async with connect(f"{server.ws_url}/v1/realtime?model=lyre", max_size=None) as ws:
            talk = Talk(ws)
            await talk.send({"type": "session.update", "session": {"type": "realtime", "audio": {"input": {
                "turn_detection": {"type": "server_vad", "idle_timeout_ms": 5000}}}}})
            await talk.until("session.updated")
            await talk.send(_say("Hello?"))
            await talk.send({"type": "response.create"})
            await talk.until("response.done")
            done_at = time.monotonic()
            await talk.until("input_audio_buffer.timeout_triggered", timeout=30)
            triggered_at = time.monotonic()
            await talk.until("response.done", count=2, timeout=60)
            return talk, done_at, triggered_at

    talk, done_at, triggered_at = asyncio.run(run())
    assert not talk.of("error")
    detection = talk.of("session.updated")[-1]["session"]["audio"]["input"]["turn_detection"]
    assert detection["type"] == "server_vad" and detection["idle_timeout_ms"] == 5000
    # Silence counts from when the reply has played out, not from when it was made: at least the 5 s.
    assert triggered_at - done_at >= 5.0 - 0.1
    (triggered,) = talk.of("input_audio_buffer.timeout_triggered")
    assert triggered["audio_end_ms"] >= triggered["audio_start_ms"] >= 0
    committed = [e for e in talk.of("input_audio_buffer.committed") if e["item_id"] == triggered["item_id"]]
    assert committed and committed[0]["previous_item_id"] == talk.of("response.done")[0]["response"]["output"][0]["id"]
    prompt = talk.of("response.done")[1]["response"]
    assert prompt["status"] == "completed" and prompt["output"][0]["content"][0]["transcript"] == REPLY
    # Over 5 s without a client event, past the 1 s a transcription session idles out in: still open.


def test_a_client_gone_without_closing_is_found_by_pings_and_its_slot_freed(server: Server) -> None:
    client = ClientProtocol(parse_uri(f"{server.ws_url}/v1/realtime?model=lyre"))  # sans-io: never answers a ping
    with socket.socket() as sock:
        sock.connect(("127.0.0.1", int(server.url.rsplit(":", 1)[1])))
        client.send_request(client.connect())
        sock.sendall(b"".join(client.data_to_send()))
        while client.state is State.CONNECTING:
            client.receive_data(sock.recv(65536))
        assert client.state is State.OPEN
        assert eventually(lambda: server.metric("lyre_realtime_sessions") == 1, timeout=10)
        started = time.monotonic()
        # The client's host is gone: nothing it sends, nothing it answers. The server's pings go unanswered.
        assert eventually(lambda: server.metric("lyre_realtime_sessions") == 0, timeout=20)
        assert time.monotonic() - started < 10
