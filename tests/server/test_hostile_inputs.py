"""Inputs an outside review sent to a real server that answered 500 or held what it should have freed: text
that broke the front end, more text than an aligner holds, and listeners that stop reading a streamed answer.
Each must get a clear 4xx (or be spoken), free what it held, and leave no traceback in the log."""

from __future__ import annotations

import io
import json
import socket
import wave
from collections.abc import Iterator

import httpx
import numpy as np
import pytest

from websockets.exceptions import ConnectionClosed
from websockets.sync.client import ClientConnection, connect

from polling import eventually
from serving import Server, running_server

WRITE_TIMEOUT_S = 2.0


@pytest.fixture(scope="module")
def server() -> Iterator[Server]:
    with running_server("--stt", "--max-streams", "2", "--max-queue", "0", "--no-admit-on-rates", "--max-per-client",
                        "1",
                        "--write-timeout", str(WRITE_TIMEOUT_S), "--max-seq-len", "2048") as s:
        yield s
        assert "Traceback" not in s.output(), s.output()


def _speech(server: Server, text: str, **extra: object) -> httpx.Response:
    return httpx.post(server.url + "/v1/audio/speech", timeout=120,
                      json={"input": text, "max_tokens": 28, "response_format": "pcm", **extra})


def test_ssml_nested_past_its_depth_is_refused_naming_it(server: Server) -> None:
    deep = "<speak>" + "<p>" * 580 + "Hello." + "</p>" * 580 + "</speak>"
    assert len(deep) < 5000  # under the input limit: only the nesting is wrong
    answer = _speech(server, deep)
    assert answer.status_code == 400, answer.text
    assert "nested 581 deep" in answer.json()["error"]["message"]


def test_numbers_too_long_to_say_as_counts_are_read_digit_by_digit(server: Server) -> None:
    ordinal = '<speak><say-as interpret-as="ordinal">' + "7" * 400 + "</say-as></speak>"
    assert _speech(server, ordinal).status_code == 200
    assert _speech(server, "The 1" + "0" * 60 + "th time.").status_code == 200


def _wav(seconds: float) -> bytes:
    rng = np.random.default_rng(0)
    pcm = (rng.standard_normal(int(16000 * seconds)) * 300).astype(np.int16)
    out = io.BytesIO()
    with wave.open(out, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(16000)
        w.writeframes(pcm.tobytes())
    return out.getvalue()


def test_alignments_refuse_more_text_than_whispers_aligner_holds(server: Server) -> None:
    # 200 words in 29 s (within 8 a second), of 4 or more tokens each: over the 445 Whisper's decoder holds
    words = " ".join(f"incroyable{k}" for k in range(200))
    assert len(words) < 5000  # under the route's own limit
    answer = httpx.post(server.url + "/v1/audio/alignments", files={"file": ("a.wav", _wav(29.0))},
                        data={"text": words, "language": "fr"}, timeout=120)
    assert answer.status_code == 400, answer.text
    error = answer.json()["error"]
    assert error["param"] == "text" and "Whisper's aligner takes at most" in error["message"]
    ordinal = httpx.post(server.url + "/v1/audio/alignments", files={"file": ("a.wav", _wav(2.0))},
                         data={"text": "the 1" + "0" * 60 + "th"}, timeout=120)
    assert ordinal.status_code < 500, ordinal.text


def _never_read(server: Server, source: str = "127.0.0.1") -> socket.socket:
    """A client that asks for a long streamed answer and never reads it (its receive buffer kept small)."""
    host, port = server.url.removeprefix("http://").split(":")
    client = socket.socket()
    client.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    client.bind((source, 0))
    client.connect((host, int(port)))
    body = json.dumps({"input": "A long answer nobody reads. " * 20, "max_tokens": 1400, "response_format": "pcm"})
    client.sendall(f"POST /v1/audio/speech HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
                   f"Content-Length: {len(body)}\r\n\r\n{body}".encode())
    return client


def test_listeners_that_stop_reading_are_cut_and_free_their_slots(server: Server) -> None:
    before = _stalled(server)
    stalled = [_never_read(server, source) for source in ("127.0.0.1", "127.0.0.2")]  # one each: --max-per-client 1
    try:
        assert eventually(lambda: server.metric("lyre_active_streams") == 2, timeout=30)
        # Both slots held: one more is refused until the stalled ones are cut.
        assert _speech(server, "Me too.").status_code == 429
        assert eventually(lambda: server.metric("lyre_active_streams") == 0, timeout=60)
        assert _stalled(server) == before + 2
        assert _speech(server, "Me now.").status_code == 200  # the slots are free again
    finally:
        for client in stalled:
            client.close()


def _from(source: str) -> httpx.Client:
    return httpx.Client(timeout=120, transport=httpx.HTTPTransport(local_address=source))


def _realtime_from(server: Server, source: str) -> ClientConnection:
    """A transcription session's socket, opened from ``source``."""
    host, port = server.url.removeprefix("http://").split(":")
    sock = socket.socket()
    sock.bind((source, 0))
    sock.connect((host, int(port)))
    return connect(f"{server.ws_url}/v1/realtime?intent=transcription", sock=sock)


def _opened(ws: ClientConnection) -> dict[str, object]:
    """The socket's first event, and for a refusal the close that follows (its code and reason added)."""
    event = json.loads(ws.recv(timeout=30))
    if event["type"] == "error":
        with pytest.raises(ConnectionClosed) as closed:
            ws.recv(timeout=30)
        event["close"] = (closed.value.rcvd.code, closed.value.rcvd.reason) if closed.value.rcvd else None
    return event


def test_one_client_holds_at_most_its_share_and_the_others_still_get_in(server: Server) -> None:
    """--max-per-client 1: a client holding a stream gets 429 naming its share for another, while a client at
    another address is served; the same for realtime sessions (1013 naming the share)."""
    greedy = _never_read(server, "127.0.0.3")
    try:
        assert eventually(lambda: server.metric("lyre_active_streams") == 1, timeout=30)
        body = {"input": "Me too.", "max_tokens": 28, "response_format": "pcm"}
        with _from("127.0.0.3") as same, _from("127.0.0.4") as other:
            refused = same.post(server.url + "/v1/audio/speech", json=body)
            assert refused.status_code == 429 and "127.0.0.3" in refused.json()["error"]["message"], refused.text
            assert "share" in refused.json()["error"]["message"]
            assert other.post(server.url + "/v1/audio/speech", json=body).status_code == 200
    finally:
        greedy.close()
    with _realtime_from(server, "127.0.0.5") as first:
        assert _opened(first)["type"] == "session.created"
        with _realtime_from(server, "127.0.0.5") as second:
            refused = _opened(second)
            assert refused["type"] == "error" and "share" in refused["error"]["message"], refused  # type: ignore[index]
            assert refused["close"] and refused["close"][0] == 1013  # type: ignore[index]
        with _realtime_from(server, "127.0.0.6") as other:
            assert _opened(other)["type"] == "session.created"
    assert eventually(lambda: server.metric("lyre_realtime_sessions") == 0, timeout=15)


def _stalled(server: Server) -> float:
    for line in httpx.get(server.url + "/metrics", timeout=10).text.splitlines():
        if line.startswith('lyre_stalled_listeners_total{api="http"}'):
            return float(line.rsplit(" ", 1)[1])
    return 0.0
