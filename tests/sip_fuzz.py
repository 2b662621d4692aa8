"""A SIP and RTP fuzzer for a real ``lyre serve --sip`` (tests/server/calls/test_sip_hostile.py): seeded, so a
run is the same every time for its seed. Each step sends one message, chosen among

- valid requests (INVITE with and without an offer, ACK, BYE, CANCEL, OPTIONS, re-INVITE, and methods lyre
  does not take) and stray responses, for new Call-IDs and for the calls it already placed;
- the same mutated: truncated, oversized, headers dropped, doubled or folded, compact header names, a bad
  CSeq, Content-Length, Via or To-tag, bytes that are not UTF-8, a hostile Authorization, a hostile offer;
- RTP for the calls lyre answered (valid G.711, key presses, crafted sequence numbers, truncated and
  oversized packets, RTCP, padding and extension lengths past the end), from the caller's host and from
  a stranger's;

from a trusted source (127.0.0.1) and a stranger (127.0.0.2), over UDP and TCP, with TCP connections that
stop half-way through a message. It behaves as a caller would where it must for nothing to be left open:
every 200 to an INVITE is ACKed, lyre's own requests (a BYE) are answered 200, and ``finish`` hangs up the
calls still up.

    fuzz = SipFuzz(port, seed=1)
    fuzz.run(2000)       # steps; fuzz.seen counts what came back
    fuzz.finish()
"""

from __future__ import annotations

import random
import re
import socket
import struct
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

from sip_lines import SipLine, code_of, request, sdp

from lyre.server.calls.sip_media import rtp_packet

__all__ = ["SipFuzz"]

TRUSTED, STRANGER = "127.0.0.1", "127.0.0.2"
_METHODS = ("OPTIONS", "REGISTER", "INFO", "MESSAGE", "SUBSCRIBE", "NOTIFY", "PRACK", "UPDATE", "REFER", "PUBLISH",
            "FOO")


@dataclass
class _Call:
    line: SipLine
    call_id: str
    to_tag: str
    rtp: tuple[str, int] | None  # lyre's RTP address, from its answer
    cseq: int = 1
    packets: int = 0


class SipFuzz:
    """See the module docstring."""

    def __init__(self, port: int, seed: int) -> None:
        self.port = port
        self.rng = random.Random(seed)
        self.lines = {(source, tcp): SipLine(port, source, tcp) for source in (TRUSTED, STRANGER)
                      for tcp in (False, True)}
        self.rtp = {source: _udp(source) for source in (TRUSTED, STRANGER)}
        self.sink = _udp(TRUSTED)  # where the offers say the caller's media is: lyre's RTP lands here unread
        self.calls: dict[str, _Call] = {}  # answered, ACKed, not yet hung up
        self.placed: list[str] = []  # Call-IDs sent in INVITEs
        self.seen: Counter[str] = Counter()  # what came back: status codes, lyre's requests
        self.sent = 0
        self._n = 0

    # -- the run --

    def run(self, steps: int) -> None:
        for _ in range(steps):
            self._step()
            self.sent += 1
            self.poll()

    def poll(self) -> None:
        """Read what lyre sent on every line, and act as a caller must."""
        for key, line in list(self.lines.items()):
            while (text := line.read(0.0)) is not None:
                self._heard(line, text)
            if line.tcp and _closed(line):
                self.seen["tcp closed by lyre"] += 1
                line.close()
                self.lines[key] = SipLine(self.port, line.source, True)

    def finish(self, quiet_s: float = 3.0, limit_s: float = 30.0) -> None:
        """Hang up every call still up, answering what lyre sends, until nothing has come for ``quiet_s`` (a
        ringing call's answer comes within --sip-ring)."""
        start = heard = time.monotonic()
        while time.monotonic() - heard < quiet_s and time.monotonic() - start < limit_s:
            for call in list(self.calls.values()):
                self._bye(call)
            for line in self.lines.values():
                while (text := line.read(0.02)) is not None:
                    heard = time.monotonic()
                    self._heard(line, text)
        for line in [*self.lines.values()]:
            line.close()
        for s in (*self.rtp.values(), self.sink):
            s.close()

    def _heard(self, line: SipLine, text: str) -> None:
        if not text.startswith("SIP/2.0"):
            method = text.split(" ", 1)[0]
            self.seen[f"lyre sent {method}"] += 1
            self._send(line, lambda: line.respond(text))
            if method == "BYE" and (call_id := re.search(r"(?im)^(?:call-id|i):\s*(\S+)", text)):
                self.calls.pop(call_id.group(1), None)
            return
        code = code_of(text)
        self.seen[str(code)] += 1
        invite = re.search(r"(?im)^cseq:\s*(\d+)\s+INVITE\s*$", text)
        call_id = re.search(r"(?im)^(?:call-id|i):\s*(\S+)", text)
        to_tag = re.search(r"(?im)^(?:to|t):.*;tag=([^;\s]+)", text)
        if code != 200 or invite is None or call_id is None or to_tag is None:
            return
        call = self.calls.get(call_id.group(1)) or _Call(line, call_id.group(1), to_tag.group(1), None)
        call.cseq = max(call.cseq, int(invite.group(1)))
        port = re.search(r"(?m)^m=audio (\d+)", text)
        call.rtp = ("127.0.0.1", int(port.group(1))) if port else call.rtp
        self._send(line, self._request(call.line, "ACK", call.call_id, cseq=call.cseq, to_tag=call.to_tag))
        self.calls[call.call_id] = call

    def _bye(self, call: _Call) -> None:
        call.cseq += 1
        self._send(call.line, self._request(call.line, "BYE", call.call_id, cseq=call.cseq, to_tag=call.to_tag))
        self.calls.pop(call.call_id, None)

    def _send(self, line: SipLine, message: bytes | Callable[[], None]) -> None:
        """Sent, unless lyre closed the line's connection (a message it would not read): counted then."""
        try:
            line.send(message) if isinstance(message, bytes) else message()
        except OSError:
            self.seen["send on a closed connection"] += 1

    # -- one step --

    def _step(self) -> None:
        rng = self.rng
        roll = rng.random()
        if roll < 0.2 and self.calls:
            self._media(rng.choice(list(self.calls.values())))
        elif roll < 0.25 and self.calls:
            self._in_dialog(rng.choice(list(self.calls.values())))
        elif roll < 0.3:
            self._half_message()
        else:
            line = self.lines[(rng.choice((TRUSTED, STRANGER)), rng.random() < 0.3)]
            message = self._message(line)
            self._send(line, self._mutate(message) if rng.random() < 0.5 else message)

    def _message(self, line: SipLine) -> bytes:
        rng = self.rng
        self._n += 1
        call_id = rng.choice(self.placed) if self.placed and rng.random() < 0.3 else f"fuzz-{self._n}"
        kind = rng.random()
        if kind < 0.4:
            self.placed.append(call_id)
            self.placed = self.placed[-50:]
            body = sdp(self.sink.getsockname()[1]) if rng.random() < 0.8 else ""
            return self._request(line, "INVITE", call_id, body=body, branch=f"z9hG4bK-{self._n}")
        if kind < 0.55:
            method = rng.choice(("ACK", "BYE", "CANCEL"))
            branch = f"z9hG4bK-{rng.randrange(1, self._n + 1)}"  # now and then an INVITE's own
            return self._request(line, method, call_id, branch=branch,
                                 to_tag=rng.choice((None, "t1")) if method != "CANCEL" else None)
        if kind < 0.85:
            return self._request(line, rng.choice(_METHODS), call_id)
        code = rng.choice((100, 180, 200, 401, 481, 500, 603))
        return (f"SIP/2.0 {code} Fuzz\r\nVia: SIP/2.0/UDP 127.0.0.1:{self.port};branch=z9hG4bK-x{self._n}\r\n"
                f"From: <sip:agent@127.0.0.1>;tag=a\r\nTo: <sip:caller@127.0.0.1>;tag=b\r\nCall-ID: {call_id}\r\n"
                f"CSeq: 1 {rng.choice(('INVITE', 'BYE', 'REFER'))}\r\nContent-Length: 0\r\n\r\n").encode()

    def _request(self, line: SipLine, method: str, call_id: str, **kwargs: object) -> bytes:
        return request(line, method, call_id, **kwargs)  # type: ignore[arg-type]

    def _mutate(self, message: bytes) -> bytes:
        rng = self.rng
        head, _, body = message.partition(b"\r\n\r\n")
        lines = head.split(b"\r\n")
        pick = rng.randrange(16)
        if pick == 0:
            return message[:rng.randrange(len(message))]
        if pick == 1:
            lines.insert(rng.randrange(1, len(lines) + 1), b"X-Pad: " + b"a" * rng.choice((200, 3000, 9000)))
        elif pick == 2 and len(lines) > 1:
            del lines[rng.randrange(1, len(lines))]
        elif pick == 3 and len(lines) > 1:
            lines.insert(rng.randrange(1, len(lines)), rng.choice(lines[1:]))
        elif pick == 4:
            lines = [_compact(line) for line in lines]
        elif pick == 5:
            lines = [re.sub(rb"^CSeq: \d+", rng.choice((b"CSeq: -1", b"CSeq: " + b"9" * 400, b"CSeq: x",
                                                        b"CSeq: 4294967296")), line) for line in lines]
        elif pick == 6:
            lines = [re.sub(rb"^Content-Length: \d+", rng.choice((b"Content-Length: 99999", b"Content-Length: -5",
                                                                  b"Content-Length: 1", b"Content-Length: " + b"9" * 40)),
                            line) for line in lines]
        elif pick == 7:
            via = rng.choice((b"Via: SIP/2.0/UDP [::1]:5060", b"Via: SIP/2.0/UDP 127.0.0.1:99999;branch=z9hG4bKv",
                              b"Via: SIP/2.0/UDP 127.0.0.1;rport=abc;received=not-an-ip;branch=z9hG4bKv",
                              b"Via: SIP/2.0/SCTP 127.0.0.1:0;branch=z9hG4bKv", b"Via: junk"))
            lines = [via if line.startswith(b"Via:") else line for line in lines]
        elif pick == 8:
            lines = [line + b";tag=" + b"t" * rng.choice((1, 500)) if line.startswith(b"To:") else line
                     for line in lines]
        elif pick == 9:
            spot = rng.randrange(len(message))
            return message[:spot] + bytes(rng.randrange(256) for _ in range(rng.randrange(1, 40))) + message[spot:]
        elif pick == 10:
            lines.insert(1, b"Authorization: " + rng.choice((
                b'Digest username="lyre", realm="lyre", nonce="' + b"9" * 400 + b'.00", uri="sip:a", response="0"',
                b"Digest " + b"a=b, " * 300, b'Digest username="\\"\\"\\"', b"Basic bHlyZTpzZWNyZXQ=")))
        elif pick == 11:
            lines.insert(rng.randrange(1, len(lines) + 1), b" folded continuation")
        elif pick == 12 and body:
            body = rng.choice((b"v=0\r\nm=audio 0 RTP/AVP 0\r\n", b"v=0\r\nc=IN IP4 0.0.0.0\r\nm=audio 4000 RTP/AVP 0\r\n",
                               b"v=0\r\nm=audio 70000 RTP/AVP " + b" ".join(b"%d" % i for i in range(128)) + b"\r\n",
                               b"v=0\r\nm=video 4000 RTP/AVP 96\r\n", b"v=0\r\nc=IN IP6 ::1\r\nm=audio 4000 RTP/AVP 8\r\n",
                               b"\x00\xff" * 50))
            lines = [re.sub(rb"^Content-Length: \d+", b"Content-Length: %d" % len(body), line) for line in lines]
        elif pick == 13:
            lines[0] = rng.choice((b"INVITE sip:agent@127.0.0.1 SIP/3.0", b"INVITE  SIP/2.0", b"INVITE",
                                   b"invite sip:agent@127.0.0.1 SIP/2.0", lines[0] + b" extra"))
        elif pick == 14:
            lines = [line.replace(b"Call-ID: ", b"Call-ID: " + b"c" * rng.choice((0, 300))) for line in lines]
        else:
            lines = lines[:1] + [b"X-H%d: v" % i for i in range(rng.choice((100, 300)))] + lines[1:]
        return b"\r\n".join(lines) + b"\r\n\r\n" + body

    def _half_message(self) -> None:
        """A TCP connection that sends part of a message and closes."""
        s = socket.socket()
        s.bind((self.rng.choice((TRUSTED, STRANGER)), 0))
        try:
            s.connect(("127.0.0.1", self.port))
            s.sendall(b"INVITE sip:agent@127.0.0.1 SIP/2.0\r\nVia: SIP/2.0/TCP 127.0.0.1:9;branch=z9hG4bKh\r\n"
                      b"Content-Length: 500\r\n\r\nv=0"[:self.rng.randrange(10, 120)])
        except OSError:
            self.seen["tcp refused"] += 1
        finally:
            s.close()

    def _in_dialog(self, call: _Call) -> None:
        """A re-INVITE (hold, resume, a move, a new codec), an UPDATE or an INFO in one of the calls."""
        call.cseq += 1
        method = self.rng.choice(("INVITE", "INVITE", "UPDATE", "INFO"))
        body = sdp(self.sink.getsockname()[1], direction=self.rng.choice(("sendrecv", "sendonly", "inactive"))) \
            if method == "INVITE" else ""
        self._send(call.line, self._request(call.line, method, call.call_id, cseq=call.cseq, to_tag=call.to_tag,
                                            body=body, branch=f"z9hG4bK-d{call.cseq}-{call.call_id}"))

    def _media(self, call: _Call) -> None:
        if call.rtp is None:
            return
        rng = self.rng
        call.packets += 1
        source = self.rtp[TRUSTED if rng.random() < 0.7 else STRANGER]
        pick = rng.randrange(8)
        sequence = rng.choice((call.packets, rng.randrange(65536)))
        if pick < 3:
            packet = rtp_packet(0, sequence, 160 * call.packets, 5, bytes(rng.randrange(256) for _ in range(160)))
        elif pick == 3:
            packet = rtp_packet(101, sequence, 4000, 5, bytes([rng.randrange(20), 0x8A, 0, 160]))
        elif pick == 4:
            packet = rtp_packet(rng.randrange(128), sequence, 0, 6, b"\x00" * rng.randrange(200))
        elif pick == 5:
            packet = bytes([0x80 | rng.choice((0x10, 0x20, 0x0F)), 0]) + struct.pack("!HII", sequence, 0, 5) + b"\xff" * 8
        elif pick == 6:
            packet = bytes([0x80, 200]) + b"\x00" * rng.choice((2, 6, 26))  # RTCP, or a packet too short
        else:
            packet = bytes(rng.randrange(256) for _ in range(rng.choice((1, 12, 1600))))
        source.sendto(packet, call.rtp)
        if call.packets > 12 and rng.random() < 0.2:
            self._bye(call)


def _udp(host: str) -> socket.socket:
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind((host, 0))
    return s


def _compact(line: bytes) -> bytes:
    for long, short in ((b"Via:", b"v:"), (b"From:", b"f:"), (b"To:", b"t:"), (b"Call-ID:", b"i:"),
                        (b"Content-Length:", b"l:"), (b"Contact:", b"m:"), (b"Content-Type:", b"c:")):
        if line.startswith(long):
            return short + line[len(long):]
    return line


def _closed(line: SipLine) -> bool:
    """The TCP connection was closed by lyre (idle, malformed, over its cap)."""
    line.socket.setblocking(False)
    try:
        return line.socket.recv(1, socket.MSG_PEEK) == b""
    except (BlockingIOError, InterruptedError):
        return False
    except OSError:
        return True
    finally:
        line.socket.setblocking(True)
