"""The voice agent on ``/v1/realtime``: a real ``lyre serve --stt --llm demo`` (demo TTS, Whisper base, SmolLM2)
driven over loopback by the ``openai`` SDK's realtime client and by a plain WebSocket client.

User turns are espeak-ng sentences streamed at real time. The demo TTS has
random weights: its audio is noise, so the tests check events, order, counts
and text, never sound. Each spoken segment is capped (``max_speech_tokens``)
to keep replies short on a CPU.
"""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import Iterator
from typing import Any

import pytest
from openai import AsyncOpenAI
from realtime_types import check_event
from serving import Server, running_server
from speech import SENTENCES, normalise, speak_pcm16
from websockets.asyncio.client import ClientConnection, connect

from lyre.tts.text import clean

SHORT = 35  # audio tokens per spoken segment: 5 frames, about 0.4 s of noise
CHUNK = 24 * 40 * 2  # 40 ms of 24 kHz pcm16
GA = {"type": "realtime", "instructions": "Answer in one short sentence.", "lyre": {"max_speech_tokens": SHORT},
      "audio": {"input": {"transcription": {"language": "en"}}, "output": {"voice": "tara"}}}


@pytest.fixture(scope="module")
def server() -> Iterator[Server]:
    with running_server("--stt", "--llm", "demo", "--llm-max-batch", "2", "--llm-max-seq-len", "1024",
                        "--max-streams", "4") as running:
        yield running


class Talk:
    """A plain WebSocket conversation whose events are all kept, each held to the openai SDK's GA types
    (tests/realtime_types.py) unless the session speaks the beta shape (``strict=False``); ``lyre``: the
    session asks for lyre's own events."""

    def __init__(self, ws: ClientConnection, strict: bool = True, lyre: bool = False) -> None:
        self.ws = ws
        self.events: list[dict[str, Any]] = []
        self.strict = strict
        self.lyre = lyre

    def _keep(self, text: str | bytes) -> None:
        event = json.loads(text)
        if self.strict:
            check_event(event, lyre=self.lyre)
        self.events.append(event)

    async def send(self, event: dict[str, Any] | str) -> None:
        await self.ws.send(event if isinstance(event, str) else json.dumps(event))

    async def until(self, kind: str, timeout: float = 120.0, count: int = 1) -> dict[str, Any]:
        """Read until the ``count``-th event of ``kind`` (counting those already read)."""
        async with asyncio.timeout(timeout):
            while len(self.of(kind)) < count:
                self._keep(await self.ws.recv())
        return self.of(kind)[count - 1]

    async def speak(self, pcm: bytes) -> None:
        """Stream pcm16 at real time in 40 ms appends, reading what arrives meanwhile."""
        for i in range(0, len(pcm), CHUNK):
            await self.send({"type": "input_audio_buffer.append",
                             "audio": base64.b64encode(pcm[i:i + CHUNK]).decode()})
            await self._drain(0.04)

    async def _drain(self, seconds: float) -> None:
        try:
            async with asyncio.timeout(seconds):
                while True:
                    self._keep(await self.ws.recv())
        except TimeoutError:
            pass

    def of(self, kind: str) -> list[dict[str, Any]]:
        return [e for e in self.events if e["type"] == kind]

    def kinds(self) -> list[str]:
        return [e["type"] for e in self.events]


def _silence(seconds: float) -> bytes:
    return bytes(2 * int(24_000 * seconds))


def _url(server: Server) -> str:
    return f"{server.ws_url}/v1/realtime?model=lyre"


def test_the_openai_sdk_holds_a_spoken_turn(server: Server) -> None:
    async def run() -> list[Any]:
        client = AsyncOpenAI(api_key="unused", base_url=f"{server.url}/v1")
        events = []
        async with client.realtime.connect(model="lyre") as conn:
            await conn.session.update(session=GA)  # type: ignore[arg-type]
            pcm = speak_pcm16(SENTENCES[3]) + _silence(1.0)
            for i in range(0, len(pcm), CHUNK):
                await conn.input_audio_buffer.append(audio=base64.b64encode(pcm[i:i + CHUNK]).decode())
                await asyncio.sleep(0.04)
            async with asyncio.timeout(120):
                async for event in conn:
                    events.append(event)
                    if event.type == "response.done":
                        break
        return events

    events = asyncio.run(run())
    kinds = [e.type for e in events]
    assert kinds[:2] == ["session.created", "session.updated"]
    assert events[1].session.audio.output.voice == "tara"
    # The turn, in the documented order.
    order = ["input_audio_buffer.speech_started", "input_audio_buffer.speech_stopped", "input_audio_buffer.committed",
             "conversation.item.input_audio_transcription.completed", "response.created",
             "response.output_item.added", "response.output_audio_transcript.delta", "response.output_audio.delta",
             "response.output_audio.done", "response.output_audio_transcript.done", "response.output_item.done",
             "response.done"]
    assert _in_order(kinds, order), kinds
    heard = next(e for e in events if e.type == "conversation.item.input_audio_transcription.completed")
    assert "pharmacy" in normalise(heard.transcript)
    done = events[-1]
    assert done.response.status == "completed"
    deltas = "".join(e.delta for e in events if e.type == "response.output_audio_transcript.delta")
    said = next(e for e in events if e.type == "response.output_audio_transcript.done").transcript
    assert deltas == said and said.strip()
    assert done.response.output[0].content[0].transcript == said
    audio = b"".join(base64.b64decode(e.delta) for e in events if e.type == "response.output_audio.delta")
    assert len(audio) > 0 and len(audio) % 2 == 0


def _in_order(kinds: list[str], order: list[str]) -> bool:
    """Every kind of ``order`` occurs, and each one's first occurrence comes after the one before's."""
    firsts = [kinds.index(k) if k in kinds else -1 for k in order]
    return -1 not in firsts and firsts == sorted(firsts)


def test_a_typed_turn_with_manual_commits_in_the_beta_shape(server: Server) -> None:
    async def run() -> Talk:
        async with connect(_url(server), max_size=None) as ws:
            talk = Talk(ws, strict=False)
            await talk.send({"type": "session.update", "session": {
                "modalities": ["audio", "text"], "voice": "leo", "turn_detection": None, "lyre": {"events": True},
                "speculative": False, "max_speech_tokens": SHORT, "instructions": "Answer in one short sentence."}})
            updated = await talk.until("session.updated")
            assert updated["session"]["voice"] == "leo" and updated["session"]["turn_detection"] is None
            await talk.send({"type": "conversation.item.create", "item": {
                "type": "message", "role": "user", "content": [{"type": "input_text", "text": "Say hello."}]}})
            await talk.send({"type": "response.create"})
            await talk.until("response.done")
            return talk

    talk = asyncio.run(run())
    assert talk.of("conversation.item.created")[0]["item"]["content"][0]["text"] == "Say hello."
    assert talk.of("response.audio.delta") and not talk.of("response.output_audio.delta")  # beta names
    done = talk.of("response.done")[0]["response"]
    assert done["status"] == "completed" and done["lyre"]["speculative"] is False
    said = talk.of("response.audio_transcript.done")[0]["transcript"]
    assert said == "".join(e["delta"] for e in talk.of("response.audio_transcript.delta"))
    # The demo speaks noise to every segment's max_tokens: each cut is told, on the reply's message item.
    cuts = talk.of("lyre.response.segment_cut")
    assert cuts and all(c["reason"] == "max_tokens" and c["max_tokens"] == SHORT // 7 * 7 for c in cuts)
    # A cut names its segment's text as the pipeline cleaned it (curly quotes made straight, symbols such as "_"
    # dropped; the chat model's words may have them).
    assert {c["item_id"] for c in cuts} == {done["output"][0]["id"]}
    assert " ".join(c["text"] for c in cuts) in clean(said)
    assert talk.kinds().index("lyre.response.segment_cut") < talk.kinds().index("response.done")


def test_speech_that_resumes_within_the_snooze_cancels_the_speculative_reply(server: Server) -> None:
    async def run() -> Talk:
        async with connect(_url(server), max_size=None) as ws:
            talk = Talk(ws, lyre=True)
            await talk.send({"type": "session.update", "session": {**GA, "lyre": {
                "events": True, "max_speech_tokens": SHORT, "smart_turn": False}, "audio": {
                "input": {"transcription": {"language": "en"},
                          "turn_detection": {"type": "server_vad", "silence_duration_ms": 3000}}}}})
            # 1.6 s of silence: past the possible end (200 ms) by time enough for a transcript and a held
            # reply on a busy CPU, short of the confirmed end (3 s).
            await talk.speak(speak_pcm16(SENTENCES[6]) + _silence(1.6) + speak_pcm16(SENTENCES[3]) + _silence(3.4))
            await talk.until("response.done")
            return talk

    talk = asyncio.run(run())
    assert len(talk.of("input_audio_buffer.committed")) == 1  # one turn: the pause did not end it
    (heard,) = talk.of("conversation.item.input_audio_transcription.completed")
    assert "works for me" in normalise(heard["transcript"]) and "pharmacy" in normalise(heard["transcript"])
    (created,) = talk.of("response.created")  # the thrown-away reply was never seen
    assert talk.kinds().index("response.created") > talk.kinds().index(
        "conversation.item.input_audio_transcription.completed")
    done = talk.of("response.done")[0]["response"]
    assert done["status"] == "completed" and done["lyre"]["discarded"] >= 1
    for name in ("lyre_engine_running", "lyre_chat_engine_running"):  # the thrown-away reply's slots too
        assert _settles(server, name), name


def test_the_end_of_turn_model_confirms_a_finished_sentence_before_the_silence_is_out(server: Server) -> None:
    async def run() -> Talk:
        async with connect(_url(server), max_size=None) as ws:
            talk = Talk(ws)
            await talk.send({"type": "session.update", "session": {**GA, "audio": {
                "input": {"transcription": {"language": "en"},
                          "turn_detection": {"type": "server_vad", "silence_duration_ms": 3000}}}}})
            await talk.speak(speak_pcm16(SENTENCES[3]) + _silence(3.5))
            await talk.until("response.done")
            return talk

    talk = asyncio.run(run())
    speech_ms = 1000 * len(speak_pcm16(SENTENCES[3])) // 48_000
    stopped = talk.of("input_audio_buffer.speech_stopped")[0]["audio_end_ms"]
    assert stopped < speech_ms + 2000  # confirmed well before 3 s of silence
    assert talk.of("response.done")[0]["response"]["status"] == "completed"


def test_an_agents_sdk_session_update_applies_though_the_chat_model_takes_no_tools(server: Server) -> None:
    """What OpenAI's Agents SDKs send on their defaults (semantic_vad, tools, another transcription model, a
    tracing setting) to a server whose built-in chat model takes no tools: everything else applies, the tools
    are told as refused under lyre.refused (not an error a strict client treats as fatal), and counted."""
    tools = [{"type": "function", "name": "get_weather", "description": "The weather in a city.",
              "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}]
    def refused() -> float:
        try:
            return server.metric('lyre_realtime_refused_total{param="session.tools"}')
        except KeyError:  # none counted yet
            return 0.0

    before = refused()

    async def run() -> Talk:
        async with connect(_url(server), max_size=None) as ws:
            talk = Talk(ws)
            await talk.send({"type": "session.update", "session": {
                "type": "realtime", "model": "gpt-realtime", "instructions": "Answer in one word.", "tools": tools,
                "output_modalities": ["audio"], "tracing": "auto", "audio": {
                    "input": {"format": {"type": "audio/pcm", "rate": 24_000},
                              "transcription": {"model": "gpt-4o-mini-transcribe"},
                              "turn_detection": {"type": "semantic_vad", "eagerness": "high",
                                                 "interrupt_response": True}},
                    "output": {"format": {"type": "audio/pcm", "rate": 24_000}, "voice": "tara"}}}})
            await talk.until("session.updated")
            return talk

    talk = asyncio.run(run())
    assert not talk.of("error")
    session = talk.of("session.updated")[0]["session"]
    assert session["instructions"] == "Answer in one word." and session["tools"] == tools
    assert session["audio"]["input"]["turn_detection"] == {"type": "semantic_vad", "eagerness": "high",
                                                           "create_response": True, "interrupt_response": True}
    assert [r["param"] for r in session["lyre"]["refused"]] == ["session.tools"]
    assert "takes no tools" in session["lyre"]["refused"][0]["message"]
    assert refused() == before + 1


def test_bad_input_is_named_and_the_session_goes_on(server: Server) -> None:
    async def run() -> Talk:
        async with connect(_url(server), max_size=None) as ws:
            talk = Talk(ws)
            bad = [
                {"type": "session.update", "session": {"type": "realtime", "audio": {
                    "output": {"format": {"type": "audio/opus"}}}}},
                {"type": "session.update", "session": {"type": "realtime", "audio": {
                    "input": {"format": {"type": "audio/pcm", "rate": 44_100}}}}},
                {"type": "session.update", "session": {"first_sentences": 0}},
                {"type": "response.cancel"},
                {"type": "conversation.item.truncate", "item_id": "item_nope", "content_index": 0, "audio_end_ms": 5},
                {"type": "conversation.item.create", "item": {"type": "message", "role": "user", "content": []}},
                {"type": "output_audio_buffer.clear"},
                {"type": "input_audio_buffer.append", "audio": "A" * (2 << 20)},
                "not json",
            ]
            for event in bad:
                await talk.send(event)
                await talk.until("error", count=len(talk.of("error")) + 1)
            await talk.send({"type": "session.update", "session": {"type": "realtime", "lyre": {
                "max_speech_tokens": SHORT, "speculative": False}}})
            await talk.until("session.updated", count=len(talk.of("session.updated")) + 1)
            await talk.send({"type": "conversation.item.create", "item": {
                "type": "message", "role": "user", "content": [{"type": "input_text", "text": "Hi!"}]}})
            await talk.send({"type": "response.create"})
            await talk.until("response.created")
            await talk.send({"type": "response.create"})  # one at a time
            await talk.until("error", count=len(bad) + 1)
            await talk.until("response.done")
            return talk

    talk = asyncio.run(run())
    errors = [e["error"] for e in talk.of("error")]
    assert "session.audio.output.format" in errors[0]["param"] and "audio/pcm" in errors[0]["message"]
    assert "44100" in errors[1]["message"]
    assert errors[2]["param"] == "session.first_sentences"  # lyre's own, where the client put it
    assert errors[3]["code"] == "response_cancel_not_active"
    assert errors[4]["code"] == "item_truncate_invalid_item_id"
    assert errors[5]["param"] == "item.content"
    assert "unknown event type 'output_audio_buffer.clear'" in errors[6]["message"]
    assert errors[7]["code"] == "message_too_large"
    assert errors[8]["code"] == "invalid_json"
    assert errors[9]["code"] == "conversation_already_has_active_response"
    assert talk.of("response.done")[0]["response"]["status"] == "completed"


def test_speech_over_a_reply_cancels_it_and_frees_its_slots(server: Server) -> None:
    async def run() -> Talk:
        async with connect(_url(server), max_size=None) as ws:
            talk = Talk(ws)
            await talk.send({"type": "session.update", "session": {**GA, "lyre": {"max_speech_tokens": 1500}, "audio": {
                "input": {"transcription": {"language": "en"},
                          "turn_detection": {"type": "server_vad", "create_response": False}}}}})
            await talk.send({"type": "conversation.item.create", "item": {
                "type": "message", "role": "user",
                "content": [{"type": "input_text", "text": "Tell me a long story about a cat."}]}})
            await talk.send({"type": "response.create"})
            await talk.until("response.output_audio.delta")
            await talk.speak(speak_pcm16(SENTENCES[6]) + _silence(1.0))
            await talk.until("response.done")
            await talk.until("conversation.item.input_audio_transcription.completed")
            return talk

    talk = asyncio.run(run())
    first = talk.of("response.done")[0]["response"]
    assert first["status"] == "cancelled"
    assert talk.kinds().index("input_audio_buffer.speech_started") < talk.kinds().index("response.done")
    assert len(talk.of("response.created")) == 1  # create_response off: the interruption got no reply
    for name in ("lyre_engine_running", "lyre_chat_engine_running"):
        assert _settles(server, name), name


def _settles(server: Server, metric: str) -> bool:
    """The gauge reaches 0 within a few seconds (the engine frees slots at its next step)."""
    import time

    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if server.metric(metric) == 0:
            return True
        time.sleep(0.2)
    return False


def test_the_playground_talks_through_the_browser_microphone_over_webrtc(server: Server, tmp_path: Any) -> None:
    import wave

    from browser import chromium
    from selenium.webdriver.common.by import By
    from selenium.common.exceptions import TimeoutException
    from selenium.webdriver.support.ui import WebDriverWait

    # Chromium's fake microphone plays this file in a loop: one question, then silence long enough for a
    # reply to start speaking on a busy 2-core machine before the question comes round again.
    wav = tmp_path / "question.wav"
    with wave.open(str(wav), "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(2)
        out.setframerate(24_000)
        out.writeframes(speak_pcm16(SENTENCES[3]) + _silence(15.0))
    browser = chromium(tmp_path / "profile", "--use-fake-ui-for-media-stream", "--use-fake-device-for-media-stream",
                       f"--use-file-for-fake-audio-capture={wav}")
    try:
        browser.get(f"{server.url}/")
        wait = WebDriverWait(browser, 120)
        wait.until(lambda d: d.execute_script("return document.getElementById('voice').options.length >= 8"))
        browser.find_element(By.ID, "talk").click()
        # A reply that spoke: a speculative one, cancelled when the question went on, ends without audio.
        try:
            wait.until(lambda d: d.execute_script("return window.lyreTalk.turns.some(t => t.firstAudio != null)"))
        except TimeoutException:
            pytest.fail(f"no reply spoke: {browser.find_element(By.ID, 'talkStatus').text!r}, "
                        f"{browser.execute_script('return window.lyreTalk')}")
        talk = browser.execute_script("return window.lyreTalk")
        transport = browser.find_element(By.ID, "transport").text
        rows = [row.text for row in browser.find_elements(By.CSS_SELECTOR, "#turns tbody tr")]
        browser.find_element(By.ID, "hangUp").click()
    finally:
        browser.quit()
    assert talk["transport"] == "webrtc" and transport == "over WebRTC"  # Chromium has WebRTC: the page uses it
    assert talk["events"]["input_audio_buffer.speech_started"] >= 1
    assert any("pharmacy" in normalise(t) for t in talk["transcripts"]), talk["transcripts"]
    # The live view's text as it firmed up: its early guesses vary with the machine's load (one run heard "im dust
    # of fire close today"), but they are words of what the caller said, as the final transcript has them.
    heard = set(normalise(" ".join(talk["transcripts"])).split())
    assert set(normalise(" ".join(talk["partials"])).split()) & heard, (talk["partials"], talk["transcripts"])
    # The file loops: the question asked again may cut the reply short (barge-in), so either ending counts.
    spoken = [turn for turn in talk["turns"] if turn.get("firstAudio") is not None]
    assert talk["audioBytes"] > 0 and spoken[0]["status"] in ("completed", "cancelled"), talk["turns"]
    assert rows and rows[0].split()[0] == "1"  # the turn is drawn on the timeline
