"""A phone stream's audio: G.711 mu-law, the assistant's speech cut into Twilio's frames, and where the
caller's playback is by Twilio's marks. Plain Python and numpy; no transport here.

    pcm = ulaw_decode(payload)                   # 8 kHz mu-law bytes -> pcm16 at 8 kHz
    frames = Outbound().push(pcm24k)             # pcm16 at 24 kHz -> 20 ms frames of 8 kHz mu-law (160 bytes)
    playback.send(response_id, 20.0, now); playback.mark(name)   # what went out, then a mark after it
    playback.echoed(name, now)                   # Twilio played up to the mark
    cut = playback.clear(now)                    # a barge-in: each reply cut short, and how much was heard

The mu-law codec is lyre.common.g711's.
"""

from __future__ import annotations

from dataclasses import dataclass


from lyre.common.g711 import ulaw_decode, ulaw_encode
from lyre.common.resample import Resampler
from lyre.server.calls.voice_call import OUTPUT_RATE

__all__ = ["FRAME_BYTES", "FRAME_MS", "PHONE_RATE", "Outbound", "Playback", "ulaw_decode", "ulaw_encode"]

PHONE_RATE = 8_000  # Twilio's media, both ways: mu-law at 8 kHz, mono
FRAME_MS = 20  # what Twilio sends, and what lyre sends back
FRAME_BYTES = PHONE_RATE * FRAME_MS // 1000  # one byte a sample
_SILENCE = 0xFF  # mu-law's zero
_REPLIES_KEPT = 8  # replies whose place in the audio sent is kept


class Outbound:
    """One reply's audio on its way to the phone: pcm16 at 24 kHz in, whole 20 ms mu-law frames out."""

    def __init__(self) -> None:
        self._resampler = Resampler(OUTPUT_RATE, PHONE_RATE, 1)
        self._rest = b""  # mu-law short of a whole frame

    def push(self, pcm: bytes) -> list[bytes]:
        """The frames ready after ``pcm``; what is left over waits for the next push."""
        return self._frames(self._rest + ulaw_encode(self._resampler.push(pcm)))

    def finish(self) -> list[bytes]:
        """The reply's last frames: what the resampler still holds, the last one padded with silence."""
        tail = self._rest + ulaw_encode(self._resampler.flush())
        if len(tail) % FRAME_BYTES:
            tail += bytes([_SILENCE]) * (FRAME_BYTES - len(tail) % FRAME_BYTES)
        return self._frames(tail)

    def _frames(self, ulaw: bytes) -> list[bytes]:
        whole = len(ulaw) - len(ulaw) % FRAME_BYTES
        self._rest = ulaw[whole:]
        return [ulaw[i:i + FRAME_BYTES] for i in range(0, whole, FRAME_BYTES)]


@dataclass
class _Sent:
    """One reply's audio in the stream: where it starts in all the audio sent, and how long it is (ms)."""

    response_id: str
    start_ms: float
    ms: float = 0.0


class Playback:
    """Where the caller's playback is in the audio a stream sent, by Twilio's marks.

    Twilio plays the media it is sent in order, at real time, and echoes each mark once the audio before
    it has played. So the position is the last echoed mark's, moving on at real time from when it came
    back, never past what was sent. When every mark is back Twilio's buffer has run dry, and the next
    audio starts to play as it is sent. A ``clear`` drops what has not played; Twilio then echoes the
    marks still waiting, though their audio never played: they are no longer expected, and ignored.
    Times are ``time.monotonic()`` seconds; positions milliseconds of audio.
    """

    def __init__(self) -> None:
        self.sent_ms = 0.0
        self._at_ms = 0.0  # the position at `_since`
        self._since: float | None = None  # None: not playing
        self._marks: dict[str, float] = {}  # marks not yet echoed: name -> where in the audio
        self._replies: list[_Sent] = []  # the last few replies that sent audio, in order

    @property
    def playing(self) -> bool:
        """Twilio has audio it has not played (as far as the marks tell)."""
        return bool(self._marks)

    def send(self, response_id: str, ms: float, now: float) -> None:
        """``ms`` more of a reply's audio went out."""
        if not self._marks:  # Twilio had played everything: this plays from now
            self._at_ms, self._since = self.sent_ms, now
        if not self._replies or self._replies[-1].response_id != response_id:
            self._replies = [*self._replies[1 - _REPLIES_KEPT:], _Sent(response_id, self.sent_ms)]
        self._replies[-1].ms += ms
        self.sent_ms += ms

    def mark(self, name: str) -> None:
        """A mark went out after the audio sent so far."""
        self._marks[name] = self.sent_ms

    def echoed(self, name: str, now: float) -> bool:
        """Twilio echoed a mark: played up to it. False for a mark not expected (one a clear dropped)."""
        if (at := self._marks.pop(name, None)) is None:
            return False
        self._at_ms, self._since = at, now
        return True

    def position(self, now: float) -> float:
        if self._since is None:
            return self._at_ms
        return min(self.sent_ms, self._at_ms + 1000 * (now - self._since))

    def clear(self, now: float) -> list[tuple[str, float]]:
        """Twilio drops all it has not played: each reply cut short, with how much of it was heard (ms)."""
        at = self.position(now)
        cut = [(sent.response_id, max(0.0, at - sent.start_ms)) for sent in self._replies
               if sent.start_ms + sent.ms > at]
        self._marks.clear()
        self._replies.clear()
        self.sent_ms = self._at_ms = at
        self._since = None
        return cut
