"""benchmarks/webrtc.py's figures through a real server: spoken turns by stage over the WebSocket and over
WebRTC calls (item 1 there), and callers that go away (item 4). A real ``lyre serve --stt`` thinking at a
scripted endpoint (tests/scripted_thinker.py); callers are tests/webrtc_peer.py and a WebSocket client."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import httpx
from websockets.asyncio.client import connect

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))  # the tests' caller, speech, server
from scripted_thinker import thinking_at
from serving import running_server
from speech import SENTENCES, speak_pcm16
from webrtc_peer import Peer

__all__ = ["STAGES", "TRANSPORTS", "hang_ups", "turns"]

TURN = {"type": "realtime", "instructions": "Answer in one short sentence.", "max_speech_tokens": 35,
        "audio": {"input": {"transcription": {"language": "en"}}, "output": {"voice": "tara"}}}


STAGES = ("speech_stopped", "transcribed", "first_audio", "first_sound")
_EVENTS = {"input_audio_buffer.speech_stopped": "speech_stopped",
           "conversation.item.input_audio_transcription.completed": "transcribed"}


def _stages(timeline: list[tuple[float, str]], ended: float, first_audio: float, first_sound: float
            ) -> dict[str, float]:
    """Each stage of a turn as seconds after the end of its speech: the VAD's speech_stopped (the last
    before the reply: a pause within the sentence may have had its own), the transcript, the reply's
    first audio leaving the server (its first delta on the WebSocket; output_audio_buffer.started on a
    call), and its first sound at the caller."""
    at = {name: max((t for t, kind in timeline if _EVENTS.get(kind) == name and t < first_audio), default=0.0)
          for name in _EVENTS.values()}
    return {**{k: v - ended for k, v in at.items()}, "first_audio": first_audio - ended,
            "first_sound": first_sound - ended}


async def _websocket_turn(url: str, pcm: bytes) -> dict[str, float]:
    """A spoken turn over the WebSocket; see _stages."""
    async with connect(f"{url.replace('http', 'ws')}/v1/realtime?model=lyre", max_size=None) as ws:
        await ws.send(json.dumps({"type": "session.update", "session": TURN}))
        ended = 0.0

        async def speak() -> None:
            nonlocal ended
            start = time.monotonic()
            for i, at in enumerate(range(0, len(pcm), 1920)):
                await asyncio.sleep(max(0.0, start + (i + 1) * 0.04 - time.monotonic()))  # once captured
                await ws.send(json.dumps({"type": "input_audio_buffer.append",
                                          "audio": base64.b64encode(pcm[at:at + 1920]).decode()}))
            ended = time.monotonic()
            silence = base64.b64encode(bytes(1920)).decode()
            while True:  # a microphone goes on sending silence
                await asyncio.sleep(0.04)
                await ws.send(json.dumps({"type": "input_audio_buffer.append", "audio": silence}))

        speaker = asyncio.create_task(speak())
        timeline: list[tuple[float, str]] = []
        try:
            async with asyncio.timeout(120):
                async for message in ws:
                    now, kind = time.monotonic(), json.loads(message)["type"]
                    timeline.append((now, kind))
                    if kind == "response.output_audio.delta" and ended:
                        return _stages(timeline, ended, now, now)  # the delta is the sound
        finally:
            speaker.cancel()
    raise RuntimeError("the socket closed before a reply")


@asynccontextmanager
async def _call(url: str) -> AsyncIterator[tuple[Peer, httpx.AsyncClient]]:
    """A WebRTC call to the server, connected and its session created, with an HTTP client to the server;
    hung up at the end."""
    peer = Peer()
    async with httpx.AsyncClient(base_url=url, timeout=30) as http:
        r = await http.post("/v1/realtime/calls", files={"sdp": (None, await peer.offer()),
                                                         "session": (None, json.dumps(TURN))})
        r.raise_for_status()
        await peer.connect(r.text)
        await peer.until("session.created", 20)
        try:
            yield peer, http
        finally:
            await http.delete(r.headers["location"])
            await peer.close()


async def _webrtc_turn(url: str, pcm: bytes) -> dict[str, float]:
    """A spoken turn over a WebRTC call; see _stages."""
    async with _call(url) as (peer, _):
        peer.mic.say(pcm)
        started = await peer.until("output_audio_buffer.started")
        async with asyncio.timeout(120):
            while True:
                ended = peer.mic.said_until
                if ended is not None and (after := [t for t in peer.loud_at if t > ended]):
                    timeline = list(zip(peer.arrived, (e["type"] for e in peer.events)))
                    return _stages(timeline, ended, peer.arrived[peer.events.index(started)], after[0])
                await asyncio.sleep(0.01)


async def _websocket_turn_beside_a_call(url: str, pcm: bytes) -> dict[str, float]:
    """A WebSocket turn while a WebRTC call is open beside it, its caller sending silence and hearing
    nothing: the turn on the socket, the CPU of a call's media on both sides of it, as a WebRTC turn has."""
    async with _call(url):
        return await _websocket_turn(url, pcm)


TRANSPORTS = {"websocket": _websocket_turn, "webrtc": _webrtc_turn,
              "websocket beside a call": _websocket_turn_beside_a_call}


def turns(count: int, apart: bool = False) -> dict[str, list[dict[str, float]]]:
    """``apart``: the server on every core but the first (its torch threads as many), the callers on the
    first, as where callers are other machines; else everything shares every core."""
    cores = sorted(os.sched_getaffinity(0))
    if apart:
        if len(cores) < 2:
            raise SystemExit("--apart needs two cores or more")
        os.sched_setaffinity(0, cores[1:])  # the server's process starts here, and keeps it
        os.environ["OMP_NUM_THREADS"] = str(len(cores) - 1)
    results: dict[str, list[dict[str, float]]] = {name: [] for name in TRANSPORTS}
    with thinking_at() as thinker, running_server("--stt", "--llm-url", thinker, "--llm-model", "scripted",
                                                  "--max-streams", "4") as server:
        if apart:
            os.sched_setaffinity(0, cores[:1])
        for i in range(count):
            pcm = speak_pcm16(SENTENCES[i % len(SENTENCES)])
            order = list(TRANSPORTS.items())
            for name, turn in order[i % 3:] + order[:i % 3]:  # each goes first in turn
                results[name].append(asyncio.run(turn(server.url, pcm)))
                print(f"  turn {i}: {name}: " + ", ".join(f"{k} {1000 * v:.0f} ms"
                                                         for k, v in results[name][-1].items()), flush=True)
    return results


async def _hang_up_time(url: str, how: str) -> dict[str, float]:
    """Seconds from a connected caller going away in the middle of a reply (``how``: "quiet", its
    microphone stopped as a dead peer's; "close", its connection closed without a hang-up) to the reply's
    engine slots freed ("slots") and to its session freed ("session") on the server."""
    async with _call(url) as (peer, http):
        peer.send({"type": "session.update", "session": {"type": "realtime", "max_speech_tokens": 1500}})
        peer.send({"type": "conversation.item.create", "item": {
            "type": "message", "role": "user", "content": [{"type": "input_text", "text": "Tell a story."}]}})
        peer.send({"type": "response.create"})
        await peer.until("output_audio_buffer.started")
        gone = time.monotonic()
        if how == "quiet":
            peer.mic.stop()
        else:
            await peer.close()
        freed: dict[str, float] = {}
        while len(freed) < 2:  # not serving.Server.metric: a new client per poll, 30 ms of it here
            gauges = {line.split()[0]: float(line.split()[1]) for line in (await http.get("/metrics")).text.splitlines()
                      if line.startswith(("lyre_engine_running ", "lyre_realtime_sessions "))}
            for name, gauge in (("slots", "lyre_engine_running"), ("session", "lyre_realtime_sessions")):
                if name not in freed and not gauges[gauge]:
                    freed[name] = time.monotonic() - gone
            await asyncio.sleep(0.01)
        return freed


def hang_ups(count: int) -> dict[str, list[dict[str, float]]]:
    """Item 4: ``count`` callers that go quiet mid-reply, and ``count`` that close; the seconds to each's
    slots and session freed."""
    with thinking_at() as thinker, running_server("--stt", "--llm-url", thinker, "--llm-model", "scripted") as server:
        return {how: [asyncio.run(_hang_up_time(server.url, how)) for _ in range(count)]
                for how in ("quiet", "close")}
