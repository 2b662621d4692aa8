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
from webrtc_peer import Peer

SHORT = 35  # audio tokens per spoken segment: about 0.4 s of noise
SESSION = {"type": "realtime", "instructions": "Answer in one short sentence.", "max_speech_tokens": SHORT,
           "audio": {"input": {"transcription": {"language": "en"}}, "output": {"voice": "tara"}}}
CALLS = "/v1/realtime/calls"


@pytest.fixture(scope="module")
def server() -> Iterator[Server]:
    with thinking_at() as thinker, running_server("--stt", "--llm-url", thinker, "--llm-model", "scripted",
                                                  "--max-streams", "4", "--stt-max-sessions", "2") as running:
        yield running


async def _call(server: Server, session: dict[str, Any] | None = None) -> tuple[Peer, str]:
    """A connected call made with the SDK; returns the peer and the call's id (from ``Location``)."""
    peer = Peer()
    kwargs = {"session": session} if session is not None else {}
    async with AsyncOpenAI(api_key="unused", base_url=f"{server.url}/v1") as client:
        create = client.realtime.calls.with_raw_response.create
        raw = await create(sdp=await peer.offer(), **kwargs)  # type: ignore[arg-type]
        answer = raw.text
    assert raw.status_code == 201 and raw.headers["content-type"].startswith("application/sdp")
    location = raw.headers["location"]
    assert location.startswith(CALLS + "/rtc_")
    await peer.connect(answer)
    await peer.until("session.created", timeout=20)
    return peer, location.rsplit("/", 1)[1]


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
        peer, call_id = await _call(server, SESSION)
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
             "output_audio_buffer.started", "response.done", "output_audio_buffer.stopped"]
    firsts = [kinds.index(k) for k in order]
    assert firsts == sorted(firsts), kinds
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
        peer, call_id = await _call(server, {
            **SESSION, "max_speech_tokens": 1500,
            "audio": {"input": {"transcription": {"language": "en"},
                                "turn_detection": {"type": "server_vad", "create_response": False}}}})
        peer.send({"type": "conversation.item.create", "item": {
            "type": "message", "role": "user", "content": [{"type": "input_text", "text": "Tell me a long story."}]}})
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

    peer, cleared_at = asyncio.run(run())
    kinds = peer.kinds()
    assert kinds.index("input_audio_buffer.speech_started") < kinds.index("output_audio_buffer.cleared")
    assert peer.of("response.done")[0]["response"]["status"] == "cancelled"
    assert len(peer.of("response.created")) == 1  # create_response off: the interruption got no reply
    # The old reply stopped at once: no sound a moment after the clear (jitter buffer and encoder aside).
    assert not [t for t in peer.loud_at if t > cleared_at + 0.5]
    assert _settles(server, "lyre_engine_running")


def test_a_caller_that_goes_away_frees_the_call(server: Server) -> None:
    async def run() -> None:
        async with httpx.AsyncClient(base_url=server.url) as http:
            await _gone(server, within=10.0)  # the calls of the tests before are closed
            # A peer that closes its connection in the middle of a reply, without hanging up.
            peer, call_id = await _call(server, {**SESSION, "max_speech_tokens": 1500})
            peer.send({"type": "conversation.item.create", "item": {
                "type": "message", "role": "user", "content": [{"type": "input_text", "text": "Tell a story."}]}})
            peer.send({"type": "response.create"})
            await peer.until("output_audio_buffer.started")
            assert await asyncio.to_thread(server.metric, "lyre_realtime_sessions") == 1
            await peer.close()
            await _gone(server, within=3.0)
            assert (await http.delete(f"{CALLS}/{call_id}")).status_code == 404
            # A peer whose microphone goes quiet for good (as one whose network or process died): no audio.
            # The call is gone within a second (0.6 s of silence on the wire; the margin is for a busy CI).
            peer, call_id = await _call(server, SESSION)
            await asyncio.sleep(0.5)
            assert await asyncio.to_thread(server.metric, "lyre_realtime_sessions") == 1
            peer.mic.stop()
            await _gone(server, within=1.5)
            assert (await http.delete(f"{CALLS}/{call_id}")).status_code == 404
            await peer.close()

    asyncio.run(run())
    assert _settles(server, "lyre_engine_running")


async def _gone(server: Server, within: float) -> None:
    """The server's one call is closed, its session and engine slots freed, within ``within`` seconds:
    found by the sessions gauge, which does not touch the call (a hang-up to probe it would end it)."""
    deadline = time.monotonic() + within
    while await asyncio.to_thread(server.metric, "lyre_realtime_sessions") != 0:
        assert time.monotonic() < deadline, f"the call is still open after {within} s"
        await asyncio.sleep(0.05)


def test_bad_offers_are_refused_naming_what_is_wrong(server: Server) -> None:
    async def offer(**kinds: bool) -> str:
        from aiortc import RTCConfiguration, RTCPeerConnection

        pc = RTCPeerConnection(RTCConfiguration(iceServers=[]))
        if kinds.get("audio", True):
            pc.addTransceiver("audio", direction=kinds.get("direction", "sendrecv"))  # type: ignore[arg-type]
        if kinds.get("channel", True):
            pc.createDataChannel("oai-events")
        await pc.setLocalDescription(await pc.createOffer())
        sdp = pc.localDescription.sdp
        await pc.close()
        return sdp

    good = asyncio.run(offer())
    cases: list[tuple[dict[str, Any], int, str]] = [
        ({"content": "hello", "headers": {"content-type": "application/sdp"}}, 400, "sdp"),
        ({"content": "", "headers": {"content-type": "application/sdp"}}, 400, "sdp"),
        ({"content": asyncio.run(offer(audio=False)), "headers": {"content-type": "application/sdp"}}, 400, "no audio"),
        ({"content": asyncio.run(offer(channel=False)), "headers": {"content-type": "application/sdp"}}, 400,
         "oai-events"),
        ({"content": asyncio.run(offer(direction="sendonly")), "headers": {"content-type": "application/sdp"}}, 400,
         "sendrecv"),
        ({"json": {"sdp": good}}, 415, "application/sdp"),
        ({"files": {"sdp": (None, good), "session": (None, "{not json")}}, 400, "session"),
        ({"files": {"sdp": (None, good), "session": (None, '{"audio": {"output": {"voice": "nobody"}}}')}}, 400,
         "nobody"),
        ({"files": {"session": (None, "{}")}}, 400, "sdp"),
    ]
    with httpx.Client(base_url=server.url, timeout=30) as http:
        for request, status, named in cases:
            r = http.post(CALLS, **request)
            assert r.status_code == status, (request, r.text)
            assert named in r.json()["error"]["message"], (named, r.text)
        assert http.delete(f"{CALLS}/rtc_nope").status_code == 404
        assert http.post(f"{CALLS}/rtc_nope/hangup").status_code == 404
    # None of them left a session behind: two calls (the limit) still fit, and a third is refused.
    async def fill() -> None:
        first, second = await _call(server), await _call(server)
        async with httpx.AsyncClient(base_url=server.url) as client:
            r = await client.post(CALLS, content=good, headers={"content-type": "application/sdp"})
            assert r.status_code == 429 and "limit 2" in r.json()["error"]["message"]
            for _, call_id in (first, second):
                assert (await client.delete(f"{CALLS}/{call_id}")).status_code == 204
        for peer, _ in (first, second):
            await peer.close()

    asyncio.run(fill())


def test_a_barge_in_keeps_in_the_history_what_the_track_sent_not_the_time_since_it_began(server: Server) -> None:
    # A reply that runs dry: its think step stalls between its two sentences (tests/scripted_thinker.py)
    # until the first has played out, and the track sends silence meanwhile. The caller speaks over the
    # second sentence; the history keeps what went out, which the session's clock (real time from the
    # reply's first audio) overstates by the whole gap.
    sentence = speak_pcm16(SENTENCES[6])  # before the call, as above

    async def run() -> tuple[Peer, float, float]:
        peer, call_id = await _call(server, {
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
    heard_ms, since_first_ms = 20 * len(heard), 1000 * (cleared_at - heard[0])
    # The cut is what reached the caller, not the time since it began. Each run of sound may count a frame
    # more than it held (the resampler's last 32 samples spill into the next) or one it only partly filled.
    runs = 1 + sum(b - a > 0.03 for a, b in zip(heard, heard[1:]))
    assert abs(cut_ms - heard_ms) <= 20 * (runs + 2), (cut_ms, heard_ms, runs)
    assert cut_ms < since_first_ms - 1000, (cut_ms, since_first_ms)  # the gap was over a second
    assert _settles(server, "lyre_engine_running")


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

    from lyre.server.webrtc_audio import hear_sooner

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

    from lyre.server.webrtc_audio import OutboundAudio

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

    from lyre.server.webrtc_audio import OutboundAudio

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
