"""The media end of a SIP caller, for the SIP tests and benchmarks/sip.py: a UDP port the SDP offer names,
sending G.711 (PCMU) RTP at real time and keeping what lyre sends back.

    peer = RtpPeer()                              # bound on loopback: peer.port goes in the offer
    peer.answered(keys="4")                       # lyre's first packet came; a key pressed (RFC 4733)
    spoke = peer.talk(ulaw_speech(text), until=lambda: bool(peer.replies()))
    peer.listen(1.0); peer.close()
"""

from __future__ import annotations

import socket
import struct
import time
from collections.abc import Callable

import numpy as np
from speech import speak

from lyre.server.calls.sip_media import DTMF_KEYS, read_rtp, rtp_packet
from lyre.server.calls.twilio_media import ulaw_encode

__all__ = ["SILENCE", "RtpPeer", "ulaw_speech"]

SILENCE = bytes([0xFF]) * 160  # 20 ms of mu-law silence


def ulaw_speech(text: str) -> bytes:
    """``text`` spoken by espeak-ng, as 8 kHz mu-law."""
    return ulaw_encode((np.clip(speak(text, 8000), -1, 1) * 32767).astype("<i2").tobytes())


class RtpPeer:
    """The caller's media end: a UDP port the offer names, sending G.711 (PCMU) at real time and keeping what
    lyre sends back, from a thread."""

    def __init__(self) -> None:
        self.socket = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.socket.bind(("127.0.0.1", 0))
        self.socket.settimeout(0.005)
        self.port = self.socket.getsockname()[1]
        self.lyre: tuple[str, int] | None = None  # where lyre's packets come from
        self.received: list[tuple[float, bytes]] = []  # (time.monotonic(), datagram)
        self._sequence = 0
        self._timestamp = 20_000

    def close(self) -> None:
        self.socket.close()

    def replies(self) -> list[tuple[float, bytes]]:
        """lyre's packets whose payload is not silence: the reply's audio."""
        return [(t, d) for t, d in self.received if (p := read_rtp(d)) is not None and p.payload != SILENCE]

    def answered(self, keys: str = "") -> None:
        """Wait for lyre's first packet (the call is answered), then press ``keys``."""
        deadline = time.monotonic() + 15
        while self.lyre is None:
            assert time.monotonic() < deadline, "no RTP from lyre after the call was answered"
            self._read()
        for i, key in enumerate(keys):  # RFC 4733: a start packet, then the end three times
            event = DTMF_KEYS.index(key)
            for end in (False, True, True, True):
                self._send(101, bytes([event, 0x8A if end else 0x0A]) + struct.pack("!H", 800), 10_000 + i * 4000)

    def talk(self, ulaw: bytes, until: Callable[[], bool], limit_s: float = 60.0) -> float:
        """Send ``ulaw``, then silence, at real time until ``until()``; the time (time.monotonic()) the
        speech ended. Then nothing more is sent until the next talk: the line goes dead."""
        frames = [ulaw[i:i + 160].ljust(160, b"\xff") for i in range(0, len(ulaw), 160)]
        start = time.monotonic()
        spoke = start + len(frames) * 0.02
        n = 0
        while not (time.monotonic() > spoke and until()):
            assert time.monotonic() < spoke + limit_s, "lyre did not answer in time"
            if time.monotonic() >= start + n * 0.02:
                self._send(0, frames[n] if n < len(frames) else SILENCE, self._timestamp)
                self._timestamp += 160
                n += 1
            self._read()
        return spoke

    def listen(self, seconds: float) -> None:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            self._read()

    def _send(self, payload_type: int, payload: bytes, timestamp: int) -> None:
        assert self.lyre is not None
        self._sequence += 1
        self.socket.sendto(rtp_packet(payload_type, self._sequence, timestamp, 99, payload), self.lyre)

    def _read(self) -> None:
        try:
            data, address = self.socket.recvfrom(2048)
        except (TimeoutError, BlockingIOError):
            return
        self.lyre = self.lyre or address
        self.received.append((time.monotonic(), data))
