"""The voice agent over WebRTC (``POST /v1/realtime/calls``): a real ``lyre serve --stt`` on loopback,
thinking at a scripted endpoint (tests/scripted_thinker.py: the transport is under test, not the chat
model), called by the ``openai`` SDK's ``realtime.calls`` with an aiortc peer (tests/webrtc_peer.py) whose
microphone plays espeak-ng sentences at real time.

The demo TTS has random weights: its audio is noise, so the tests check events, timing and whether sound
arrived on the track, never what it sounds like. (The playground's call from headless Chromium is in
tests/test_agent.py, beside its WebSocket talk.)
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest
from openai import AsyncOpenAI
from scripted_thinker import IN_TWO_PARTS, REPLY, SECOND_PART, thinking_at
from serving import Server, running_server
from speech import SENTENCES, normalise, speak_pcm16
from webrtc_peer import CALLS, Peer, call
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed, InvalidStatus

SHORT = 35  # audio tokens per spoken segment: about 0.4 s of noise
SESSION = {"type": "realtime", "instructions": "Answer in one short sentence.", "max_speech_tokens": SHORT,
           "audio": {"input": {"transcription": {"language": "en"}}, "output": {"voice": "tara"}}}


@pytest.fixture(scope="module")
def server() -> Iterator[Server]:
    with thinking_at() as thinker, running_server("--stt", "--llm-url", thinker, "--llm-model", "scripted",
                                                  "--max-streams", "4", "--stt-max-sessions", "2") as running:
        yield running


def _settles(server: Server, metric: str, value: float = 0) -> bool:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if server.metric(metric) == value:
            return True
        time.sleep(0.2)
    return False


def test_the_openai_sdk_holds_a_spoken_turn_over_webrtc_and_hangs_up(server: Server) -> None:
    # Spoken before the call: espeak-ng run on the event loop would stall the caller's packets, and a
    # caller silent for 0.6 s is taken for gone.
    sentence = speak_pcm16(SENTENCES[3])

    async def run() -> tuple[Peer, float, float]:
        peer, call_id = await call(server.url, SESSION)
        peer.mic.say(sentence)
        await peer.until("response.done")
        await peer.until("output_audio_buffer.stopped", timeout=30)  # the reply played out on the track
        said_until = peer.mic.said_until
        assert said_until is not None
        async with AsyncOpenAI(api_key="unused", base_url=f"{server.url}/v1") as client:
            await client.realtime.calls.hangup(call_id)
            with pytest.raises(openai.NotFoundError):  # hung up: the call is gone
                await client.realtime.calls.hangup(call_id)
        await peer.close()
        return peer, said_until, time.monotonic()

    peer, said_until, _ = asyncio.run(run())
    kinds = peer.kinds()
    assert kinds[:2] == ["session.created", "session.updated"]
    assert peer.events[1]["session"]["audio"]["output"]["voice"] == "tara"  # the offer's session applied
    order = ["input_audio_buffer.speech_started", "input_audio_buffer.speech_stopped",
             "conversation.item.input_audio_transcription.completed", "response.created",
             "output_audio_buffer.started", "output_audio_buffer.stopped"]
    firsts = [kinds.index(k) for k in order]
    assert firsts == sorted(firsts), kinds
    # A short reply can be all made (response.done) before the track starts playing it: the first chunk is
    # sized to what this device's measured rates need for a gapless play (lyre.tts.windows).
    assert kinds.index("response.created") < kinds.index("response.done") < kinds.index("output_audio_buffer.stopped")
    heard = peer.of("conversation.item.input_audio_transcription.completed")[0]["transcript"]
    assert "pharmacy" in normalise(heard)
    done = peer.of("response.done")[0]["response"]
    assert done["status"] == "completed" and done["output"][0]["content"][0]["transcript"] == REPLY
    # The reply's audio came on the track, not as events on the channel.
    assert "response.output_audio.delta" not in kinds
    assert peer.loud_at and peer.loud_at[0] > said_until
    assert _settles(server, "lyre_engine_running")


def test_speech_over_a_reply_clears_its_audio_and_cancels_it(server: Server) -> None:
    sentence = speak_pcm16(SENTENCES[6])  # before the call, as above

    async def run() -> tuple[Peer, float]:
        # The reply is still being made when the caller speaks: its think step holds its second sentence
        # (tests/scripted_thinker.py). A one-sentence reply's speech can all be made, and the response done,
        # before the caller's sentence is heard: the server makes speech faster than the track plays it.
        peer, call_id = await call(server.url, {
            **SESSION, "max_speech_tokens": 1500,
            "audio": {"input": {"transcription": {"language": "en"},
                                "turn_detection": {"type": "server_vad", "create_response": False}}}})
        peer.send({"type": "conversation.item.create", "item": {
            "type": "message", "role": "user", "content": [{"type": "input_text", "text": IN_TWO_PARTS}]}})
        peer.send({"type": "response.create"})
        await peer.until("output_audio_buffer.started")
        peer.mic.say(sentence)
        await peer.until("output_audio_buffer.cleared")
        cleared_at = time.monotonic()
        await peer.until("response.done")
        await peer.until("conversation.item.input_audio_transcription.completed")
        await asyncio.sleep(1.0)  # time for any sound still coming
        async with httpx.AsyncClient(base_url=server.url) as http:
            assert (await http.delete(f"{CALLS}/{call_id}")).status_code == 204
        await peer.close()
        return peer, cleared_at

    try:
        peer, cleared_at = asyncio.run(run())
    finally:  # the cancelled think step's wait for its second sentence ends, and the next test's starts clean
        SECOND_PART.set()
        time.sleep(0.2)
        SECOND_PART.clear()
    kinds = peer.kinds()
    assert kinds.index("input_audio_buffer.speech_started") < kinds.index("output_audio_buffer.cleared")
    assert peer.of("response.done")[0]["response"]["status"] == "cancelled"
    assert len(peer.of("response.created")) == 1  # create_response off: the interruption got no reply
    # The old reply stopped at once: no sound a moment after the clear (jitter buffer and encoder aside).
    assert not [t for t in peer.loud_at if t > cleared_at + 0.5]
    assert _settles(server, "lyre_engine_running")


def test_the_client_clears_the_output_audio_as_the_js_sdk_interrupts(server: Server) -> None:
    """``output_audio_buffer.clear`` (OpenAI's Agents SDK for JS sends it on ``interrupt()`` over WebRTC): the
    reply stops at once, as at a barge-in, and its format settings are the track's, not the client's."""
    async def run() -> tuple[Peer, float]:
        peer, call_id = await call(server.url, {**SESSION, "max_speech_tokens": 1500, "audio": {
            "input": {"transcription": {"language": "en"},
                      "turn_detection": {"type": "server_vad", "create_response": False}},
            "output": {"voice": "tara", "format": {"type": "audio/pcmu"}}}})
        peer.send({"type": "conversation.item.create", "item": {
            "type": "message", "role": "user", "content": [{"type": "input_text", "text": IN_TWO_PARTS}]}})
        peer.send({"type": "response.create"})
        await peer.until("output_audio_buffer.started")
        peer.send({"type": "output_audio_buffer.clear"})
        await peer.until("output_audio_buffer.cleared")
        cleared_at = time.monotonic()
        await peer.until("response.done")
        await asyncio.sleep(1.0)  # time for any sound still coming
        async with httpx.AsyncClient(base_url=server.url) as http:
            assert (await http.delete(f"{CALLS}/{call_id}")).status_code == 204
        await peer.close()
        return peer, cleared_at

    try:
        peer, cleared_at = asyncio.run(run())
    finally:  # the cancelled think step's wait for its second sentence ends
        SECOND_PART.set()
        time.sleep(0.2)
        SECOND_PART.clear()
    assert not peer.of("error")
    assert peer.events[1]["session"]["audio"]["output"]["format"] == {"type": "audio/pcm", "rate": 24_000}
    assert peer.of("response.done")[0]["response"]["status"] == "cancelled"
    assert not [t for t in peer.loud_at if t > cleared_at + 0.5]
    assert _settles(server, "lyre_engine_running")


def test_a_backend_attached_to_the_call_sees_its_events_and_steers_it(server: Server) -> None:
    """A sideband (``/v1/realtime?call_id=``, as OpenAI's server-side controls): the backend gets the call's
    events, its session.update and a response it asks for reach the caller, and its socket closes when the
    call hangs up; a call that does not exist is a 404 naming it."""
    async def run() -> tuple[Peer, list[dict[str, Any]], int | None, int]:
        peer, call_id = await call(server.url, SESSION)
        seen: list[dict[str, Any]] = []
        async with connect(f"{server.ws_url}/v1/realtime?call_id={call_id}") as backend:
            await backend.send(json.dumps({"type": "session.update", "session": {
                "type": "realtime", "instructions": "Answer as a pirate."}}))
            await backend.send(json.dumps({"type": "conversation.item.create", "item": {
                "type": "message", "role": "user", "content": [{"type": "input_text", "text": "Hello?"}]}}))
            await backend.send(json.dumps({"type": "response.create"}))
            async with asyncio.timeout(60):
                while not any(e["type"] == "response.done" for e in seen):
                    seen.append(json.loads(await backend.recv()))
            await peer.until("response.done")
            async with httpx.AsyncClient(base_url=server.url) as http:
                assert (await http.delete(f"{CALLS}/{call_id}")).status_code == 204
            async with asyncio.timeout(10):
                with pytest.raises(ConnectionClosed):
                    while True:
                        seen.append(json.loads(await backend.recv()))
            code = backend.close_code
        await peer.close()
        with pytest.raises(InvalidStatus) as refused:
            async with connect(f"{server.ws_url}/v1/realtime?call_id={call_id}"):
                pass
        return peer, seen, code, refused.value.response.status_code

    peer, seen, code, missing = asyncio.run(run())
    kinds = [e["type"] for e in seen]
    assert "session.updated" in kinds and "response.output_audio.delta" not in kinds  # the audio is on the track
    assert seen[kinds.index("session.updated")]["session"]["instructions"] == "Answer as a pirate."
    assert peer.of("session.updated")[-1]["session"]["instructions"] == "Answer as a pirate."  # the caller's too
    assert peer.of("response.done")[0]["response"]["id"] == seen[kinds.index("response.done")]["response"]["id"]
    assert not [e for e in seen if e["type"] == "error" and e["error"]["code"] != "call_ended"]
    assert code == 1000 and missing == 404


def test_a_barge_in_keeps_in_the_history_what_the_track_sent_not_the_time_since_it_began(server: Server) -> None:
    # A reply that runs dry: its think step stalls between its two sentences (tests/scripted_thinker.py)
    # until the first has played out, and the track sends silence meanwhile. The caller speaks over the
    # second sentence; the history keeps what went out, which the session's clock (real time from the
    # reply's first audio) overstates by the whole gap.
    sentence = speak_pcm16(SENTENCES[6])  # before the call, as above

    async def run() -> tuple[Peer, float, float]:
        peer, call_id = await call(server.url, {
            **SESSION, "max_speech_tokens": 100,
            "audio": {"input": {"transcription": {"language": "en"},
                                "turn_detection": {"type": "server_vad", "create_response": False}}}})
        peer.send({"type": "conversation.item.create", "item": {
            "type": "message", "role": "user", "content": [{"type": "input_text", "text": IN_TWO_PARTS}]}})
        peer.send({"type": "response.create"})
        await peer.until("output_audio_buffer.started")
        async with asyncio.timeout(60):
            while not peer.loud_at or time.monotonic() - peer.loud_at[-1] < 1.0:  # the first has played
                await asyncio.sleep(0.01)
            SECOND_PART.set()
            gap = peer.loud_at[-1]
            while peer.loud_at[-1] == gap:  # the second sentence plays
                await asyncio.sleep(0.01)
        peer.mic.say(sentence)
        await peer.until("output_audio_buffer.cleared")
        cleared_at = time.monotonic()
        truncated = await peer.until("conversation.item.truncated", timeout=30)
        async with httpx.AsyncClient(base_url=server.url) as http:
            assert (await http.delete(f"{CALLS}/{call_id}")).status_code == 204
        await peer.close()
        return peer, cleared_at, truncated["audio_end_ms"]

    peer, cleared_at, cut_ms = asyncio.run(run())
    assert peer.of("response.done")[0]["response"]["status"] == "cancelled"
    heard = [t for t in peer.loud_at if t <= cleared_at]
    # The cut is what reached the caller, not the time since it began. Each run of sound (the demo's noise
    # has quiet stretches, and the track underruns while the TTS falls behind) ends in a frame of tail over
    # the loudness mark: the resampler's last 32 samples spill into it, and Opus's decoder rings on. So a
    # run held one frame less than was heard loud, give or take one it only partly filled.
    runs = 1 + sum(b - a > 0.03 for a, b in zip(heard, heard[1:]))
    heard_ms, since_first_ms = 20 * (len(heard) - runs), 1000 * (cleared_at - heard[0])
    assert abs(cut_ms - heard_ms) <= 20 * (runs + 2), (cut_ms, heard_ms, runs)
    assert cut_ms < since_first_ms - 1000, (cut_ms, since_first_ms)  # the gap was over a second
    assert _settles(server, "lyre_engine_running") and _settles(server, "lyre_realtime_sessions")


def test_ice_servers_are_read_with_their_credentials_and_bad_ones_refused() -> None:
    from lyre.server.config import ServerConfig, ice_server_parts

    assert ice_server_parts("stun:stun.example.com:3478") == ("stun:stun.example.com:3478", None, None)
    assert ice_server_parts("turn:alice:s3:cr@t@turn.example.com:3478?transport=udp") == (
        "turn:turn.example.com:3478?transport=udp", "alice", "s3:cr@t")
    for bad, named in (("stun.example.com", "stun:HOST"), ("turn:turn.example.com", "credentials"),
                       ("stun:bob:pw@stun.example.com", "no credentials"), ("turn::pw@host", "USER:PASSWORD")):
        with pytest.raises(ValueError, match=named):
            ServerConfig(ice_servers=(bad,))


def test_the_callers_audio_goes_to_the_decoder_as_it_comes_in_order_across_the_wrap() -> None:
    from aiortc import RTCRtpReceiver
    from aiortc.rtp import RtpPacket

    from lyre.server.calls.webrtc_audio import hear_sooner

    class Transport:  # what a receiver needs of its DTLS transport to be built, unstarted
        state = "new"

        def _register_rtp_receiver(self, *args: Any) -> None: ...

    receiver = RTCRtpReceiver("audio", Transport())  # type: ignore[arg-type]
    assert hear_sooner(receiver)  # aiortc's buffer was found (an aiortc that renames it fails here)
    buffer = receiver._RTCRtpReceiver__jitter_buffer  # type: ignore[attr-defined]
    passed = []
    for seq in (65534, 65535, 0, 0, 65535, 2, 1, 3):
        packet = RtpPacket(sequence_number=seq, timestamp=seq * 960)
        packet._data = bytes([seq % 256])  # type: ignore[attr-defined]
        frame = buffer.add(packet)[1]
        passed.append(frame.data[0] if frame is not None else None)
    # Each new packet at once; a repeat and the ones that come after a newer are dropped.
    assert passed == [254, 255, 0, None, None, 2, None, 3]


def test_the_reply_track_sends_whole_opus_rate_frames_and_new_audio_without_waiting_for_the_clock() -> None:
    import numpy as np
    from aiortc.codecs.opus import OpusEncoder

    from lyre.server.calls.webrtc_audio import OutboundAudio

    burst = np.random.default_rng(0).integers(-8000, 8000, 480, dtype=np.int16).tobytes()  # 20 ms at 24 kHz

    async def run() -> tuple[list[Any], list[float], list[str]]:
        events: list[str] = []
        track = OutboundAudio(lambda event: events.append(event["type"]))
        frames, waits = [await track.recv()], []
        offsets = np.random.default_rng(1).uniform(0.002, 0.015, 12)
        for offset in offsets:
            frames.append(await track.recv())  # silence, on the clock
            await asyncio.sleep(offset)  # audio comes partway to the clock's next tick
            track.push(burst, "resp_1")
            track.finish("resp_1")
            pushed = time.monotonic()
            frames.append(await track.recv())
            waits.append(time.monotonic() - pushed)
        return frames, waits, events

    frames, waits, events = asyncio.run(run())
    assert all(f.sample_rate == 48_000 and f.samples == 960 for f in frames)
    assert [f.pts for f in frames] == [960 * i for i in range(len(frames))]
    # Opus's own rate: aiortc's encoder makes each frame's packet at once (at 24 kHz it held each one back).
    encoder = OpusEncoder()
    assert all(len(encoder.encode(f)[0]) == 1 for f in frames)
    # Every burst in the frame that went when it came; the resampler's filter (32 samples) spills its last
    # 0.7 ms into the next frame, and the rest is silence.
    loud = [int(np.abs(f.to_ndarray()[0, 64:]).max() > 64) for f in frames]
    assert loud == [0] + [0, 1] * 12
    # Audio that comes while the track sends silence goes at once (the clock restarts from it), not at
    # the next tick: that waited 5-18 ms here (9 ms median), this well under.
    assert sorted(waits)[len(waits) // 2] < 0.004, waits
    assert events == ["output_audio_buffer.started", "output_audio_buffer.stopped"] * 12


def test_a_clear_says_how_much_of_each_reply_the_track_sent() -> None:
    import numpy as np

    from lyre.server.calls.webrtc_audio import OutboundAudio

    def audio(ms: int) -> bytes:  # noise, pcm16 at 24 kHz
        return np.random.default_rng(ms).integers(-8000, 8000, 24 * ms, dtype=np.int16).tobytes()

    async def run() -> list[list[tuple[str, float]]]:
        track = OutboundAudio(lambda event: None)
        cuts = [track.clear()]  # nothing playing: nothing cut
        track.push(audio(100), "resp_a")
        for _ in range(10):  # 200 ms: the reply's 100 ms, then it runs dry
            await track.recv()
        track.push(audio(60), "resp_a")
        await track.recv()
        cuts.append(track.clear())  # 220 ms since it began; 120 ms of it sent
        track.push(audio(50), "resp_b")
        track.finish("resp_b")
        track.push(audio(100), "resp_c")
        for _ in range(3):
            await track.recv()
        cuts.append(track.clear())  # resp_b all sent (not cut); 10 ms of resp_c
        track.stop()
        return cuts

    assert asyncio.run(run()) == [[], [("resp_a", 120.0)], [("resp_c", 10.0)]]
