"""A WebRTC call's audio (lyre.server.calls.webrtc): the assistant's as a live track paced at real time, and the
caller's decoded sooner than aiortc's default."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import OrderedDict, deque
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
from lyre.common.resample import Resampler
from lyre.server.calls.voice_call import OUTPUT_RATE

__all__ = ["InOrder", "OutboundAudio", "hear_sooner"]

_FRAME = OUTPUT_RATE // 50  # 20 ms of output audio, in samples
_WIRE_RATE = 48_000  # Opus's
_WIRE_FRAME = _WIRE_RATE // 50
_REPLIES_KEPT = 8  # replies whose samples sent are kept


class OutboundAudio(MediaStreamTrack):
    """The assistant's voice as a live track: queued pcm16 at 24 kHz, paced out in 20 ms frames, silence
    between replies. Says when a reply's audio starts and stops playing, and what a clear cut off: each
    reply cut, with how much of it the track had sent (counted in samples, so the time the track sent
    silence waiting for a reply's audio, an underrun, is not counted as heard).

    Two things keep the way out short. Frames leave at 48 kHz, the rate Opus encodes at: given 24 kHz,
    aiortc's encoder resamples to whole 20 ms frames and holds one back for its filter's few samples of
    delay (20 ms on every packet). And audio queued while the track has none (a reply's first, or after the
    TTS fell behind) goes out at once rather than at the next tick of a clock that was sending silence;
    the clock restarts from it (as at a talkspurt's start, which a receiver's jitter buffer takes in its
    stride)."""

    kind = "audio"

    def __init__(self, event: Callable[[dict[str, Any]], None]) -> None:
        """``event``: where the output_audio_buffer events go."""
        super().__init__()
        self._event = event
        self._queue = bytearray()
        self._owners: deque[list[Any]] = deque()  # [response id, bytes of it queued], in the queue's order
        self._sent: OrderedDict[str, int] = OrderedDict()  # samples of each reply sent, the last few replies
        self._queued = asyncio.Event()  # set by push: wakes a clock that is sending silence
        self._sounding = False  # the last frame carried audio
        self._response = ""  # the reply whose audio is queued or playing
        self._finished: set[str] = set()  # replies whose audio is all queued
        self._playing = False
        self._start: float | None = None
        self._pts = 0
        self._resampler = Resampler(OUTPUT_RATE, _WIRE_RATE, 1)
        self._wire = bytearray()  # resampled audio not yet sent: starts with the filter's delay in silence

    def push(self, pcm: bytes, response_id: str) -> None:
        self._response = response_id
        self._queue += pcm
        if self._owners and self._owners[-1][0] == response_id:
            self._owners[-1][1] += len(pcm)
        else:
            self._owners.append([response_id, len(pcm)])
        if response_id not in self._sent:
            self._sent[response_id] = 0
            if len(self._sent) > _REPLIES_KEPT:
                self._sent.popitem(last=False)
        self._queued.set()

    def finish(self, response_id: str) -> None:
        """All of the reply's audio is queued; it stops playing once the queue runs dry."""
        self._finished.add(response_id)
        if self._playing and not self._queue:
            self._stopped()

    def clear(self) -> list[tuple[str, float]]:
        """Drop what is queued and not yet played; the replies cut, each with the ms of it sent: those with
        audio queued, and the one playing while its audio is still to come."""
        if not self._queue and not self._playing:
            return []
        cut = list(dict.fromkeys(owner[0] for owner in self._owners))
        if self._playing and self._response not in self._finished and self._response not in cut:
            cut.append(self._response)
        self._queue.clear()
        self._owners.clear()
        self._playing = False
        self._event({"type": "output_audio_buffer.cleared", "event_id": new_id("event"),
                          "response_id": self._response})
        return [(response_id, 1000 * self._sent.get(response_id, 0) / OUTPUT_RATE) for response_id in cut]

    def stop(self) -> None:
        super().stop()
        self._resampler.close()  # its filter's threads go now, not at Python's next full collection

    async def recv(self) -> AudioFrame:
        if self.readyState != "live":
            raise MediaStreamError
        now = time.monotonic()
        if self._start is None:
            self._start = now
        elif (wait := self._start + self._pts / _WIRE_RATE - now) > 0:
            if self._sounding:
                await asyncio.sleep(wait)
            else:  # the last frame was silence: audio that comes need not wait for the next tick
                if not self._queue:
                    self._queued.clear()
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(self._queued.wait(), wait)
                if self._queue:
                    self._start = time.monotonic() - self._pts / _WIRE_RATE
        pcm = bytes(self._queue[:2 * _FRAME])
        del self._queue[:2 * _FRAME]
        self._count_sent(len(pcm))
        self._sounding = bool(pcm)
        if pcm and not self._playing:
            self._playing = True
            self._event({"type": "output_audio_buffer.started", "event_id": new_id("event"),
                              "response_id": self._response})
        if self._playing and not self._queue and self._response in self._finished:
            self._stopped()
        return self._frame(pcm + bytes(2 * _FRAME - len(pcm)))

    def _frame(self, pcm: bytes) -> AudioFrame:
        """20 ms of 24 kHz pcm16 as a 48 kHz frame. The resampler's output runs its filter's delay (32
        samples) short of the input, so that much silence leads the audio and every frame is whole."""
        if self.readyState != "live":  # stopped while this frame waited for its time
            raise MediaStreamError
        wire = self._resampler.push(pcm)
        if self._pts == 0:
            self._wire += bytes(2 * _WIRE_FRAME - len(wire))
        self._wire += wire
        out = bytes(self._wire[:2 * _WIRE_FRAME])
        del self._wire[:2 * _WIRE_FRAME]
        frame = AudioFrame(format="s16", layout="mono", samples=_WIRE_FRAME)
        frame.planes[0].update(out)
        frame.pts, frame.sample_rate, frame.time_base = self._pts, _WIRE_RATE, Fraction(1, _WIRE_RATE)
        self._pts += _WIRE_FRAME
        return frame

    def _count_sent(self, taken: int) -> None:
        """``taken`` bytes left the queue: each reply's share of them counts as sent."""
        while taken:
            owner = self._owners[0]
            share = min(taken, owner[1])
            if owner[0] in self._sent:
                self._sent[owner[0]] += share // 2
            owner[1] -= share
            taken -= share
            if not owner[1]:
                self._owners.popleft()

    def _stopped(self) -> None:
        self._playing = False
        self._finished.discard(self._response)
        self._event({"type": "output_audio_buffer.stopped", "event_id": new_id("event"),
                          "response_id": self._response})


class InOrder(JitterBuffer):
    """A jitter buffer for audio that holds nothing: each packet (a whole Opus frame) goes to the decoder as
    it comes; one older than the newest seen (reordered, or a duplicate) is dropped. Notes when the last
    packet came, however late its decoding runs."""

    def __init__(self) -> None:
        super().__init__(capacity=16)
        self._newest: int | None = None
        self.packet_at: float | None = None  # time.monotonic() of the last packet

    def add(self, packet: RtpPacket) -> tuple[bool, JitterFrame | None]:
        self.packet_at = time.monotonic()
        if self._newest is not None and not 0 < uint16_add(packet.sequence_number, -self._newest) < 0x8000:
            return False, None  # at or behind the newest: late or repeated
        self._newest = packet.sequence_number
        return False, JitterFrame(data=packet._data, timestamp=packet.timestamp)  # type: ignore[attr-defined]


def hear_sooner(receiver: Any) -> InOrder | None:
    """Decode the caller's audio (an audio receiver's) as it arrives. aiortc's audio receiver holds four 20 ms frames before
    decoding one, to put reordered packets back in order (a player needs that); the agent listens, and
    80 ms more of it is 80 ms later on every end of turn. A packet that comes after a newer one is dropped
    (Whisper does not miss 20 ms). aiortc offers no setting for it: the new buffer, or None if the
    receiver's was not found (the tests check it is, so an aiortc that renames it fails there)."""
    name = "_RTCRtpReceiver__jitter_buffer"
    if not isinstance(getattr(receiver, name, None), JitterBuffer):
        return None
    buffer = InOrder()
    setattr(receiver, name, buffer)
    return buffer
