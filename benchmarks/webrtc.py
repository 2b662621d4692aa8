"""WebRTC call figures (``POST /v1/realtime/calls``) on this machine.

1. Turns: a real ``lyre serve --stt`` thinking at a scripted endpoint that answers every turn at once with
   one sentence (the demo chat model's replies differ turn by turn in length, and so in time); the same
   spoken turns (espeak-ng, at real time) over the ``/v1/realtime`` WebSocket (pcm16 in 40 ms appends;
   the reply's audio deltas) and over a WebRTC call (tests/webrtc_peer.py: Opus both ways), alternating: from the end of the speech (its last sample sent)
   to the VAD's speech_stopped at the caller (what the way in adds), and to the reply's first sound at the
   caller (the way in, Whisper, the TTS and the way out). The transport's own part on the way out is
   item 2.
2. Transport: what the media path itself adds, without the agent: a 200 ms burst of sound queued on a
   call's outbound track (lyre.server.webrtc_audio.OutboundAudio) to its first loud frame decoded at the
   peer, against a base64 pcm16 delta event sent on a WebSocket to its arrival, decoded. Loopback; both
   sides' times on the one monotonic clock of the machine.
3. CPU: the media path of N calls at once (the caller's audio: Opus decoding, resampling to 24 kHz; the
   reply's: pacing, Opus encoding): this process's CPU over --seconds, every call carrying sound both
   ways the whole time. The peers run in a child process, so their CPU is not counted.

    .venv/bin/python benchmarks/webrtc.py
    .venv/bin/python benchmarks/webrtc.py --turns 0 --calls 1 8 --json webrtc.json
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import multiprocessing
import os
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
from aiortc import RTCConfiguration, RTCPeerConnection, RTCSessionDescription
from aiortc.mediastreams import MediaStreamError
from websockets.asyncio.client import connect
from websockets.asyncio.server import serve

from lyre.server.voice_call import Resampler
from lyre.server.webrtc_audio import OutboundAudio

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))  # the tests' caller, speech, server
from scripted_thinker import thinking_at
from serving import running_server
from speech import SENTENCES, speak_pcm16
from webrtc_peer import Peer

RATE = 24_000
BURST = np.random.default_rng(0).integers(-8000, 8000, RATE // 5, dtype=np.int16).tobytes()  # 200 ms of noise
TURN = {"type": "realtime", "instructions": "Answer in one short sentence.", "max_speech_tokens": 35,
        "audio": {"input": {"transcription": {"language": "en"}}, "output": {"voice": "tara"}}}


# -- 1. turns through the agent --

async def _websocket_turn(url: str, pcm: bytes) -> tuple[float, float]:
    """(end of speech to speech_stopped, to the reply's first audio delta) over the WebSocket."""
    async with connect(f"{url.replace('http', 'ws')}/v1/realtime?model=lyre", max_size=None) as ws:
        await ws.send(json.dumps({"type": "session.update", "session": TURN}))
        ended = 0.0

        async def speak() -> None:
            nonlocal ended
            start = time.monotonic()
            for i, at in enumerate(range(0, len(pcm), 1920)):
                await asyncio.sleep(max(0.0, start + i * 0.04 - time.monotonic()))
                await ws.send(json.dumps({"type": "input_audio_buffer.append",
                                          "audio": base64.b64encode(pcm[at:at + 1920]).decode()}))
            ended = time.monotonic()
            silence = base64.b64encode(bytes(1920)).decode()
            while True:  # a microphone goes on sending silence
                await asyncio.sleep(0.04)
                await ws.send(json.dumps({"type": "input_audio_buffer.append", "audio": silence}))

        speaker = asyncio.create_task(speak())
        stopped = None
        try:
            async with asyncio.timeout(120):
                async for message in ws:
                    kind = json.loads(message)["type"]
                    if kind == "input_audio_buffer.speech_stopped" and stopped is None:
                        stopped = time.monotonic() - ended
                    if kind == "response.output_audio.delta" and ended and stopped is not None:
                        return stopped, time.monotonic() - ended
        finally:
            speaker.cancel()
    raise RuntimeError("the socket closed before a reply")


async def _webrtc_turn(url: str, pcm: bytes) -> tuple[float, float]:
    """(end of speech to speech_stopped, to the reply's first sound at the caller) over a WebRTC call."""
    import httpx

    peer = Peer()
    async with httpx.AsyncClient(base_url=url, timeout=30) as http:
        r = await http.post("/v1/realtime/calls", files={"sdp": (None, await peer.offer()),
                                                         "session": (None, json.dumps(TURN))})
        r.raise_for_status()
        await peer.connect(r.text)
        await peer.until("session.created", 20)
        peer.mic.say(pcm)
        try:
            await peer.until("input_audio_buffer.speech_stopped")
            async with asyncio.timeout(120):
                while True:
                    ended = peer.mic.said_until
                    if ended is not None and (after := [t for t in peer.loud_at if t > ended]):
                        return peer.first_at["input_audio_buffer.speech_stopped"] - ended, after[0] - ended
                    await asyncio.sleep(0.01)
        finally:
            await http.delete(r.headers["location"])
            await peer.close()


def turns(count: int) -> dict[str, list[tuple[float, float]]]:
    results: dict[str, list[tuple[float, float]]] = {"websocket": [], "webrtc": []}
    with thinking_at() as thinker, running_server("--stt", "--llm-url", thinker, "--llm-model", "scripted",
                                                  "--max-streams", "4") as server:
        for i in range(count):
            pcm = speak_pcm16(SENTENCES[i % len(SENTENCES)])
            for name, turn in (("websocket", _websocket_turn), ("webrtc", _webrtc_turn))[::1 if i % 2 else -1]:
                results[name].append(asyncio.run(turn(server.url, pcm)))
                stopped, first = results[name][-1]
                print(f"  turn {i}: {name}: speech_stopped {1000 * stopped:.0f} ms, first sound "
                      f"{1000 * first:.0f} ms", flush=True)
    return results


# -- 2 and 3: the media path alone; the callers in a child process --

def _callers(conn: Any, calls: int, seconds: float) -> None:
    """The child: ``calls`` peers that send sound all the time and note when sound arrives."""
    async def run() -> None:
        peers = [Peer() for _ in range(calls)]
        conn.send([await p.offer() for p in peers])
        for peer, answer in zip(peers, await asyncio.to_thread(conn.recv)):
            await peer.connect(answer)
            peer.mic.say(np.random.default_rng(1).integers(-8000, 8000, int(RATE * (seconds + 30)),
                                                           dtype=np.int16).tobytes())
        await asyncio.to_thread(conn.recv)  # done
        conn.send([p.loud_at for p in peers])
        for peer in peers:
            await peer.close()
        # The WebSocket's turn: deltas in, each one's arrival (decoded) noted.
        arrivals = []
        async with connect(await asyncio.to_thread(conn.recv), max_size=None) as ws:
            async for message in ws:
                base64.b64decode(json.loads(message)["delta"])
                arrivals.append(time.monotonic())
        conn.send(arrivals)

    asyncio.run(run())


class _Answerer:
    """The server's side of one media-only call: the reply track, and the caller's audio resampled."""

    def __init__(self) -> None:
        self.pc = RTCPeerConnection(RTCConfiguration(iceServers=[]))
        self.out = OutboundAudio(lambda event: None)
        self.frames = 0
        self._resampler = Resampler(48_000, RATE, 2)
        self.pc.on("track", lambda track: asyncio.ensure_future(self._listen(track)))

    async def answer(self, offer: str) -> str:
        await self.pc.setRemoteDescription(RTCSessionDescription(offer, "offer"))
        self.pc.addTrack(self.out)
        await self.pc.setLocalDescription(await self.pc.createAnswer())
        return self.pc.localDescription.sdp

    async def _listen(self, track: Any) -> None:
        while True:
            try:
                frame = await track.recv()
            except MediaStreamError:
                return
            self.frames += 1
            self._resampler = self._resampler if frame.sample_rate == 48_000 else Resampler(
                frame.sample_rate, RATE, len(frame.layout.channels))
            self._resampler.push(frame.to_ndarray().tobytes())


def media(calls: int, seconds: float, bursts: int) -> dict[str, Any]:
    parent, child = multiprocessing.get_context("spawn").Pipe()
    process = multiprocessing.get_context("spawn").Process(target=_callers, args=(child, calls, seconds))
    process.start()

    async def run() -> dict[str, Any]:
        answerers = [_Answerer() for _ in range(calls)]
        offers = await asyncio.to_thread(parent.recv)
        parent.send([await a.answer(o) for a, o in zip(answerers, offers)])
        while sum(a.frames > 50 for a in answerers) < calls:  # all connected, a second of audio in
            await asyncio.sleep(0.1)
        cpu, wall = time.process_time(), time.monotonic()
        noise = np.random.default_rng(2).integers(-8000, 8000, RATE, dtype=np.int16).tobytes()
        while time.monotonic() - wall < seconds:  # every call sounds all the time
            for a in answerers:
                a.out.push(noise, "r")
            await asyncio.sleep(1.0)
        cpu, wall = time.process_time() - cpu, time.monotonic() - wall
        await asyncio.sleep(1.5)  # what is queued plays out
        sent = []
        for _ in range(bursts):  # the first call alone now, a burst each 0.5 s after silence
            await asyncio.sleep(0.5)
            sent.append(time.monotonic())
            answerers[0].out.push(BURST, "r")
        await asyncio.sleep(1.0)
        parent.send("done")
        loud = (await asyncio.to_thread(parent.recv))[0]
        for a in answerers:
            await a.pc.close()
        # The same bursts as WebSocket delta events.
        delivered = []
        async def handler(ws: Any) -> None:
            for _ in range(bursts):
                await asyncio.sleep(0.5)
                delivered.append(time.monotonic())
                await ws.send(json.dumps({"type": "response.output_audio.delta",
                                          "delta": base64.b64encode(BURST).decode()}))
        async with serve(handler, "127.0.0.1", 0) as server:
            port = server.sockets[0].getsockname()[1]
            parent.send(f"ws://127.0.0.1:{port}")
            arrived = await asyncio.to_thread(parent.recv)
        return {"calls": calls, "cpu_s": cpu, "wall_s": wall,
                "webrtc_ms": [1000 * (min(t for t in loud if t >= s) - s) for s in sent],
                "websocket_ms": [1000 * (a - s) for a, s in zip(arrived, delivered)]}

    try:
        return asyncio.run(run())
    finally:
        process.join(30)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--turns", type=int, default=6, help="spoken turns per transport through the agent")
    parser.add_argument("--calls", type=int, nargs="+", default=[1, 8], help="calls at once for the CPU figure")
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--bursts", type=int, default=20)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    print(f"# {platform.processor() or platform.machine()}, {os.cpu_count()} cores")
    out: dict[str, Any] = {"media": []}
    for n in args.calls:
        m = media(n, args.seconds, args.bursts)
        out["media"].append(m)
        print(f"media path, {n} call(s): {100 * m['cpu_s'] / m['wall_s'] / n:.1f}% of a core per call "
              f"({100 * m['cpu_s'] / m['wall_s']:.0f}% in all); sound to the caller's ear: WebRTC median "
              f"{statistics.median(m['webrtc_ms']):.0f} ms (max {max(m['webrtc_ms']):.0f}), WebSocket median "
              f"{statistics.median(m['websocket_ms']):.1f} ms", flush=True)
    if args.turns:
        out["turns"] = turns(args.turns)
        for name, pairs in out["turns"].items():
            stopped, first = ([1000 * p[i] for p in pairs] for i in (0, 1))
            print(f"{name}, {len(pairs)} turns: end of speech to speech_stopped median "
                  f"{statistics.median(stopped):.0f} ms (max {max(stopped):.0f}); to first sound median "
                  f"{statistics.median(first):.0f} ms "
                  f"(min {min(first):.0f}, max {max(first):.0f})")
    if args.json:
        args.json.write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
