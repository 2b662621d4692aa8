"""Word timestamps on every text-to-speech transport, from a real `lyre serve` with real clients.

The server runs without --stt: its aligner (Whisper base) is loaded on the first request that asks for
word times. The demo model speaks noise, so where each word lands is meaningless; what holds on any
audio is checked: every written word comes back once, in order, as written, with times that are
ordered, never overlap and lie inside the audio, and the times arrive after the audio they describe.
"""

from __future__ import annotations

import asyncio
import base64
import io
import json
import wave
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from websockets.asyncio.client import connect

from lyre.orpheus import SAMPLE_RATE
from lyre.stt import written_words
from serving import Server, running_server

pytestmark = pytest.mark.slow

# Speech requests carry no max_tokens: a 384-position KV cache caps each segment at 128 tokens (1.5 s).
TEXT = "Hello there, my friend. It is 5 o'clock <laugh> and the tea is ready!"


@pytest.fixture(scope="module")
def server() -> Iterator[Server]:
    with running_server("--max-streams", "2", "--max-seq-len", "384") as s:
        yield s


def _check(words: list[str], starts: list[float], ends: list[float], text: str, duration_s: float) -> None:
    """Every written word once, in order; times ordered, not overlapping, inside the audio."""
    assert words == written_words(text)
    assert len(starts) == len(ends) == len(words)
    assert all(0 <= s <= e for s, e in zip(starts, ends)), (starts, ends)
    assert all(e <= s for e, s in zip(ends, starts[1:])), (starts, ends)
    assert ends[-1] <= duration_s + 0.01, (ends[-1], duration_s)


def test_the_websocket_sends_cartesia_timestamps_after_the_audio_and_before_done(server: Server) -> None:
    async def talk() -> list[dict[str, Any]]:
        async with connect(f"{server.ws_url}/v1/tts/websocket") as ws:
            first = TEXT[:30]
            await ws.send(json.dumps({"context_id": "c1", "voice": {"mode": "id", "id": "tara"},
                                      "transcript": first, "continue": True, "add_timestamps": True}))
            await ws.send(json.dumps({"context_id": "c1", "transcript": TEXT[30:], "continue": False}))
            messages = []
            while not (messages and messages[-1]["done"]):
                messages.append(json.loads(await asyncio.wait_for(ws.recv(), 60)))
            return messages

    messages = asyncio.run(talk())
    kinds = [m["type"] for m in messages]
    assert kinds[0] == "chunk" and kinds[-1] == "done" and "timestamps" in kinds, kinds
    assert set(kinds) == {"chunk", "timestamps", "done"}
    samples = sum(len(base64.b64decode(m["data"])) // 2 for m in messages if m["type"] == "chunk")
    stamps = [m for m in messages if m["type"] == "timestamps"]
    assert all(m["context_id"] == "c1" and m["done"] is False for m in stamps)
    joined = {key: [v for m in stamps for v in m["word_timestamps"][key]] for key in ("words", "start", "end")}
    _check(joined["words"], joined["start"], joined["end"], TEXT, samples / SAMPLE_RATE)
    assert server.metric('lyre_word_timestamps_audio_seconds_total{api="websocket"}') > 0
    assert server.metric("lyre_aligner_aligned_seconds") > 0  # its own Whisper: the server has no --stt


def test_sse_events_carry_the_words_between_the_audio_deltas(server: Server) -> None:
    events = []
    with httpx.stream("POST", f"{server.url}/v1/audio/speech", timeout=60,
                      json={"input": TEXT, "voice": "tara", "response_format": "pcm", "stream_format": "sse",
                            "timestamps": True}) as response:
        assert response.status_code == 200, response.read()
        for line in response.iter_lines():
            if line.startswith("data: "):
                events.append(json.loads(line[6:]))
    kinds = [e["type"] for e in events]
    assert kinds[0] == "speech.audio.delta" and kinds[-1] == "speech.audio.done", kinds
    assert set(kinds) == {"speech.audio.delta", "speech.word_timestamps", "speech.audio.done"}
    samples = sum(len(base64.b64decode(e["audio"])) // 2 for e in events if e["type"] == "speech.audio.delta")
    stamps = [e["word_timestamps"] for e in events if e["type"] == "speech.word_timestamps"]
    _check([w for s in stamps for w in s["words"]], [t for s in stamps for t in s["start"]],
           [t for s in stamps for t in s["end"]], TEXT, samples / SAMPLE_RATE)


def test_a_whole_file_with_its_words_comes_as_one_json_answer(server: Server) -> None:
    response = httpx.post(f"{server.url}/v1/audio/speech", timeout=60,
                          json={"input": TEXT, "voice": "tara", "response_format": "wav", "timestamps": True})
    assert response.status_code == 200, response.text
    assert response.headers["content-type"] == "application/json"
    answer = response.json()
    assert answer["content_type"] == "audio/wav"
    with wave.open(io.BytesIO(base64.b64decode(answer["audio"]))) as wav:
        duration = wav.getnframes() / wav.getframerate()
    assert abs(answer["duration"] - duration) < 0.01
    words = answer["words"]
    _check([w["text"] for w in words], [w["start"] for w in words], [w["end"] for w in words], TEXT, duration)


def test_asking_for_word_times_wrongly_is_named(server: Server) -> None:
    response = httpx.post(f"{server.url}/v1/audio/speech", timeout=30,
                          json={"input": "Hi.", "timestamps": "sometimes"})
    assert response.status_code in (400, 422) and "timestamps" in response.text

    async def ask(extra: dict[str, Any]) -> dict[str, Any]:
        async with connect(f"{server.ws_url}/v1/tts/websocket") as ws:
            await ws.send(json.dumps({"context_id": "bad", "transcript": "Hi.", "continue": False, **extra}))
            return json.loads(await asyncio.wait_for(ws.recv(), 30))

    wrong = asyncio.run(ask({"add_timestamps": "yes"}))
    assert wrong["type"] == "error" and "add_timestamps" in wrong["error"]
    phonemes = asyncio.run(ask({"add_timestamps": True, "add_phoneme_timestamps": True}))
    assert phonemes["type"] == "error" and "add_phoneme_timestamps" in phonemes["error"]
