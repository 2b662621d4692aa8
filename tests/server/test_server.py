"""`lyre serve` as a real process on loopback, talked to with real clients."""

from __future__ import annotations

import asyncio
import base64
import io
import json
import time
import wave
from collections.abc import Iterator
from typing import Any

import httpx
import numpy as np
import openai
import pytest
from websockets.asyncio.client import connect

from lyre.orpheus import SAMPLE_RATE, SAMPLES_PER_FRAME
from lyre.stt import written_words
from serving import Server, running_server

pytestmark = pytest.mark.slow

SHORT = {"max_tokens": 70, "seed": 1}  # 10 frames of the demo model: quick on a CPU


@pytest.fixture(scope="module")
def server() -> Iterator[Server]:
    with running_server("--max-streams", "4", "--max-queue", "8") as s:
        yield s


@pytest.fixture(scope="module")
def client(server: Server) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{server.url}/v1", api_key="unused", max_retries=0)


def test_openai_sdk_gets_a_wav(client: openai.OpenAI) -> None:
    audio = client.audio.speech.create(model="orpheus", voice="tara", input="Hello there.", response_format="wav",
                                       extra_body={**SHORT, "trim_silence": False})
    data = audio.read()
    assert data[:4] == b"RIFF" and data[8:12] == b"WAVE"
    samples = (len(data) - 44) // 2
    assert samples == 10 * SAMPLES_PER_FRAME


def test_openai_sdk_streams_pcm_as_it_is_made(client: openai.OpenAI) -> None:
    arrivals = []
    with client.audio.speech.with_streaming_response.create(
        model="orpheus", voice="leo", input="Streaming, please.", response_format="pcm",
        extra_body={"max_tokens": 140, "seed": 2, "trim_silence": False},
    ) as response:
        assert response.headers["content-type"].startswith("audio/pcm")
        total = 0
        for chunk in response.iter_bytes():
            arrivals.append(time.perf_counter())
            total += len(chunk)
    assert total == 20 * SAMPLES_PER_FRAME * 2
    assert len(arrivals) > 2  # several pieces, not one body at the end
    assert arrivals[-1] - arrivals[0] > 0.2


@pytest.mark.parametrize(("fmt", "content_type"), [
    ("pcm", "audio/pcm"), ("mp3", "audio/mpeg"), ("opus", "audio/ogg"), ("flac", "audio/flac"),
    ("aac", "audio/aac"), ("mulaw", "audio/basic"), ("alaw", "audio/x-alaw-basic"),
])
def test_every_format_streams_bytes(server: Server, fmt: str, content_type: str) -> None:
    r = httpx.post(f"{server.url}/v1/audio/speech", timeout=60,
                   json={"input": "Format check.", "voice": "mia", "response_format": fmt, **SHORT})
    assert r.status_code == 200, r.text
    assert r.headers["content-type"].startswith(content_type)
    assert len(r.content) > 100


def test_sse_sends_delta_events_then_done_with_usage(server: Server) -> None:
    events = []
    with httpx.stream("POST", f"{server.url}/v1/audio/speech", timeout=60, json={
        "input": "Events.", "voice": "zac", "response_format": "pcm", "stream_format": "sse",
        "trim_silence": False, **SHORT,
    }) as r:
        assert r.headers["content-type"].startswith("text/event-stream")
        for line in r.iter_lines():
            if line.startswith("data: "):
                events.append(json.loads(line[6:]))
    # The demo runs the one segment to its max_tokens: the cut is told beside the audio.
    assert {e["type"] for e in events[:-1]} == {"speech.audio.delta", "speech.segment_cut"}
    assert sum(len(base64.b64decode(e["audio"])) for e in events[:-1] if "audio" in e) == 10 * SAMPLES_PER_FRAME * 2
    done = events[-1]
    assert done["type"] == "speech.audio.done"
    assert done["usage"]["output_tokens"] == 70 and done["usage"]["total_tokens"] > 70


@pytest.mark.parametrize(("body", "needle"), [
    ({"input": "Hi.", "speed": 5}, "speed"),
    ({"input": "Hi.", "speed": 0.1}, "speed"),
    ({"input": "Hi.", "voice": "nobody"}, "unknown voice 'nobody'"),
    ({"input": "Hi.", "response_format": "ogg"}, "response_format"),
    ({"input": 5}, "input"),
    ({"voice": "tara"}, "input"),
    ({"input": "x" * 5000}, "5000"),
    ({"input": "   "}, "empty"),
    ({"input": "Hi.", "temperature": "hot"}, "temperature"),
    ({"input": "Hi.", "max_tokens": 0}, "max_tokens"),
    ({"input": "Hi.", "instructions": "whisper"}, "instructions"),
])
def test_bad_requests_are_4xx_naming_the_problem(server: Server, body: dict, needle: str) -> None:
    r = httpx.post(f"{server.url}/v1/audio/speech", json=body, timeout=30)
    assert r.status_code == 400, r.text
    assert needle in r.json()["error"]["message"]


def test_malformed_json_is_a_400(server: Server) -> None:
    r = httpx.post(f"{server.url}/v1/audio/speech", content=b"{not json", timeout=30,
                   headers={"content-type": "application/json"})
    assert r.status_code == 400
    assert "JSON" in r.json()["error"]["message"]


def test_voices_models_health_ready_and_metrics(server: Server) -> None:
    voices = httpx.get(f"{server.url}/v1/audio/voices").json()["voices"]
    assert {v["id"] for v in voices} >= {"tara", "leo", "zoe"}
    assert [m["id"] for m in httpx.get(f"{server.url}/v1/models").json()["data"]] == ["orpheus"]
    chat = httpx.post(f"{server.url}/v1/chat/completions", json={"messages": [{"role": "user", "content": "Hi"}]})
    assert chat.status_code == 404 and "--llm" in chat.json()["error"]["message"]  # no chat model served
    health = httpx.get(f"{server.url}/health").json()
    assert health["status"] == "ok" and health["summary"]["max_streams"] == 4  # the start-up summary's facts
    assert httpx.get(f"{server.url}/ready").status_code == 200
    httpx.post(f"{server.url}/v1/audio/speech", json={"input": "Count me.", **SHORT}, timeout=60)
    for name in ("lyre_time_to_first_audio_seconds_count", "lyre_tokens_generated_total", "lyre_engine_steps_total",
                 "lyre_codec_rows_total", "lyre_active_streams", "lyre_queued_requests"):
        assert server.metric(name) >= 0
    assert server.metric("lyre_time_to_first_audio_seconds_count") >= 1


def _pcm(server: Server, voice: str) -> np.ndarray:
    r = httpx.post(f"{server.url}/v1/audio/speech", timeout=60, json={
        "input": "Same words.", "voice": voice, "response_format": "pcm", "trim_silence": False, **SHORT})
    assert r.status_code == 200, r.text
    return np.frombuffer(r.content, dtype="<i2").astype(np.float64)


def test_openai_voice_names_speak_as_the_voice_they_stand_for(server: Server) -> None:
    listing = httpx.get(f"{server.url}/v1/audio/voices").json()["voices"]
    aliases = {v["id"]: v["alias_of"] for v in listing if "alias_of" in v}
    assert {"alloy", "ash", "ballad", "cedar", "coral", "echo", "fable", "marin", "nova", "onyx", "sage", "shimmer",
            "verse"} <= set(aliases)
    assert aliases["alloy"] == "tara" and aliases["onyx"] != "tara"
    alloy, tara, onyx = _pcm(server, "alloy"), _pcm(server, "tara"), _pcm(server, "onyx")
    # Same prompt and seed: the same tokens, so the same audio up to where streamed window edges fell.
    assert len(alloy) == len(tara) > 0
    noise = np.sum((alloy - tara) ** 2) + 1e-9
    assert 10 * np.log10(np.sum(tara**2) / noise) > 25
    assert len(onyx) != len(tara) or not np.array_equal(onyx, tara)  # another voice: another prompt


def test_process_metrics_show_memory_cpu_and_file_descriptors(server: Server) -> None:
    assert server.metric("process_resident_memory_bytes") > 50e6
    assert server.metric("process_cpu_seconds_total") > 0
    assert 0 < server.metric("process_open_fds") < server.metric("process_max_fds")
    # The server's own: the engine's loop thread at least, and the tasks serving it (this scrape's among them).
    assert server.metric("lyre_python_threads") >= 2 and server.metric("lyre_event_loop_tasks") >= 1


def test_a_client_that_disconnects_frees_its_engine_slot(server: Server) -> None:
    before = server.metric("lyre_tokens_generated_total")
    with httpx.stream("POST", f"{server.url}/v1/audio/speech", timeout=60, json={
        "input": "This will be cut off.", "response_format": "pcm", "max_tokens": 1400, "seed": 3,
    }) as r:
        next(r.iter_bytes())
    deadline = time.monotonic() + 5
    while server.metric("lyre_engine_running") > 0 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert server.metric("lyre_engine_running") == 0
    made = server.metric("lyre_tokens_generated_total") - before
    assert made < 1400  # stopped long before max_tokens


def test_overload_gets_429_with_retry_after_and_memory_stays_bounded() -> None:
    with running_server("--max-streams", "1", "--max-queue", "1") as s:
        async def flood() -> list[httpx.Response]:
            async with httpx.AsyncClient(timeout=120) as http:
                return await asyncio.gather(*(
                    http.post(f"{s.url}/v1/audio/speech",
                              json={"input": "Flood.", "response_format": "pcm", "max_tokens": 21, "seed": i})
                    for i in range(12)
                ))

        first = asyncio.run(flood())
        rss_after_first = s.rss_kb()
        codes = sorted(r.status_code for r in first)
        assert 200 in codes and 429 in codes and set(codes) <= {200, 429}
        assert all(r.headers.get("retry-after") for r in first if r.status_code == 429)
        for _ in range(3):
            asyncio.run(flood())
        assert s.rss_kb() - rss_after_first < 100_000  # KB: repeated floods do not grow memory


def test_api_key_guards_everything_but_health() -> None:
    with running_server("--api-key", "s3cret", "--max-streams", "2") as s:
        assert httpx.get(f"{s.url}/health").status_code == 200
        assert httpx.get(f"{s.url}/ready").status_code == 200
        r = httpx.get(f"{s.url}/v1/models")
        assert r.status_code == 401 and r.headers["www-authenticate"] == "Bearer"
        assert httpx.get(f"{s.url}/v1/models", headers={"Authorization": "Bearer wrong"}).status_code == 401
        assert httpx.get(f"{s.url}/v1/models", headers={"Authorization": "Bearer s3cret"}).status_code == 200
        sdk = openai.OpenAI(base_url=f"{s.url}/v1", api_key="s3cret", max_retries=0)
        audio = sdk.audio.speech.create(model="orpheus", voice="tara", input="Keyed.", response_format="wav",
                                        extra_body=SHORT)
        with wave.open(io.BytesIO(audio.read())) as w:
            assert w.getframerate() == SAMPLE_RATE


def test_proxy_headers_are_believed_only_from_the_proxies_named(server: Server) -> None:
    # A redirect's Location is built from what the server believes of the request: the scheme and client a
    # trusted proxy says, else the connection's own. By default nobody on this host can pass as another.
    forwarded = {"X-Forwarded-Proto": "https", "X-Forwarded-For": "203.0.113.9"}

    def location(url: str) -> str:
        answer = httpx.get(f"{url}/v1/models/", headers=forwarded, follow_redirects=False, timeout=10)
        assert answer.status_code == 307, answer.text
        return answer.headers["location"]

    assert location(server.url).startswith("http://")
    with running_server("--max-streams", "1", "--forwarded-allow-ips", "127.0.0.1") as proxied:
        assert location(proxied.url).startswith("https://")


def test_adapter_routes_are_off_without_an_admin_key(server: Server) -> None:
    """This server has no --admin-key: whatever key is sent, the adapter admin routes are not there."""
    for key in ("admin-secret", "unused"):
        response = httpx.get(f"{server.url}/v1/adapters", headers={"Authorization": f"Bearer {key}"}, timeout=10)
        assert response.status_code == 404


# -- word timestamps ---------------------------------------------------------------------------------------
# This server runs without --stt: its aligner (Whisper base) is loaded on the first request that asks for word
# times. The demo model speaks noise, so where each word lands is meaningless; what holds on any audio is
# checked: written words come back in order, as written, each once, with times that are ordered, never
# overlap, last a frame at least and lie inside the audio, and the times arrive after the audio they describe.
# The demo never says end-of-speech, so every segment is cut on its budget, and a cut segment's words the
# aligner finds never spoken are left out (tests/server/test_segment_budgets.py).

WORDS_TEXT = "Hello there, my friend. It is 5 o'clock <laugh> and the tea is ready!"
WORDS_TOKENS = 105  # per sentence: 15 frames, 1.3 s


def _check_words(words: list[str], starts: list[float], ends: list[float], text: str, duration_s: float) -> None:
    """Written words in order, each once, at least one; times ordered, not overlapping, inside the audio."""
    written = iter(written_words(text))
    assert words and all(word in written for word in words), (words, text)
    assert len(starts) == len(ends) == len(words)
    assert all(0 <= s < e for s, e in zip(starts, ends)), (starts, ends)
    assert all(e <= s for e, s in zip(ends, starts[1:])), (starts, ends)
    assert ends[-1] <= duration_s + 0.01, (ends[-1], duration_s)


def test_the_websocket_sends_cartesia_timestamps_after_the_audio_and_before_done(server: Server) -> None:
    async def talk() -> list[dict[str, Any]]:
        async with connect(f"{server.ws_url}/v1/tts/websocket") as ws:
            first = WORDS_TEXT[:30]
            await ws.send(json.dumps({"context_id": "c1", "voice": {"mode": "id", "id": "tara"},
                                      "transcript": first, "continue": True, "add_timestamps": True,
                                      "max_tokens": WORDS_TOKENS}))
            await ws.send(json.dumps({"context_id": "c1", "transcript": WORDS_TEXT[30:], "continue": False}))
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
    _check_words(joined["words"], joined["start"], joined["end"], WORDS_TEXT, samples / SAMPLE_RATE)
    assert server.metric('lyre_word_timestamps_audio_seconds_total{api="websocket"}') > 0
    assert server.metric("lyre_aligner_aligned_seconds") > 0  # its own Whisper: the server has no --stt


def test_sse_events_carry_the_words_between_the_audio_deltas(server: Server) -> None:
    events = []
    with httpx.stream("POST", f"{server.url}/v1/audio/speech", timeout=60,
                      json={"input": WORDS_TEXT, "voice": "tara", "response_format": "pcm", "stream_format": "sse",
                            "timestamps": True, "max_tokens": WORDS_TOKENS}) as response:
        assert response.status_code == 200, response.read()
        for line in response.iter_lines():
            if line.startswith("data: "):
                events.append(json.loads(line[6:]))
    kinds = [e["type"] for e in events]
    assert kinds[0] == "speech.audio.delta" and kinds[-1] == "speech.audio.done", kinds
    assert set(kinds) - {"speech.segment_cut"} == {"speech.audio.delta", "speech.word_timestamps", "speech.audio.done"}
    samples = sum(len(base64.b64decode(e["audio"])) // 2 for e in events if e["type"] == "speech.audio.delta")
    stamps = [e["word_timestamps"] for e in events if e["type"] == "speech.word_timestamps"]
    _check_words([w for s in stamps for w in s["words"]], [t for s in stamps for t in s["start"]],
           [t for s in stamps for t in s["end"]], WORDS_TEXT, samples / SAMPLE_RATE)


def test_a_whole_file_with_its_words_comes_as_one_json_answer(server: Server) -> None:
    response = httpx.post(f"{server.url}/v1/audio/speech", timeout=60,
                          json={"input": WORDS_TEXT, "voice": "tara", "response_format": "wav", "timestamps": True,
                                "max_tokens": WORDS_TOKENS})
    assert response.status_code == 200, response.text
    assert response.headers["content-type"] == "application/json"
    answer = response.json()
    assert answer["content_type"] == "audio/wav"
    with wave.open(io.BytesIO(base64.b64decode(answer["audio"]))) as wav:
        duration = wav.getnframes() / wav.getframerate()
    assert abs(answer["duration"] - duration) < 0.01
    words = answer["words"]
    _check_words([w["text"] for w in words], [w["start"] for w in words], [w["end"] for w in words], WORDS_TEXT, duration)


def test_speed_plays_the_same_speech_faster_and_its_words_follow(server: Server) -> None:
    """OpenAI's speed (0.25-4.0), as every OpenAI TTS client sends it: the audio as made, time-stretched with
    its pitch kept (what each speed's answer holds, against the same seed's at 1.0), and the words' times
    told as played."""
    def spoken(speed: float) -> dict[str, Any]:
        response = httpx.post(f"{server.url}/v1/audio/speech", timeout=60, json={
            "input": WORDS_TEXT, "voice": "tara", "response_format": "wav", "timestamps": True, "speed": speed,
            "max_tokens": WORDS_TOKENS, "seed": 3, "trim_silence": False})
        assert response.status_code == 200, response.text
        return response.json()

    plain, fast, slow = spoken(1.0), spoken(2.0), spoken(0.5)
    assert plain["duration"] > 0.5
    for answer, speed in ((fast, 2.0), (slow, 0.5)):
        with wave.open(io.BytesIO(base64.b64decode(answer["audio"]))) as wav:
            duration = wav.getnframes() / wav.getframerate()
            assert wav.getframerate() == SAMPLE_RATE
        assert abs(answer["duration"] - duration) < 0.01
        assert abs(duration - plain["duration"] / speed) < 0.05 * plain["duration"] / speed, (duration, speed)
        words = answer["words"]
        _check_words([w["text"] for w in words], [w["start"] for w in words], [w["end"] for w in words], WORDS_TEXT,
                     duration)


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
