"""WebRTC call figures (``POST /v1/realtime/calls``) on this machine.

1. Turns: a real ``lyre serve --stt`` thinking at a scripted endpoint that answers every turn at once with
   one sentence (the demo chat model's replies differ turn by turn in length, and so in time); the same
   spoken turns (espeak-ng, at real time, each piece sent once it would have been captured) over the
   ``/v1/realtime`` WebSocket (pcm16 in 40 ms appends; the reply's audio deltas) and over a WebRTC call
   (tests/webrtc_peer.py: Opus both ways, 20 ms frames), alternating: from the end of the speech (its
   last piece sent) to the VAD's speech_stopped, the transcript, the reply's first audio leaving the
   server and its first sound at the caller, each as the caller sees it. A third kind, WebSocket turns
   with a silent WebRTC call open beside them, has a call's media CPU on both sides without its
   transport in the turn. The transport's own part is item 2.
2. Transport: what the media path itself adds, without the agent, each way. Out: a 200 ms burst of
   sound queued on a call's outbound track (lyre.server.calls.webrtc_audio.OutboundAudio) to its first loud
   frame decoded at the peer. In: a burst's first frame leaving the caller's microphone to its first loud
   frame decoded on the server's side. Against the same bursts as base64 pcm16 events on a WebSocket,
   sent to decoded. Loopback; both sides' times on the one monotonic clock of the machine.
3. CPU: the media path of N calls at once (the caller's audio: Opus decoding, resampling to 24 kHz; the
   reply's: pacing, resampling to 48 kHz, Opus encoding): this process's CPU over --seconds, every call
   carrying sound both ways the whole time. The peers run in a child process, so their CPU is not counted.
4. Hang-ups: a connected caller whose microphone stops in the middle of a reply (as a peer whose process
   or network died: nothing more arrives) and one that closes its connection without hanging up, to the
   reply's engine slots freed (the lyre_engine_running gauge back to 0) and to its session freed on the
   server (lyre_realtime_sessions back to 0). A quiet caller's slots go when its audio has stopped for
   0.6 s; its session when that has lasted 5 s (it might have come back).

    .venv/bin/python benchmarks/webrtc.py
    .venv/bin/python benchmarks/webrtc.py --turns 0 --calls 1 8 --json webrtc.json
    .venv/bin/python benchmarks/webrtc.py --turns 0 --calls 1 --seconds 3 --hang-ups 8
    .venv/bin/python benchmarks/webrtc.py --turns 0 --calls --hang-ups 8   # hang-ups only
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

from lyre.common.resample import Resampler
from lyre.server.calls.webrtc_audio import OutboundAudio, hear_sooner

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))  # the tests' caller
from webrtc_peer import Peer
from webrtc_turns import STAGES, hang_ups, turns  # items 1 and 4, through a server

RATE = 24_000
BURST = np.random.default_rng(0).integers(-8000, 8000, RATE // 5, dtype=np.int16).tobytes()  # 200 ms of noise


# -- 2 and 3: the media path alone; the callers in a child process --

def _callers(conn: Any, calls: int, seconds: float, bursts: int) -> None:
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
            peer.mic.hush()
        await asyncio.sleep(1.0)
        first = peers[0].mic
        first.onsets.clear()
        for _ in range(bursts):  # the way in: the first caller alone, a burst each 0.5 s after silence
            first.say(BURST)
            await asyncio.sleep(0.5)
        conn.send(first.onsets)
        for peer in peers:
            await peer.close()
        # The WebSocket's turn: deltas in, each one's arrival (decoded) noted; then appends out.
        arrivals, sent = [], []
        async with connect(await asyncio.to_thread(conn.recv), max_size=None) as ws:
            for _ in range(bursts):
                base64.b64decode(json.loads(await ws.recv())["delta"])
                arrivals.append(time.monotonic())
            for _ in range(bursts):
                await asyncio.sleep(0.5)
                sent.append(time.monotonic())
                await ws.send(json.dumps({"type": "input_audio_buffer.append",
                                          "audio": base64.b64encode(BURST).decode()}))
        conn.send((arrivals, sent))

    asyncio.run(run())


class _Answerer:
    """The server's side of one media-only call, as lyre.server.calls.webrtc_call.Call sets it up: the reply
    track, and the caller's audio decoded as it comes and resampled."""

    def __init__(self) -> None:
        self.pc = RTCPeerConnection(RTCConfiguration(iceServers=[]))
        self.out = OutboundAudio(lambda event: None)
        self.frames = 0
        self.loud_at: list[float] = []  # when each frame of the caller's sound (not silence) was decoded
        self._resampler = Resampler(48_000, RATE, 2)
        self.pc.on("track", lambda track: asyncio.ensure_future(self._listen(track)))

    async def answer(self, offer: str) -> str:
        await self.pc.setRemoteDescription(RTCSessionDescription(offer, "offer"))
        self.pc.addTrack(self.out)
        assert all(hear_sooner(t.receiver) for t in self.pc.getTransceivers() if t.kind == "audio")  # as a Call
        await self.pc.setLocalDescription(await self.pc.createAnswer())
        return self.pc.localDescription.sdp

    async def _listen(self, track: Any) -> None:
        while True:
            try:
                frame = await track.recv()
            except MediaStreamError:
                return
            self.frames += 1
            if np.abs(frame.to_ndarray()).max() > 64:
                self.loud_at.append(time.monotonic())
            self._resampler = self._resampler if frame.sample_rate == 48_000 else Resampler(
                frame.sample_rate, RATE, len(frame.layout.channels))
            self._resampler.push(frame.to_ndarray().tobytes())


def media(calls: int, seconds: float, bursts: int) -> dict[str, Any]:
    parent, child = multiprocessing.get_context("spawn").Pipe()
    process = multiprocessing.get_context("spawn").Process(target=_callers, args=(child, calls, seconds, bursts))
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
                a.out.finish("r")
            await asyncio.sleep(1.0)
        cpu, wall = time.process_time() - cpu, time.monotonic() - wall
        await asyncio.sleep(1.5)  # what is queued plays out
        sent = []
        for _ in range(bursts):  # the first call alone now, a burst each 0.5 s after silence
            await asyncio.sleep(0.5)
            sent.append(time.monotonic())
            answerers[0].out.push(BURST, "r")
            answerers[0].out.finish("r")
        await asyncio.sleep(1.0)
        parent.send("done")
        loud = (await asyncio.to_thread(parent.recv))[0]
        answerers[0].loud_at.clear()
        said = await asyncio.to_thread(parent.recv)  # the way in: the caller's bursts
        heard = answerers[0].loud_at
        for a in answerers:
            await a.pc.close()
        # The same bursts as WebSocket events: deltas out, then appends in.
        delivered, received = [], []
        async def handler(ws: Any) -> None:
            for _ in range(bursts):
                await asyncio.sleep(0.5)
                delivered.append(time.monotonic())
                await ws.send(json.dumps({"type": "response.output_audio.delta",
                                          "delta": base64.b64encode(BURST).decode()}))
            async for message in ws:
                base64.b64decode(json.loads(message)["audio"])
                received.append(time.monotonic())
        async with serve(handler, "127.0.0.1", 0) as server:
            port = server.sockets[0].getsockname()[1]
            parent.send(f"ws://127.0.0.1:{port}")
            arrived, appended = await asyncio.to_thread(parent.recv)
        return {"calls": calls, "cpu_s": cpu, "wall_s": wall,
                "webrtc_ms": [1000 * (min(t for t in loud if t >= s) - s) for s in sent],
                "websocket_ms": [1000 * (a - s) for a, s in zip(arrived, delivered)],
                "webrtc_in_ms": [1000 * (min(t for t in heard if t >= s) - s) for s in said],
                "websocket_in_ms": [1000 * (r - s) for r, s in zip(received, appended)]}

    try:
        return asyncio.run(run())
    finally:
        process.join(30)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--turns", type=int, default=6, help="spoken turns per transport through the agent")
    parser.add_argument("--calls", type=int, nargs="*", default=[1, 8], help="calls at once for the CPU figure "
                        "(none: no media figures)")
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--bursts", type=int, default=20)
    parser.add_argument("--apart", action="store_true", help="turns: the server on all cores but the first, "
                        "the callers on the first")
    parser.add_argument("--hang-ups", type=int, default=8, help="callers that go away, each way")
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
              f"{statistics.median(m['websocket_ms']):.1f} ms; the caller's sound to lyre's ear: WebRTC median "
              f"{statistics.median(m['webrtc_in_ms']):.0f} ms (max {max(m['webrtc_in_ms']):.0f}), WebSocket "
              f"median {statistics.median(m['websocket_in_ms']):.1f} ms", flush=True)
    if args.turns:
        out["turns"] = turns(args.turns, args.apart)
        for name, runs in out["turns"].items():
            print(f"{name}, {len(runs)} turns, median ms after the end of speech: " + ", ".join(
                f"{k} {1000 * statistics.median(r[k] for r in runs):.0f}" for k in STAGES))
    if args.hang_ups:
        out["hang_ups"] = hang_ups(args.hang_ups)
        for how, runs in out["hang_ups"].items():
            print(f"a caller that goes {'quiet' if how == 'quiet' else 'away closing its connection'} mid-reply, "
                  f"{len(runs)} times: " + "; ".join(
                      f"its {freed} freed after median {1000 * statistics.median(r[freed] for r in runs):.0f} ms "
                      f"(max {1000 * max(r[freed] for r in runs):.0f})" for freed in ("slots", "session")))
    if args.json:
        args.json.write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
