"""A SIP call's media: the codec an SDP offer gets, RTP packets, G.711 (PCMU and PCMA), a small jitter buffer
and RFC 4733 telephone events. Plain Python and numpy; no sockets here.

    packet = read_rtp(datagram)                  # None: not an RTP packet lyre takes
    codec = CODECS[packet.payload_type]          # PCMU (0) or PCMA (8)
    pcm = codec.decode(packet.payload)           # pcm16 at 8 kHz
    for payload in jitter.push(packet): ...      # in sequence order, a late one dropped
    key = events.push(packet.payload, packet.timestamp)   # "5" once per key press, else None
    datagram = rtp_packet(pt, seq, ts, ssrc, payload)

A-law follows G.711 as mu-law does in lyre.server.calls.twilio_media: a 13-bit magnitude in 8 segments of
16 steps, the even bits inverted (0x55). Both codecs are table look-ups, as ``audioop`` is gone in 3.13.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass

from aiosipua import SdpMessage, SdpNegotiationError

from lyre.common.g711 import alaw_decode, alaw_encode, ulaw_decode, ulaw_encode

__all__ = ["CODECS", "DTMF_KEYS", "Codec", "JitterBuffer", "RtpPacket", "RtpSource", "TelephoneEvents", "alaw_decode",
           "alaw_encode", "offer_codec", "offer_dtmf", "read_rtp", "rtp_packet"]

RTP_HEADER = 12
MAX_RTP_BYTES = 1500  # one Ethernet frame: a G.711 packet of 20 ms is 172 bytes
DTMF_KEYS = "0123456789*#ABCD"  # RFC 4733's events 0 to 15


@dataclass(frozen=True)
class Codec:
    name: str
    payload_type: int  # static, RFC 3551
    encode: Callable[[bytes], bytes]
    decode: Callable[[bytes], bytes]
    silence: int  # the byte of pcm 0


CODECS = {0: Codec("PCMU", 0, ulaw_encode, ulaw_decode, 0xFF), 8: Codec("PCMA", 8, alaw_encode, alaw_decode, 0xD5)}


def offer_codec(offer: SdpMessage | None) -> int:
    """The payload type of the first of PCMU and PCMA an SDP offer names; SdpNegotiationError if neither."""
    audio = offer.audio if offer is not None else None
    for codec in audio.codecs if audio is not None else ():
        if codec.payload_type in CODECS:
            return codec.payload_type
    raise SdpNegotiationError("the offer has neither PCMU nor PCMA")


def offer_dtmf(offer: SdpMessage | None) -> int | None:
    """The payload type of an SDP offer's telephone-event (RFC 4733), if it has one."""
    audio = offer.audio if offer is not None else None
    for codec in audio.codecs if audio is not None else ():
        if codec.encoding_name.lower() == "telephone-event":
            return codec.payload_type
    return None


@dataclass(frozen=True)
class RtpPacket:
    payload_type: int
    sequence: int
    timestamp: int
    ssrc: int
    marker: bool
    payload: bytes


def read_rtp(data: bytes) -> RtpPacket | None:
    """An RTP version 2 packet, its CSRCs, extension and padding taken off; None for anything else (RTCP
    on the same port, a truncated or oversized datagram)."""
    if not RTP_HEADER <= len(data) <= MAX_RTP_BYTES or data[0] >> 6 != 2:
        return None
    first, second, sequence, timestamp, ssrc = struct.unpack_from("!BBHII", data)
    payload_type = second & 0x7F
    if 72 <= payload_type <= 76:  # RTCP's packet types 200-204 where RTP's payload type would be
        return None
    start = RTP_HEADER + 4 * (first & 0x0F)
    if first & 0x10:  # a header extension: 4 bytes, then its length in words
        if len(data) < start + 4:
            return None
        start += 4 + 4 * struct.unpack_from("!H", data, start + 2)[0]
    end = len(data) - (data[-1] if first & 0x20 else 0)
    if start > end:
        return None
    return RtpPacket(payload_type, sequence, timestamp, ssrc, bool(second & 0x80), data[start:end])


def rtp_packet(payload_type: int, sequence: int, timestamp: int, ssrc: int, payload: bytes,
               marker: bool = False) -> bytes:
    return struct.pack("!BBHII", 0x80, (0x80 if marker else 0) | payload_type, sequence & 0xFFFF,
                       timestamp & 0xFFFFFFFF, ssrc) + payload


class JitterBuffer:
    """Packets back in sequence order, waiting at most ``depth`` packets for one missing; a packet older than
    the last released (late or a duplicate) is dropped. A new SSRC (the far end restarted its stream)
    starts afresh."""

    def __init__(self, depth: int = 3) -> None:
        self.depth = depth
        self.dropped = 0  # late, duplicate
        self.lost = 0  # skipped over
        self._next: int | None = None
        self._ssrc: int | None = None
        self._held: dict[int, bytes] = {}

    def push(self, packet: RtpPacket) -> list[bytes]:
        """The payloads now in order."""
        if packet.ssrc != self._ssrc:
            self._ssrc, self._next, self._held = packet.ssrc, packet.sequence, {}
        assert self._next is not None
        ahead = (packet.sequence - self._next) & 0xFFFF
        if ahead >= 0x8000 or packet.sequence in self._held:  # behind what was released, or held already
            self.dropped += 1
            return []
        self._held[packet.sequence] = packet.payload
        out: list[bytes] = []
        while self._held:
            if (payload := self._held.pop(self._next, None)) is not None:
                out.append(payload)
                self._next = (self._next + 1) & 0xFFFF
            elif len(self._held) > self.depth:  # waited long enough: the missing ones up to the next held are lost
                following = min(self._held, key=lambda seq: (seq - self._next) & 0xFFFF)  # a step, not thousands
                self.lost += (following - self._next) & 0xFFFF
                self._next = following
            else:
                break
        return out


class RtpSource:
    """Where a call's RTP goes and whose packets its port takes (symmetric RTP, latched): the offer's address
    until the caller's first packet, then that packet's source, which a NAT may have rewritten. Only packets
    from the offer's host or the signalling's host are the caller's; once one is latched, only its source is,
    until it has been quiet for RELATCH_S (a NAT that rebinds). A re-INVITE's new address latches afresh."""

    RELATCH_S = 1.0

    def __init__(self, offered: tuple[str, int], signalling_host: str) -> None:
        self.remote = offered  # where lyre's RTP goes
        self._hosts = {offered[0], signalling_host}
        self._latched = False
        self._heard_at = float("-inf")

    def allows(self, addr: tuple[str, int], now: float) -> bool:
        """A packet from ``addr`` is the caller's."""
        if self._latched and addr == self.remote:
            return True
        return addr[0] in self._hosts and (not self._latched or now - self._heard_at >= self.RELATCH_S)

    def heard(self, addr: tuple[str, int], now: float) -> None:
        """A packet the call took came from ``addr``: lyre answers there."""
        self.remote, self._latched, self._heard_at = addr, True, now

    def move(self, remote: tuple[str, int]) -> None:
        if remote != self.remote or remote[0] not in self._hosts:
            self._hosts.add(remote[0])
            self.remote, self._latched = remote, False


class TelephoneEvents:
    """RFC 4733 key presses: an event is sent as several packets of one timestamp, the last ones (sent three
    times) with the end bit. The key counts once, at its first end packet."""

    def __init__(self) -> None:
        self._ended: int | None = None  # the timestamp of the last event counted

    def push(self, payload: bytes, timestamp: int) -> str | None:
        if len(payload) < 4:
            return None
        event, flags = payload[0], payload[1]
        if not flags & 0x80 or timestamp == self._ended or event >= len(DTMF_KEYS):
            return None
        self._ended = timestamp
        return DTMF_KEYS[event]
