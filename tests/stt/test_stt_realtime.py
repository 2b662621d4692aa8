"""The realtime transcription session in process, on the demo Whisper base hearing espeak-ng.

Every Whisper pass costs a second or more on a small CPU: the model is loaded
once, audio is appended in one go where timing does not matter, and tests that
only need the events up to a commit close the session instead of waiting for
its final pass.
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from speech import SENTENCES, normalise, speak, speak_pcm16, wer

from lyre.common.g711 import alaw_encode, ulaw_encode
from lyre.stt import STTConfig, Transcriber
from lyre.stt.realtime import RealtimeConfig, RealtimeSession
from lyre.stt.realtime_events import EAGERNESS_SILENCE_MS

SILENCE_24K = bytes(2 * 24_000)  # one second of pcm16 at 24 kHz
TRANSCRIPTION = "conversation.item.input_audio_transcription"
MANUAL = {"type": "transcription_session.update",
          "session": {"input_audio_transcription": {"language": "en"}, "turn_detection": None}}
ENGLISH = {"type": "transcription_session.update", "session": {"input_audio_transcription": {"language": "en"}}}
# Whisper base's int8 kernels differ by CPU, and so do a few of the words it hears in espeak's speech: a
# transcript is held to a word error rate, or to words it hears right on every kernel set tried.
MAX_WER = 0.2


@pytest.fixture(scope="module")
def stt() -> Iterator[Transcriber]:
    transcriber = Transcriber.load()
    yield transcriber
    transcriber.close()


class Client:
    """A session whose events are collected, with helpers to send events and wait for replies."""

    def __init__(self, stt: Transcriber, config: RealtimeConfig | None = None) -> None:
        self.events: list[dict[str, Any]] = []
        self._arrived = asyncio.Event()
        self.session = RealtimeSession(stt, self._emit, config or RealtimeConfig())

    def _emit(self, event: dict[str, Any]) -> None:
        self.events.append(event)
        self._arrived.set()

    async def send(self, event: dict[str, Any] | str) -> dict[str, Any]:
        """Send one event; its reply, when it replies at once: its first error if it had one (an update applies
        what it can and names the rest), else the last event the session sent."""
        before = len(self.events)
        await self.session.receive(event if isinstance(event, str) else json.dumps(event))
        return next((e for e in self.events[before:] if e["type"] == "error"), self.events[-1])

    async def append(self, pcm: bytes) -> dict[str, Any]:
        return await self.send({"type": "input_audio_buffer.append", "audio": base64.b64encode(pcm).decode()})

    async def stream(self, pcm: bytes, chunk_ms: int = 100, pace: float = 1.0) -> None:
        """Append in chunks of ``chunk_ms``, at ``pace`` times real time (at 24 kHz)."""
        step = 24 * chunk_ms * 2
        for i in range(0, len(pcm), step):
            await self.append(pcm[i:i + step])
            await asyncio.sleep(chunk_ms / 1000 / pace)

    def of(self, kind: str) -> list[dict[str, Any]]:
        return [e for e in self.events if e["type"] == kind]

    async def wait_for(self, kind: str, count: int = 1, timeout: float = 60.0) -> dict[str, Any]:
        async with asyncio.timeout(timeout):
            while len(self.of(kind)) < count:
                self._arrived.clear()
                await self._arrived.wait()
        return self.of(kind)[count - 1]


def _error(event: dict[str, Any], code: str, *words: str, param: str | None = None) -> None:
    assert event["type"] == "error", event
    error = event["error"]
    assert error["type"] == "invalid_request_error" and error["code"] == code, error
    for word in words:
        assert word in error["message"], error
    if param is not None:
        assert error["param"] == param, error


def test_an_utterance_goes_from_speech_to_a_transcript(stt: Transcriber) -> None:
    async def run() -> Client:
        client = Client(stt)
        await client.send(ENGLISH)
        await client.stream(bytes(2 * 7200) + speak_pcm16(SENTENCES[0]) + SILENCE_24K, pace=2.0)
        await client.wait_for(f"{TRANSCRIPTION}.completed")
        await client.session.close()
        return client

    client = asyncio.run(run())
    kinds = [e["type"] for e in client.events if e["type"] != f"{TRANSCRIPTION}.delta"]
    assert kinds == ["transcription_session.created", "transcription_session.updated",
                     "input_audio_buffer.speech_started", "input_audio_buffer.speech_stopped",
                     "input_audio_buffer.committed", f"{TRANSCRIPTION}.completed"]
    assert len({e["event_id"] for e in client.events}) == len(client.events)
    started, stopped, committed = (client.of(f"input_audio_buffer.{k}")[0]
                                   for k in ("speech_started", "speech_stopped", "committed"))
    completed = client.of(f"{TRANSCRIPTION}.completed")[0]
    item = started["item_id"]
    assert stopped["item_id"] == committed["item_id"] == completed["item_id"] == item
    assert committed["previous_item_id"] is None
    # 300 ms of silence, then speech: its start less the 300 ms prefix is about 0.
    assert 0 <= started["audio_start_ms"] <= 150
    speech_ms = len(speak_pcm16(SENTENCES[0])) // 48
    assert 300 + speech_ms <= stopped["audio_end_ms"] <= 300 + speech_ms + 800
    assert completed["content_index"] == 0 and completed["usage"]["type"] == "duration"
    heard = normalise(completed["transcript"]).split()
    assert sum(w in heard for w in ("book", "table", "dinner", "tomorrow", "evening")) >= 4, heard
    # The deltas only ever add: the first starts the text, each later one adds " words".
    deltas = [e["delta"] for e in client.of(f"{TRANSCRIPTION}.delta")]
    assert all(e["item_id"] == item and e["content_index"] == 0 for e in client.of(f"{TRANSCRIPTION}.delta"))
    assert deltas and not deltas[0].startswith(" ") and all(d.startswith(" ") for d in deltas[1:])
    assert all(d.strip() and "  " not in d for d in deltas)
    assert client.events.index(client.of(f"{TRANSCRIPTION}.delta")[-1]) < client.events.index(completed)


def test_manual_commits_transcribe_everything_since_the_last_one(stt: Transcriber) -> None:
    async def run() -> Client:
        client = Client(stt)
        assert (await client.send(MANUAL))["session"]["turn_detection"] is None
        for text in (SENTENCES[6], SENTENCES[2]):
            await client.append(SILENCE_24K[:9600] + speak_pcm16(text))
            assert (await client.send({"type": "input_audio_buffer.commit"}))["type"] == "input_audio_buffer.committed"
        await client.wait_for(f"{TRANSCRIPTION}.completed", 2)
        await client.session.close()
        return client

    client = asyncio.run(run())
    assert not client.of("input_audio_buffer.speech_started") and not client.of("input_audio_buffer.speech_stopped")
    first, second = client.of("input_audio_buffer.committed")
    assert (first["previous_item_id"], second["previous_item_id"]) == (None, first["item_id"])
    done = client.of(f"{TRANSCRIPTION}.completed")
    assert [d["item_id"] for d in done] == [first["item_id"], second["item_id"]]
    assert wer([SENTENCES[6], SENTENCES[2]], [d["transcript"] for d in done]) <= MAX_WER, done


@pytest.mark.parametrize("fmt, encode", [({"type": "audio/pcmu"}, ulaw_encode), ("g711_alaw", alaw_encode)])
def test_telephone_audio_is_taken_as_it_comes(stt: Transcriber, fmt: Any, encode: Any) -> None:
    """G.711 at 8 kHz (a phone line's audio, passed through by a client), either law, either shape."""
    async def run() -> Client:
        client = Client(stt)
        shape = ({"type": "session.update", "session": {"type": "transcription", "audio": {"input": {
            "format": fmt, "turn_detection": None}}}} if isinstance(fmt, dict) else
                 {"type": "transcription_session.update", "session": {"input_audio_format": fmt,
                                                                       "turn_detection": None}})
        updated = await client.send(shape)
        assert updated["type"].endswith("session.updated"), updated
        phone = (np.clip(speak(SENTENCES[6], 8_000), -1, 1) * 32767).astype("<i2").tobytes()
        await client.append(encode(phone))
        await client.send({"type": "input_audio_buffer.commit"})
        await client.wait_for(f"{TRANSCRIPTION}.completed")
        await client.session.close()
        return client

    client = asyncio.run(run())
    updated = client.of("session.updated") or client.of("transcription_session.updated")
    shown = updated[0]["session"]
    assert (shown["audio"]["input"]["format"] if isinstance(fmt, dict) else shown["input_audio_format"]) == fmt
    assert wer([SENTENCES[6]], [client.of(f"{TRANSCRIPTION}.completed")[0]["transcript"]]) <= MAX_WER


def test_bad_events_are_refused_by_name_and_the_session_goes_on(stt: Transcriber) -> None:
    def pcm_event(audio: str) -> dict[str, Any]:
        return {"type": "input_audio_buffer.append", "audio": audio}

    def beta(session: dict[str, Any]) -> dict[str, Any]:
        return {"type": "transcription_session.update", "session": session}

    def ga(audio_input: dict[str, Any], **session: Any) -> dict[str, Any]:
        return {"type": "session.update", "session": {"type": "transcription", **session,
                                                      "audio": {"input": audio_input}}}

    async def run() -> Client:
        client = Client(stt, RealtimeConfig(max_message_bytes=200_000))
        await client.send(MANUAL)
        _error(await client.send("{not json"), "invalid_json", "not valid JSON")
        _error(await client.send("[1, 2]"), "invalid_event", "JSON object with a string type")
        unknown = await client.send({"type": "response.create", "event_id": "evt_7"})
        _error(unknown, "invalid_event", "unknown event type 'response.create'", "input_audio_buffer.append",
               param="type")
        assert unknown["error"]["event_id"] == "evt_7"
        _error(await client.send({"type": "input_audio_buffer.append"}), "invalid_type", "needs audio", param="audio")
        _error(await client.send(pcm_event("AAA")), "invalid_audio", "not valid base64", param="audio")
        _error(await client.send(pcm_event("@@@@")), "invalid_audio", "not valid base64")
        _error(await client.send(pcm_event(base64.b64encode(b"abc").decode())), "invalid_audio", "2-byte", "3 bytes")
        _error(await client.send(pcm_event("A" * 300_000)), "message_too_large", "over the limit of 200000")
        _error(await client.send(beta({"input_audio_format": "g722"})), "invalid_value", "must be 'pcm16', 'g711_ulaw'",
               param="session.input_audio_format")
        _error(await client.send(ga({"format": {"type": "audio/opus"}})), "invalid_value", "'audio/opus'")
        _error(await client.send(ga({"format": {"type": "audio/pcm", "rate": 44_100}})), "invalid_value",
               "44100 is not supported", "24000 or 16000", param="session.audio.input.format.rate")
        _error(await client.send({"type": "session.update", "session": {"type": "realtime"}}), "invalid_value",
               "transcription sessions only", param="session.type")
        _error(await client.send(beta({"turn_detection": {"type": "semantic_vad", "eagerness": "eager"}})),
               "invalid_value", "eagerness must be one of low, medium, auto, high",
               param="session.turn_detection.eagerness")
        _error(await client.send(beta({"turn_detection": {"type": "push_to_talk"}})), "invalid_value",
               "'push_to_talk' is not supported", param="session.turn_detection.type")
        _error(await client.send(beta({"turn_detection": {"threshold": 2}})), "invalid_value", "threshold must be")
        _error(await client.send(beta({"input_audio_transcription": {"language": "xx"}})), "invalid_value",
               "ISO-639-1", param="session.input_audio_transcription.language")
        _error(await client.send(beta({"input_audio_transcription": {"prompt": "word " * 300}})), "invalid_value",
               "prompt must be at most 1000 characters")
        _error(await client.send(beta({"input_audio_transcription": {"language": 7}})), "invalid_type", "must be a string")
        _error(await client.send({"type": "session.update", "session": "pcm16"}), "invalid_type", "must be an object")
        _error(await client.send({"type": "input_audio_buffer.commit", "event_id": "evt_9"}),
               "input_audio_buffer_commit_empty", "buffer too small", "at least 100ms", "0.00ms")
        # None of the refused updates changed anything: still manual, English, 24 kHz.
        assert (await client.send({"type": "session.update", "session": {}}))["session"]["audio"]["input"] == {
            "format": {"type": "audio/pcm", "rate": 24_000}, "noise_reduction": None, "turn_detection": None,
            "transcription": {"model": "whisper-1", "language": "en", "prompt": ""}}
        await client.append(speak_pcm16(SENTENCES[6]))
        await client.send({"type": "input_audio_buffer.commit"})
        await client.wait_for(f"{TRANSCRIPTION}.completed")
        await client.session.close()
        return client

    client = asyncio.run(run())
    assert "works for me" in normalise(client.of(f"{TRANSCRIPTION}.completed")[0]["transcript"])


def test_an_update_applies_what_it_can_and_semantic_vad_is_reported_as_set(stt: Transcriber) -> None:
    async def run() -> Client:
        client = Client(stt)
        # The format is refused, by name; the transcription and the turn detection still apply.
        await client.send({"type": "session.update", "event_id": "evt_1", "session": {
            "type": "transcription", "audio": {"input": {
                "format": {"type": "audio/pcm", "rate": 8000}, "transcription": {"language": "en"},
                "turn_detection": {"type": "semantic_vad", "eagerness": "low"}}}}})
        return client

    client = asyncio.run(run())
    (error,) = client.of("error")
    assert error["error"]["param"] == "session.audio.input.format.rate" and error["error"]["event_id"] == "evt_1"
    audio_in = client.of("session.updated")[-1]["session"]["audio"]["input"]
    assert audio_in["format"]["rate"] == 24_000 and audio_in["transcription"]["language"] == "en"
    assert audio_in["turn_detection"] == {"type": "semantic_vad", "eagerness": "low"}
    vad = client.session.settings.turn_detection
    assert vad is not None and vad.silence_duration_ms == EAGERNESS_SILENCE_MS["low"]


def test_a_handler_that_fails_is_an_error_for_its_event_and_the_session_goes_on(
        stt: Transcriber, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    def broken(self: RealtimeSession, event: dict[str, Any]) -> None:
        raise KeyError("rate")  # a bug in lyre, not the client's fault

    monkeypatch.setitem(RealtimeSession._handlers, "input_audio_buffer.clear", broken)

    async def run() -> Client:
        client = Client(stt)
        error = await client.send({"type": "input_audio_buffer.clear", "event_id": "mine"})
        assert error["type"] == "error" and error["error"]["type"] == "server_error", error
        assert error["error"]["event_id"] == "mine" and "input_audio_buffer.clear" in error["error"]["message"]
        assert (await client.send(MANUAL))["type"] == "transcription_session.updated"  # it goes on
        await client.session.close()
        return client

    with caplog.at_level(logging.ERROR):
        asyncio.run(run())
    assert any(record.exc_info for record in caplog.records)  # its traceback is in the log


def test_clear_empties_the_buffer(stt: Transcriber) -> None:
    async def run() -> None:
        client = Client(stt)
        assert (await client.send({"type": "input_audio_buffer.clear"}))["type"] == "input_audio_buffer.cleared"
        await client.send(MANUAL)
        await client.append(speak_pcm16(SENTENCES[6]))
        assert (await client.send({"type": "input_audio_buffer.clear"}))["type"] == "input_audio_buffer.cleared"
        _error(await client.send({"type": "input_audio_buffer.commit"}), "input_audio_buffer_commit_empty", "0.00ms")
        await client.session.close()
        assert not client.of("input_audio_buffer.committed")

    asyncio.run(run())


def test_with_manual_commits_an_append_over_the_limit_is_refused(stt: Transcriber) -> None:
    async def run() -> None:
        client = Client(stt, RealtimeConfig(max_buffer_s=1.0))
        await client.send(MANUAL)
        assert (await client.append(SILENCE_24K[:38_400]))["type"] == "transcription_session.updated"  # 0.8 s
        _error(await client.append(SILENCE_24K[:24_000]), "input_audio_buffer_full", "1.3 s", "limit of 1 s",
               "append was dropped", param="audio")
        # Nothing of the refused append was kept: 0.2 s more fits, and then nothing.
        await client.append(SILENCE_24K[:9_600])
        assert len(client.of("error")) == 1
        _error(await client.append(SILENCE_24K[:480]), "input_audio_buffer_full", "1.0 s")
        await client.session.close()

    asyncio.run(run())


def test_with_vad_a_long_utterance_is_cut_at_the_limit(stt: Transcriber) -> None:
    async def run() -> Client:
        client = Client(stt, RealtimeConfig(max_buffer_s=1.5))
        await client.append(speak_pcm16(SENTENCES[4]) + SILENCE_24K)  # 2.2 s of speech
        await client.session.close()  # the final passes are not needed
        return client

    client = asyncio.run(run())
    kinds = [e["type"].removeprefix("input_audio_buffer.") for e in client.events[1:]]
    assert kinds == ["speech_started", "speech_stopped", "committed", "speech_started", "speech_stopped", "committed"]
    first, cut, second, end = (client.events[i] for i in (1, 2, 4, 5))
    assert cut["audio_end_ms"] - first["audio_start_ms"] == 1500
    assert second["audio_start_ms"] == cut["audio_end_ms"] and second["item_id"] != first["item_id"]
    assert end["audio_end_ms"] > second["audio_start_ms"]


def test_updates_answer_in_the_shape_they_came_in(stt: Transcriber) -> None:
    async def run() -> Client:
        client = Client(stt)
        await client.send({"type": "transcription_session.update", "event_id": "e1", "session": {
            "input_audio_format": "pcm16", "input_audio_noise_reduction": {"type": "near_field"},
            "input_audio_transcription": {"model": "gpt-4o-transcribe", "language": "EN", "prompt": "lyre"},
            "turn_detection": {"type": "server_vad", "threshold": 0.6, "silence_duration_ms": 700},
        }})
        await client.send({"type": "session.update", "session": {
            "type": "transcription", "include": ["item.input_audio_transcription.logprobs"],
            "audio": {"input": {"format": {"type": "audio/pcm", "rate": 16_000}}}}})
        await client.session.close()
        return client

    client = asyncio.run(run())
    created, beta, ga = client.events
    assert created["type"] == "transcription_session.created"
    assert created["session"]["turn_detection"] == {"type": "server_vad", "threshold": 0.5,
                                                    "prefix_padding_ms": 300, "silence_duration_ms": 500}
    assert beta["type"] == "transcription_session.updated"
    assert beta["session"]["input_audio_transcription"] == {"model": "gpt-4o-transcribe", "language": "en",
                                                            "prompt": "lyre"}
    # A turn_detection object is read whole: its missing fields take the defaults.
    assert beta["session"]["turn_detection"] == {"type": "server_vad", "threshold": 0.6, "prefix_padding_ms": 300,
                                                 "silence_duration_ms": 700}
    assert ga["type"] == "session.updated" and ga["session"]["type"] == "transcription"
    audio_input = ga["session"]["audio"]["input"]
    assert audio_input["format"] == {"type": "audio/pcm", "rate": 16_000}
    assert audio_input["transcription"]["language"] == "en"  # left out of the update: kept
    assert audio_input["turn_detection"]["threshold"] == 0.6


def test_the_rate_can_change_between_appends(stt: Transcriber) -> None:
    async def run() -> Client:
        client = Client(stt)
        await client.send(MANUAL)
        at_24k, at_16k = speak_pcm16(SENTENCES[6]), speak_pcm16(SENTENCES[6], 16_000)
        half = len(at_24k) // 4 * 2
        await client.append(at_24k[:half])
        await client.send({"type": "session.update", "session": {"audio": {"input": {"format": {
            "type": "audio/pcm", "rate": 16_000}}}}})
        await client.append(at_16k[len(at_16k) // 4 * 2:])
        await client.send({"type": "input_audio_buffer.commit"})
        await client.wait_for(f"{TRANSCRIPTION}.completed")
        await client.session.close()
        return client

    client = asyncio.run(run())
    completed = client.of(f"{TRANSCRIPTION}.completed")[0]
    assert completed["usage"]["seconds"] == pytest.approx(2.21, abs=0.02)
    assert "works for me" in normalise(completed["transcript"])


def test_close_cancels_every_pass_and_sends_nothing_more(stt: Transcriber) -> None:
    async def run() -> None:
        client = Client(stt)
        await client.send(MANUAL)
        for text in (SENTENCES[6], SENTENCES[4], SENTENCES[12]):
            await client.append(speak_pcm16(text))
            await client.send({"type": "input_audio_buffer.commit"})
        await asyncio.sleep(0)  # the final passes are queued
        assert client.session.busy
        sent = len(client.events)
        await client.session.close()
        assert not client.session.busy
        assert asyncio.all_tasks() == {asyncio.current_task()}
        assert stt.stats().pending == 0  # the queued finals were dropped
        await asyncio.sleep(0.1)
        assert len(client.events) == sent

    asyncio.run(run())


def test_audio_positions_count_from_the_session_start(stt: Transcriber) -> None:
    async def run() -> Client:
        client = Client(stt)
        await client.append(SILENCE_24K * 3)  # kept only as far back as the prefix padding needs
        assert client.session._buffer.size <= 16_000 // 2
        await client.append(speak_pcm16(SENTENCES[6]) + SILENCE_24K)
        await client.session.close()
        return client

    client = asyncio.run(run())
    started = client.of("input_audio_buffer.speech_started")[0]
    assert 2700 <= started["audio_start_ms"] <= 3100
    assert np.isclose(client.of("input_audio_buffer.speech_stopped")[0]["audio_end_ms"], 3000 + 2210 + 500, atol=400)


def test_a_final_pass_that_cannot_run_is_reported_as_failed(stt: Transcriber) -> None:
    closed = Transcriber(stt.model, STTConfig())  # the module's model, behind a worker already stopped
    closed.close()

    async def run() -> dict[str, Any]:
        client = Client(closed)
        await client.send(MANUAL)
        await client.append(speak_pcm16(SENTENCES[6]))
        committed = await client.send({"type": "input_audio_buffer.commit"})
        failed = await client.wait_for(f"{TRANSCRIPTION}.failed")
        await client.session.close()
        assert failed["item_id"] == committed["item_id"] and not client.of(f"{TRANSCRIPTION}.completed")
        return failed

    error = asyncio.run(run())["error"]
    assert error["type"] == "server_error" and error["code"] == "server_closing" and "shut down" in error["message"]


def test_a_commit_during_detected_speech_ends_the_utterance_there(stt: Transcriber) -> None:
    async def run() -> Client:
        client = Client(stt)
        speech = speak_pcm16(SENTENCES[4])
        half = len(speech) // 4 * 2
        await client.append(speech[:half])
        await client.send({"type": "input_audio_buffer.commit"})
        await client.append(speech[half:] + SILENCE_24K)  # still speaking: a new utterance
        await client.session.close()  # the final passes are not needed
        return client

    client = asyncio.run(run())
    kinds = [e["type"].removeprefix("input_audio_buffer.") for e in client.events[1:]]
    assert kinds == ["speech_started", "speech_stopped", "committed"] * 2
    first, second = client.of("input_audio_buffer.committed")
    assert second["previous_item_id"] == first["item_id"] != second["item_id"]
    stopped = client.of("input_audio_buffer.speech_stopped")[0]
    assert client.of("input_audio_buffer.speech_started")[1]["audio_start_ms"] >= stopped["audio_end_ms"]


def test_a_large_append_is_worked_out_off_the_event_loop(stt: Transcriber, monkeypatch: pytest.MonkeyPatch) -> None:
    import threading

    from lyre.stt.realtime_input import INLINE_BYTES, AudioIn

    threads: list[threading.Thread] = []
    score = AudioIn._score

    def watched(self: AudioIn, audio: np.ndarray) -> Any:
        threads.append(threading.current_thread())
        return score(self, audio)

    monkeypatch.setattr(AudioIn, "_score", watched)

    async def run() -> None:
        client = Client(stt)
        await client.append(SILENCE_24K * 4)  # 192 kB: resampling and VAD hold the loop no longer
        await client.append(SILENCE_24K[:INLINE_BYTES])  # a microphone's append: cheaper than the hop
        await client.session.close()

    asyncio.run(run())
    assert threads[0] is not threading.main_thread() and threads[1] is threading.main_thread()
