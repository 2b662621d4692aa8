"""A WebRTC caller for the tests and benchmarks: an aiortc peer with a microphone and the ``oai-events``
data channel, as a browser would open a call to ``POST /v1/realtime/calls``.

    peer = Peer()
    answer = (await client.realtime.calls.with_raw_response.create(sdp=await peer.offer(), session=...))
    await peer.connect(answer.text)
    peer.mic.say(pcm16_24k)                       # played at real time; silence otherwise
    created = await peer.until("response.created")

    peer, call_id = await call(server_url, session)   # all of the above with the ``openai`` SDK
    peer.mic.drop(1.0)                            # the network loses the microphone's packets for 1 s
"""

from __future__ import annotations

import asyncio
import json
import time
from fractions import Fraction
from typing import Any

import numpy as np
from aiortc import MediaStreamTrack, RTCConfiguration, RTCPeerConnection, RTCSessionDescription
from aiortc.mediastreams import MediaStreamError
from av import AudioFrame
from openai import AsyncOpenAI

from realtime_types import check_event

from lyre.common.resample import Resampler
from lyre.server.calls.webrtc_audio import hear_sooner

__all__ = ["CALLS", "Microphone", "Peer", "call"]

RATE = 24_000  # what `say` takes
WIRE_RATE = 48_000  # what the microphone sends, as a browser's does (Opus's own rate)
FRAME = WIRE_RATE // 50  # 20 ms
CALLS = "/v1/realtime/calls"


class Microphone(MediaStreamTrack):
    """pcm16 at 24 kHz, queued by `say` and sent at real time in 20 ms frames of 48 kHz; silence when there
    is none. (At 24 kHz, aiortc's encoder would hold each frame back 20 ms to resample it; a browser's
    microphone is 48 kHz.)"""

    kind = "audio"

    def __init__(self) -> None:
        super().__init__()
        self._queue = bytearray()
        self._start: float | None = None
        self._pts = 0
        self._sounding = False
        self.said_until: float | None = None  # when the last queued speech went out
        self.onsets: list[float] = []  # when each frame of sound after silence went out
        self._lost_until = 0.0  # time.monotonic() until which the network loses every packet

    def hush(self) -> None:
        """Drop what is queued: silence from the next frame."""
        self._queue.clear()

    def say(self, pcm: bytes) -> None:
        resampler = Resampler(RATE, WIRE_RATE, 1)
        self._queue += resampler.push(pcm) + resampler.flush()

    def drop(self, seconds: float) -> None:
        """The network loses the microphone's packets for ``seconds`` from now (a Wi-Fi roam, a handover):
        none reach the server, and what was said meanwhile is lost; then they flow again."""
        self._lost_until = time.monotonic() + seconds

    @property
    def dropping(self) -> bool:
        """The network is losing the microphone's packets now."""
        return time.monotonic() < self._lost_until

    @property
    def speaking(self) -> bool:
        return bool(self._queue)

    async def recv(self) -> AudioFrame:
        if self.readyState != "live":
            raise MediaStreamError
        if self._start is None:
            self._start = time.monotonic()
        if (lost := self._lost_until - time.monotonic()) > 0:
            # The frames of the gap are made and lost on the way: the next to arrive is the one due after it.
            await asyncio.sleep(lost)
            gone = int((time.monotonic() - self._start) * WIRE_RATE) // FRAME * FRAME - self._pts
            del self._queue[:2 * max(gone, 0)]
            self._pts += max(gone, 0)
        # A frame goes once its 20 ms have passed, as a microphone's is captured.
        if (wait := self._start + (self._pts + FRAME) / WIRE_RATE - time.monotonic()) > 0:
            await asyncio.sleep(wait)
        pcm = bytes(self._queue[:2 * FRAME])
        del self._queue[:2 * FRAME]
        if pcm and not self._sounding:
            self.onsets.append(time.monotonic())
        self._sounding = bool(pcm)
        if pcm and not self._queue:
            self.said_until = time.monotonic()
        frame = AudioFrame(format="s16", layout="mono", samples=FRAME)
        frame.planes[0].update(pcm + bytes(2 * FRAME - len(pcm)))
        frame.pts, frame.sample_rate, frame.time_base = self._pts, WIRE_RATE, Fraction(1, WIRE_RATE)
        self._pts += FRAME
        return frame


class Peer:
    """One caller; see the module docstring. Keeps every event and when audio (not silence) arrived."""

    def __init__(self) -> None:
        self.pc = RTCPeerConnection(RTCConfiguration(iceServers=[]))  # host candidates only: no public STUN
        self.mic = Microphone()
        self.pc.addTrack(self.mic)
        self.channel = self.pc.createDataChannel("oai-events")
        self.events: list[dict[str, Any]] = []
        self.nonconforming: list[str] = []  # events the openai SDK's types reject
        self.first_at: dict[str, float] = {}  # when the first event of each type arrived
        self.arrived: list[float] = []  # when each of self.events arrived
        self._changed = asyncio.Event()
        self.channel.on("message", self._on_message)
        self.loud_at: list[float] = []  # when each 20 ms frame of sound (not silence) arrived
        self.frames = 0
        self._tasks: list[asyncio.Task[None]] = []
        self.pc.on("track", lambda track: self._tasks.append(asyncio.ensure_future(self._hear(track))))

    async def offer(self) -> str:
        await self.pc.setLocalDescription(await self.pc.createOffer())
        return self.pc.localDescription.sdp

    async def connect(self, answer: str) -> None:
        await self.pc.setRemoteDescription(RTCSessionDescription(answer, "answer"))
        # The caller decodes one frame after it arrives, as lyre's side does (aiortc's default holds four):
        # a browser's adaptive jitter buffer holds what the network needs.
        assert all(hear_sooner(t.receiver) for t in self.pc.getTransceivers() if t.kind == "audio")

    def send(self, event: dict[str, Any]) -> None:
        self.channel.send(json.dumps(event))

    async def until(self, kind: str, timeout: float = 120.0, count: int = 1) -> dict[str, Any]:
        """The ``count``-th event of ``kind``, waiting for it (AssertionError once an event is one the openai
        SDK's types reject)."""
        async with asyncio.timeout(timeout):
            while len(self.of(kind)) < count:
                assert not self.nonconforming, self.nonconforming[0]
                self._changed.clear()
                await self._changed.wait()
        assert not self.nonconforming, self.nonconforming[0]
        return self.of(kind)[count - 1]

    def of(self, kind: str) -> list[dict[str, Any]]:
        return [e for e in self.events if e["type"] == kind]

    def kinds(self) -> list[str]:
        return [e["type"] for e in self.events]

    async def close(self) -> None:
        for task in self._tasks:
            task.cancel()
        await self.pc.close()

    def _on_message(self, message: str) -> None:
        event = json.loads(message)
        try:  # every event of a call, held to the openai SDK's GA types (tests/realtime_types.py)
            check_event(event)
        except AssertionError as exc:  # raised here, the data channel's callback would swallow it: `until` raises
            self.nonconforming.append(str(exc))
        self.events.append(event)
        self.arrived.append(time.monotonic())
        self.first_at.setdefault(event["type"], time.monotonic())
        self._changed.set()

    async def _hear(self, track: MediaStreamTrack) -> None:
        while True:
            try:
                frame = await track.recv()
            except MediaStreamError:
                return
            self.frames += 1
            if np.abs(frame.to_ndarray()).max() > 64:
                self.loud_at.append(time.monotonic())


async def call(url: str, session: dict[str, Any] | None = None) -> tuple[Peer, str]:
    """A call to the server at ``url`` made with the ``openai`` SDK, connected and its session created; the
    peer and the call's id (from ``Location``)."""
    peer = Peer()
    kwargs = {"session": session} if session is not None else {}
    async with AsyncOpenAI(api_key="unused", base_url=f"{url}/v1") as client:
        create = client.realtime.calls.with_raw_response.create
        raw = await create(sdp=await peer.offer(), **kwargs)  # type: ignore[arg-type]
        answer = raw.text
    assert raw.status_code == 201 and raw.headers["content-type"].startswith("application/sdp")
    location = raw.headers["location"]
    assert location.startswith(CALLS + "/rtc_")
    await peer.connect(answer)
    await peer.until("session.created", timeout=20)
    return peer, location.rsplit("/", 1)[1]
