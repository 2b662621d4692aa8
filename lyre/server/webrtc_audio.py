"""A WebRTC call's audio (lyre.server.webrtc): the assistant's as a live track paced at real time, and the
caller's decoded sooner than aiortc's default."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from fractions import Fraction
from typing import Any

from aiortc import MediaStreamTrack
from aiortc.jitterbuffer import JitterBuffer, JitterFrame
from aiortc.rtp import RtpPacket
from aiortc.utils import uint16_add
from aiortc.mediastreams import MediaStreamError
from av import AudioFrame

from lyre.agent.events import new_id
from lyre.server.voice_call import OUTPUT_RATE

__all__ = ["OutboundAudio", "hear_sooner"]

_FRAME = OUTPUT_RATE // 50  # 20 ms of output audio, in samples


class OutboundAudio(MediaStreamTrack):
    """The assistant's voice as a live track: queued pcm16 at 24 kHz, paced out in 20 ms frames, silence
    between replies. Says when a reply's audio starts and stops playing, and what a clear cut off."""

    kind = "audio"

    def __init__(self, event: Callable[[dict[str, Any]], None]) -> None:
        """``event``: where the output_audio_buffer events go."""
        super().__init__()
        self._event = event
        self._queue = bytearray()
        self._response = ""  # the reply whose audio is queued or playing
        self._finished: set[str] = set()  # replies whose audio is all queued
        self._playing = False
        self._start: float | None = None
        self._pts = 0

    def push(self, pcm: bytes, response_id: str) -> None:
        self._response = response_id
        self._queue += pcm

    def finish(self, response_id: str) -> None:
        """All of the reply's audio is queued; it stops playing once the queue runs dry."""
        self._finished.add(response_id)
        if self._playing and not self._queue:
            self._stopped()

    def clear(self) -> None:
        """Drop what is queued and not yet played."""
        if not self._queue and not self._playing:
            return
        self._queue.clear()
        self._playing = False
        self._event({"type": "output_audio_buffer.cleared", "event_id": new_id("event"),
                          "response_id": self._response})

    async def recv(self) -> AudioFrame:
        if self.readyState != "live":
            raise MediaStreamError
        now = time.monotonic()
        if self._start is None:
            self._start = now
        elif (wait := self._start + self._pts / OUTPUT_RATE - now) > 0:
            await asyncio.sleep(wait)
        pcm = bytes(self._queue[:2 * _FRAME])
        del self._queue[:2 * _FRAME]
        if pcm and not self._playing:
            self._playing = True
            self._event({"type": "output_audio_buffer.started", "event_id": new_id("event"),
                              "response_id": self._response})
        if self._playing and not self._queue and self._response in self._finished:
            self._stopped()
        frame = AudioFrame(format="s16", layout="mono", samples=_FRAME)
        frame.planes[0].update(pcm + bytes(2 * _FRAME - len(pcm)))
        frame.pts, frame.sample_rate, frame.time_base = self._pts, OUTPUT_RATE, Fraction(1, OUTPUT_RATE)
        self._pts += _FRAME
        return frame

    def _stopped(self) -> None:
        self._playing = False
        self._finished.discard(self._response)
        self._event({"type": "output_audio_buffer.stopped", "event_id": new_id("event"),
                          "response_id": self._response})


class _InOrder(JitterBuffer):
    """A jitter buffer for audio that holds nothing: each packet (a whole Opus frame) goes to the decoder as
    it comes; one older than the newest seen (reordered, or a duplicate) is dropped."""

    def __init__(self) -> None:
        super().__init__(capacity=16)
        self._newest: int | None = None

    def add(self, packet: RtpPacket) -> tuple[bool, JitterFrame | None]:
        if self._newest is not None and not 0 < uint16_add(packet.sequence_number, -self._newest) < 0x8000:
            return False, None  # at or behind the newest: late or repeated
        self._newest = packet.sequence_number
        return False, JitterFrame(data=packet._data, timestamp=packet.timestamp)  # type: ignore[attr-defined]


def hear_sooner(receiver: Any) -> bool:
    """Decode the caller's audio (an audio receiver's) as it arrives. aiortc's audio receiver holds four 20 ms frames before
    decoding one, to put reordered packets back in order (a player needs that); the agent listens, and
    80 ms more of it is 80 ms later on every end of turn. A packet that comes after a newer one is dropped
    (Whisper does not miss 20 ms). aiortc offers no setting for it: True if the receiver's buffer was found
    and replaced (the tests check it is, so an aiortc that renames it fails there)."""
    name = "_RTCRtpReceiver__jitter_buffer"
    if not isinstance(getattr(receiver, name, None), JitterBuffer):
        return False
    setattr(receiver, name, _InOrder())
    return True
