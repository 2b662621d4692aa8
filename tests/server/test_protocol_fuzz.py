"""The sockets fuzzed against a real server: the Realtime WebSocket (a conversation, and transcription), the
TTS WebSocket and the Twilio media stream, each sent sequences of valid, truncated, reordered, oversized and
wrong-typed messages (tests/fuzz_events.py).

Whatever a client sends, the server answers with errors that name what was wrong and never with a fault of
its own: no socket closed with 1011 (an exception escaped), no handshake answered 5xx, no event saying a
message "failed inside lyre", no traceback in its log. After each fuzzer the server is ready, and every
realtime session and engine slot is free again.

``LYRE_FUZZ_EXAMPLES`` sets the sequences per socket (default 12; the examples are the same on every run:
``LYRE_FUZZ_RANDOM=1`` draws new ones). The counts of what came back are printed.
"""

from __future__ import annotations

import json
import os
import time
from collections import Counter
from collections.abc import Iterator

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from websockets.exceptions import ConnectionClosed, InvalidStatus
from websockets.sync.client import ClientConnection, connect

from fuzz_events import AGENT, TRANSCRIPTION, TTS, TWILIO, messages
from scripted_thinker import thinking_at
from serving import Server, running_server

pytestmark = pytest.mark.slow

EXAMPLES = int(os.environ.get("LYRE_FUZZ_EXAMPLES", "12"))
FUZZ = settings(max_examples=EXAMPLES, deadline=None, database=None, derandomize=not os.environ.get("LYRE_FUZZ_RANDOM"),
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
_INTERNAL_ERROR = 1011  # an exception escaped the server's handler
_READ_S = 0.15  # after each message, how long its answers are read before the next goes


@pytest.fixture(scope="module")
def server() -> Iterator[Server]:
    with thinking_at() as thinker, running_server("--stt", "--llm-url", thinker, "--llm-model", "scripted",
                                                  "--no-smart-turn", "--max-streams", "4",
                                                  "--stt-max-sessions", "8") as running:
        yield running
        assert "Traceback" not in running.output(), running.output()[-6000:]


class Seen:
    """What the fuzzers met, across every sequence of one socket."""

    def __init__(self) -> None:
        self.sequences = 0
        self.messages = 0
        self.replies: Counter[str] = Counter()  # answers by type ("error:CODE" for errors)
        self.closes: Counter[int] = Counter()  # close codes from the server


def _kind(text: str | bytes) -> str:
    try:
        reply = json.loads(text)
    except ValueError:
        return "not json"
    kind = str(reply.get("type") or reply.get("event") or "?")
    error = reply.get("error")
    if kind == "error":
        code = error.get("code") if isinstance(error, dict) else None
        message = error.get("message", "") if isinstance(error, dict) else str(error)
        assert "failed inside lyre" not in message, reply  # a bug of lyre's, caught by a per-event guard
        kind = f"error:{code or 'message'}"
    return kind


def _drain(ws: ClientConnection, seconds: float, seen: Seen) -> None:
    deadline = time.monotonic() + seconds
    while (left := deadline - time.monotonic()) > 0:
        try:
            seen.replies[_kind(ws.recv(timeout=left))] += 1
        except TimeoutError:
            return


def _exchange(url: str, sent: list[str | bytes], seen: Seen) -> None:
    """One socket: each message, then its answers, then a close; the server's close code checked."""
    seen.sequences += 1
    try:
        ws = connect(url, open_timeout=20, close_timeout=5, max_size=None)
    except InvalidStatus as exc:
        assert exc.response.status_code < 500, exc
        seen.replies[f"refused:{exc.response.status_code}"] += 1
        return
    with ws:
        try:
            for message in sent:
                ws.send(message)
                seen.messages += 1
                _drain(ws, _READ_S, seen)
        except ConnectionClosed:
            pass
    code = ws.protocol.close_code
    if code is not None:
        seen.closes[code] += 1
    assert code != _INTERNAL_ERROR, f"the server closed with 1011 ({ws.protocol.close_reason}) after {sent!r}"


def _settled(server: Server, seen: Seen, what: str) -> None:
    """Ready, every realtime session and engine slot free again; the counts printed."""
    deadline = time.monotonic() + 30
    while (server.metric("lyre_realtime_sessions"), server.metric("lyre_engine_running")) != (0, 0):
        assert time.monotonic() < deadline, "sessions or engine slots left behind"
        time.sleep(0.2)
    assert httpx.get(f"{server.url}/ready", timeout=10).status_code == 200
    print(f"\n{what}: {seen.sequences} sequences, {seen.messages} messages; answers {dict(seen.replies)}; "
          f"closes {dict(seen.closes)}")


def test_the_realtime_transcription_socket_takes_anything_without_a_fault(server: Server) -> None:
    seen = Seen()

    @FUZZ
    @given(messages(TRANSCRIPTION))
    def run(sent: list[str | bytes]) -> None:
        _exchange(f"{server.ws_url}/v1/realtime?intent=transcription", sent, seen)

    run()
    _settled(server, seen, "transcription")


def test_the_realtime_conversation_socket_takes_anything_without_a_fault(server: Server) -> None:
    seen = Seen()

    @FUZZ
    @given(messages(AGENT))
    def run(sent: list[str | bytes]) -> None:
        _exchange(f"{server.ws_url}/v1/realtime?model=lyre", sent, seen)

    run()
    _settled(server, seen, "conversation")


def test_the_tts_socket_takes_anything_without_a_fault(server: Server) -> None:
    seen = Seen()

    @FUZZ
    @given(messages(TTS))
    def run(sent: list[str | bytes]) -> None:
        _exchange(f"{server.ws_url}/v1/tts/websocket", sent, seen)

    run()
    _settled(server, seen, "tts")


def test_the_twilio_stream_takes_anything_without_a_fault(server: Server) -> None:
    seen = Seen()

    @FUZZ
    @given(messages(TWILIO))
    def run(sent: list[str | bytes]) -> None:
        _exchange(f"{server.ws_url}/v1/twilio/media-stream", sent, seen)

    run()
    _settled(server, seen, "twilio")
