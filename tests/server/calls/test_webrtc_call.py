"""A WebRTC call's life (lyre.server.calls.webrtc_call): offers refused, callers that go away, pause or never
speak, events that pile up, and a hang-up that frees everything. A real ``lyre serve --stt`` on loopback,
thinking at a scripted endpoint (tests/scripted_thinker.py), called by aiortc peers (tests/webrtc_peer.py).

Every path ends with the call's realtime session and its engine slots freed: the ``/metrics`` gauges
``lyre_realtime_sessions`` and ``lyre_engine_running`` back at 0. The server allows two realtime sessions,
so a call that leaks one shows at once as a refusal (429).
"""

from __future__ import annotations

import asyncio
import base64
import re
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from polling import eventually_async
from scripted_thinker import thinking_at
from serving import Server, running_server
from speech import SENTENCES, speak_pcm16
from webrtc_peer import CALLS, Peer, call

from lyre.server.admission import Admission
from lyre.server.config import ServerConfig
from lyre.server.metrics import Metrics
from lyre.server.sockets.realtime_socket import RealtimeSessions
from lyre.server.state import ServerState
from lyre.server.calls.voice_call import VoiceCall
from lyre.server.calls.webrtc import Calls
from lyre.server.calls.webrtc_call import Call
from lyre.server.calls.webrtc_watch import GONE_AFTER_S, MEDIA_TIMEOUT_S
from lyre.stt import Transcript

SESSION = {"type": "realtime", "instructions": "Answer in one short sentence.", "max_speech_tokens": 35,
           "audio": {"input": {"transcription": {"language": "en"}}, "output": {"voice": "tara"}}}
LONG = {**SESSION, "max_speech_tokens": 1500}  # a reply that speaks for many seconds
SDP = {"content-type": "application/sdp"}


@pytest.fixture(scope="module")
def server() -> Iterator[Server]:
    with thinking_at() as thinker, running_server("--stt", "--llm-url", thinker, "--llm-model", "scripted",
                                                  "--max-streams", "4", "--stt-max-sessions", "2") as running:
        yield running


async def _metric(server: Server, name: str) -> float:
    return await asyncio.to_thread(server.metric, name)


async def _until(server: Server, name: str, value: float, within: float) -> None:
    """The gauge ``name`` reads ``value`` within ``within`` seconds (polled: the gauge does not touch the call,
    where a hang-up to probe it would end it)."""
    deadline = time.monotonic() + within
    while (now := await _metric(server, name)) != value:
        assert time.monotonic() < deadline, f"{name} is {now}, not {value}, after {within} s"
        await asyncio.sleep(0.05)


async def _freed(server: Server, within: float = 10.0) -> None:
    """No call open, no engine slot held."""
    await _until(server, "lyre_realtime_sessions", 0, within)
    await _until(server, "lyre_engine_running", 0, within)


async def _story(peer: Peer) -> None:
    """Ask for a reply and wait until its audio plays."""
    peer.send({"type": "conversation.item.create", "item": {
        "type": "message", "role": "user", "content": [{"type": "input_text", "text": "Tell a story."}]}})
    peer.send({"type": "response.create"})
    await peer.until("output_audio_buffer.started")


async def _offer(audio: bool = True, channel: bool = True, direction: str = "sendrecv") -> str:
    from aiortc import RTCConfiguration, RTCPeerConnection

    pc = RTCPeerConnection(RTCConfiguration(iceServers=[]))
    if audio:
        pc.addTransceiver("audio", direction=direction)  # type: ignore[arg-type]
    if channel:
        pc.createDataChannel("oai-events")
    await pc.setLocalDescription(await pc.createOffer())
    sdp = pc.localDescription.sdp
    await pc.close()
    return sdp


def _only_codec(sdp: str, codec: str) -> str:
    """``sdp`` with its audio offering only ``codec`` (one aiortc lacks): the offer passes lyre's own
    checks, and aiortc refuses it when the call takes it."""
    lines, section = [], ""
    for line in sdp.splitlines():
        if line.startswith("m="):
            section = line[2:].split()[0]
            if section == "audio":
                lines += [" ".join(line.split()[:3] + ["97"]), f"a=rtpmap:97 {codec}"]
                continue
        if section == "audio" and line.startswith(("a=rtpmap:", "a=fmtp:", "a=rtcp-fb:")):
            continue
        lines.append(line)
    return "\r\n".join(lines) + "\r\n"


def test_bad_offers_are_refused_naming_what_is_wrong(server: Server) -> None:
    good = asyncio.run(_offer())
    cases: list[tuple[dict[str, Any], int, str]] = [
        ({"content": "hello", "headers": SDP}, 400, "sdp"),
        ({"content": "", "headers": SDP}, 400, "sdp"),
        ({"content": asyncio.run(_offer(audio=False)), "headers": SDP}, 400, "no audio"),
        ({"content": asyncio.run(_offer(channel=False)), "headers": SDP}, 400, "oai-events"),
        ({"content": asyncio.run(_offer(direction="sendonly")), "headers": SDP}, 400, "sendrecv"),
        ({"json": {"sdp": good}}, 415, "application/sdp"),
        ({"files": {"sdp": (None, good), "session": (None, "{not json")}}, 400, "session"),
        ({"files": {"sdp": (None, good), "session": (None, '{"audio": {"output": {"voice": "nobody"}}}')}}, 400,
         "nobody"),
        ({"files": {"session": (None, "{}")}}, 400, "sdp"),
        ({"content": good.replace("a=mid:0", "a=mid:"), "headers": SDP}, 400, "a=mid"),
        # Offers lyre's own reading passes and aiortc refuses as the call takes them.
        ({"content": _only_codec(good, "speex/16000"), "headers": SDP}, 400, "no audio codec in common"),
        ({"content": re.sub(r"a=ice-pwd:.*\r\n", "", good), "headers": SDP}, 400, "sdp: the offer was refused"),
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
        first, second = await call(server.url), await call(server.url)
        async with httpx.AsyncClient(base_url=server.url) as client:
            r = await client.post(CALLS, content=good, headers=SDP)
            assert r.status_code == 429 and "limit 2" in r.json()["error"]["message"]
            for _, call_id in (first, second):
                assert (await client.delete(f"{CALLS}/{call_id}")).status_code == 204
        for peer, _ in (first, second):
            await peer.close()
        await _freed(server)

    asyncio.run(fill())


def test_offers_with_no_codec_in_common_free_their_call_every_time(server: Server) -> None:
    speex = _only_codec(asyncio.run(_offer()), "speex/16000")
    with httpx.Client(base_url=server.url, timeout=30) as http:
        answers = [http.post(CALLS, content=speex, headers=SDP) for _ in range(20)]
    assert [r.status_code for r in answers] == [400] * 20
    message = answers[0].json()["error"]["message"]
    assert "speex/16000" in message and "opus/48000" in message, message

    async def then() -> None:  # a good call still gets in, and leaves nothing behind
        assert await _metric(server, "lyre_realtime_sessions") == 0  # answered only once freed
        peer, call_id = await call(server.url, SESSION)
        async with httpx.AsyncClient(base_url=server.url) as http:
            assert (await http.delete(f"{CALLS}/{call_id}")).status_code == 204
        await peer.close()
        await _freed(server)

    asyncio.run(then())


def test_a_hang_up_answers_once_the_call_is_freed(server: Server) -> None:
    async def run() -> None:
        peer, call_id = await call(server.url, LONG)
        await _story(peer)
        async with httpx.AsyncClient(base_url=server.url) as http:
            assert (await http.delete(f"{CALLS}/{call_id}")).status_code == 204
            # Not polled: the hang-up answered once the session was free and the reply cancelled.
            text = (await http.get("/metrics")).text
        await peer.close()
        assert "\nlyre_realtime_sessions 0.0\n" in text
        await _until(server, "lyre_engine_running", 0, 2.0)  # the engine frees the slot at its next step

    asyncio.run(run())


def _threads(server: Server) -> int:
    with open(f"/proc/{server.process.pid}/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("Threads:"))


def test_a_freed_call_leaves_none_of_its_threads_behind(server: Server) -> None:
    """FFmpeg's filter graphs (the calls' resamplers) hold threads until freed: a call's are freed as it ends,
    not at Python's next full collection (a soak of 128 calls held over a hundred between collections)."""
    async def one_call() -> None:
        peer, call_id = await call(server.url, SESSION)
        await _story(peer)
        async with httpx.AsyncClient(base_url=server.url) as http:
            assert (await http.delete(f"{CALLS}/{call_id}")).status_code == 204
        await peer.close()
        await _freed(server)

    async def run() -> tuple[int, int]:
        await one_call()  # the server's own pools reach their size
        before = _threads(server)
        for _ in range(3):
            await one_call()
        return before, _threads(server)

    before, after = asyncio.run(run())
    assert after - before <= 2, f"{after - before} more threads after 3 calls"


def test_a_caller_that_goes_away_frees_the_call(server: Server) -> None:
    async def run() -> None:
        async with httpx.AsyncClient(base_url=server.url) as http:
            await _freed(server)  # the calls of the tests before are closed
            # A peer that closes its connection in the middle of a reply, without hanging up.
            peer, call_id = await call(server.url, LONG)
            await _story(peer)
            assert await _metric(server, "lyre_realtime_sessions") == 1
            await peer.close()
            await _freed(server, within=3.0)
            assert (await http.delete(f"{CALLS}/{call_id}")).status_code == 404
            # A peer whose network or process died in the middle of a reply: nothing more arrives. The
            # reply stops and frees its slots once 0.6 s pass without a packet (the margin is for a busy
            # CI); the call waits for the caller to come back, then hangs up.
            peer, call_id = await call(server.url, LONG)
            await _story(peer)
            await _until(server, "lyre_engine_running", 1, 10.0)
            peer.mic.stop()
            gone = time.monotonic()
            await _until(server, "lyre_engine_running", 0, MEDIA_TIMEOUT_S + 1.5)
            assert await _metric(server, "lyre_realtime_sessions") == 1
            await _until(server, "lyre_realtime_sessions", 0, GONE_AFTER_S + 1.5)
            assert time.monotonic() - gone > GONE_AFTER_S - 0.5  # it waited for the caller
            assert (await http.delete(f"{CALLS}/{call_id}")).status_code == 404
            await peer.close()
            await _freed(server)

    asyncio.run(run())


def test_a_caller_that_connects_and_never_sends_audio_is_hung_up(server: Server) -> None:
    async def run() -> None:
        peer = Peer()
        peer.mic.stop()  # the track ends before the first packet: aiortc sends no RTP at all
        async with httpx.AsyncClient(base_url=server.url, timeout=30) as http:
            r = await http.post(CALLS, content=await peer.offer(), headers=SDP)
            assert r.status_code == 201, r.text
            await peer.connect(r.text)
            await peer.until("session.created", timeout=20)
            connected = time.monotonic()
            await _until(server, "lyre_realtime_sessions", 0, GONE_AFTER_S + 3.0)
            assert time.monotonic() - connected > GONE_AFTER_S - 1.0
            ended = peer.of("error")[-1]["error"]
            assert ended["code"] == "call_ended" and "no audio from the caller" in ended["message"], ended
            assert (await http.delete(r.headers["location"])).status_code == 404
        await peer.close()
        await _freed(server)

    asyncio.run(run())


def test_a_caller_whose_network_drops_a_moment_is_paused_not_hung_up(server: Server) -> None:
    sentence = speak_pcm16(SENTENCES[3])  # before the call: espeak-ng would stall the caller's packets

    async def run() -> Peer:
        peer, call_id = await call(server.url, LONG)
        await _story(peer)
        await _until(server, "lyre_engine_running", 1, 10.0)
        peer.mic.drop(1.5)  # a Wi-Fi roam: 1.5 s without a packet, then they flow again
        # The reply stops as at a barge-in, and frees its engine slots; the call stays.
        await peer.until("output_audio_buffer.cleared", timeout=MEDIA_TIMEOUT_S + 2.0)
        assert (await peer.until("response.done"))["response"]["status"] == "cancelled"
        await _until(server, "lyre_engine_running", 0, 2.0)
        assert await _metric(server, "lyre_realtime_sessions") == 1
        # The caller is back: it speaks and is answered.
        assert await eventually_async(lambda: not peer.mic.dropping, timeout=3.0)
        await peer.until("session.updated")
        peer.send({"type": "session.update", "session": {"type": "realtime", "max_speech_tokens": 35}})
        await peer.until("session.updated", count=2)
        peer.mic.say(sentence)
        answer = await peer.until("response.done", count=2, timeout=60)
        assert answer["response"]["status"] == "completed"
        async with httpx.AsyncClient(base_url=server.url) as http:
            assert (await http.delete(f"{CALLS}/{call_id}")).status_code == 204
        await peer.close()
        await _freed(server)
        return peer

    peer = asyncio.run(run())
    assert not [e for e in peer.of("error") if e["error"]["code"] == "call_ended"]
    assert "pharmacy" in peer.of("conversation.item.input_audio_transcription.completed")[-1]["transcript"].lower()


# -- a call's own close, in process: no server, stand-ins for the models it never uses here --


def _stand_ins(stt: object = None) -> ServerState:
    """A server's state with stand-ins for the models: ``stt`` as its speech to text."""
    state = ServerState(config=ServerConfig(), tts=None, admission=Admission(1, 1, 1.0), metrics=Metrics(),
                        ready=True)
    state.stt = stt or object()  # type: ignore[assignment]
    state.tts = state.thinker = object()  # type: ignore[assignment]  # no reply is made
    return state


@pytest.mark.parametrize("voice_close_fails", [False, True])
def test_closed_returns_once_everything_is_freed_even_when_a_part_fails(monkeypatch: pytest.MonkeyPatch,
                                                                        voice_close_fails: bool) -> None:
    if voice_close_fails:
        closing = VoiceCall.close

        async def failing(self: VoiceCall) -> None:
            await closing(self)
            raise RuntimeError("the agent session failed to close")
        monkeypatch.setattr(VoiceCall, "close", failing)
    state = _stand_ins()

    async def run() -> tuple[Call, RealtimeSessions]:
        sessions, calls, peer = RealtimeSessions(), Calls(), Peer()
        made = Call(state, None, calls.forget)
        made.hold(sessions)
        calls.open[made.id] = made
        await made.answer(await peer.offer(), None)
        assert sessions.open == 1 and made._tasks
        made.hang_up("hung up by the caller")
        assert await made.closed() == "hung up by the caller"
        # At once, not polled: closed() came back once all of it was free.
        assert sessions.open == 0 and made.pc.connectionState == "closed" and not calls.open
        assert not made._tasks and made.out.readyState == "ended"
        await peer.close()
        return made, sessions

    asyncio.run(run())


class _Stalled:
    """Speech to text that answers only once released: meanwhile the agent is busy with the one event that
    asked for it, and reads no other."""

    def __init__(self) -> None:
        self.stalled = asyncio.Event()
        self.release = asyncio.Event()

    async def transcribe(self, audio: Any, options: Any, session: Any = None) -> Transcript:
        self.stalled.set()
        await self.release.wait()
        self.stalled.clear()
        self.release.clear()  # the next one stalls again
        return Transcript("hello", "en", 1.0, ())


def test_events_past_the_inbox_bound_are_refused_naming_them_and_the_call_goes_on() -> None:
    from lyre.server.calls.webrtc_call import _MAX_INBOX, _MAX_INBOX_CHARS

    stt = _Stalled()
    audio = base64.b64encode(bytes(4800)).decode()  # 0.1 s: a transcript to wait for
    stall = {"type": "conversation.item.create", "item": {
        "type": "message", "role": "user", "content": [{"type": "input_audio", "audio": audio}]}}

    def said(text: str, event_id: str) -> dict[str, Any]:
        return {"type": "conversation.item.create", "event_id": event_id, "item": {
            "type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}}

    async def run() -> Peer:
        sessions, peer, made = RealtimeSessions(), Peer(), Call(_stand_ins(stt), None, Calls().forget)
        made.hold(sessions)
        # The microphone sends silence: a caller, not one gone (lyre.server.calls.webrtc_watch).
        await peer.connect(await made.answer(await peer.offer(), None))
        await peer.until("session.created", timeout=20)
        # Many small events behind a stalled one: the bound's worth wait, the rest are refused at once.
        burst = 2 * _MAX_INBOX
        peer.send(stall)
        await stt.stalled.wait()
        for i in range(burst):
            peer.send({"type": "input_audio_buffer.clear", "event_id": f"small_{i}"})
        await peer.until("error", count=burst - _MAX_INBOX, timeout=30)
        stt.release.set()
        await peer.until("input_audio_buffer.cleared", count=_MAX_INBOX, timeout=30)
        # A few large ones behind another: refused once they would hold over the bound's characters.
        big = _MAX_INBOX_CHARS // 8 - 1000
        peer.send(stall)
        await stt.stalled.wait()
        for i in range(10):
            peer.send(said("x" * big, f"large_{i}"))
        await peer.until("error", count=burst - _MAX_INBOX + 2, timeout=60)
        stt.release.set()
        await peer.until("conversation.item.done", count=2 + 8, timeout=30)
        assert sessions.open == 1  # the call went on
        made.hang_up("hung up by the caller")
        await made.closed()
        assert sessions.open == 0
        await peer.close()
        return peer

    peer = asyncio.run(run())
    refused = [e["error"] for e in peer.of("error")]
    assert all(e["code"] == "too_many_events" and "wait for the agent" in e["message"] for e in refused)
    small = [e["event_id"] for e in refused if e["event_id"].startswith("small_")]
    assert small == [f"small_{i}" for i in range(_MAX_INBOX, 2 * _MAX_INBOX)]  # the ones past the bound, named
    assert [e["event_id"] for e in refused if e["event_id"].startswith("large_")] == ["large_8", "large_9"]
    assert len(peer.of("input_audio_buffer.cleared")) == _MAX_INBOX  # the ones within it, all acted on


def test_the_watch_pauses_a_call_whose_audio_stops_and_judges_nothing_on_a_late_tick() -> None:
    from lyre.server.calls.webrtc_watch import CONNECT_TIMEOUT_S, Change, MediaWatch

    def ticks(watch: MediaWatch, times: list[float], connected: bool, heard: float | None) -> list[Change | None]:
        return [watch.tick(t, connected, heard) for t in times]

    never = MediaWatch(started=0.0)
    assert ticks(never, [1.0, CONNECT_TIMEOUT_S - 0.1], False, None) == [None, None]
    assert never.tick(CONNECT_TIMEOUT_S + 0.1, False, None) is Change.GONE and "not connected" in never.reason
    silent = MediaWatch(started=0.0)  # connected at 1.1, never a packet
    assert ticks(silent, [1.0 + 0.1 * i for i in range(1, 50)], True, None) == [None] * 49  # never paused
    assert silent.tick(6.2, True, None) is Change.GONE and "within 5 s of connecting" in silent.reason
    roam = MediaWatch(started=0.0)  # the last packet at 2.0; back at 3.5
    assert ticks(roam, [1.0, 2.0, 2.5], True, 2.0) == [None, None, None]
    assert roam.tick(2.7, True, 2.0) is Change.PAUSED and roam.paused
    assert roam.tick(2.8, True, 2.0) is None
    assert roam.tick(3.6, True, 3.5) is None  # late: the loop was held up, so packets may be unread
    assert roam.tick(3.7, True, 3.6) is Change.RESUMED and not roam.paused
    gone = MediaWatch(started=0.0)
    changes = ticks(gone, [1.0 + 0.1 * i for i in range(1, 55)], True, 1.45)  # to 6.4
    assert changes == [None] * 10 + [Change.PAUSED] + [None] * 43  # paused at 2.1
    assert gone.paused and gone.tick(6.5, True, 1.45) is Change.GONE and gone.reason.endswith("for 5 s")
