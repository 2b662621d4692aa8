"""A raw SIP peer for the tests that send what SIPp will not (tests/server/calls/test_sip_hostile.py): messages
built by hand, over UDP or TCP, from any loopback address (127.0.0.2 is outside a ``--sip-allow
127.0.0.1/32``), and a caller's dialog driven through them.

    line = SipLine(server_port, source="127.0.0.2", tcp=True)
    line.send(invite(line, "call-1", rtp_port=peer.port))
    code, text = line.final()                      # the first final response (1xx skipped)
    call = Dialog(line, "call-1"); call.place(rtp_port); call.bye()
"""

from __future__ import annotations

import re
import socket
import time

__all__ = ["Dialog", "SipLine", "code_of", "invite", "request", "sdp"]


def sdp(rtp_port: int, host: str = "127.0.0.1", direction: str = "sendrecv") -> str:
    return (f"v=0\r\no=- 1 1 IN IP4 {host}\r\ns=-\r\nc=IN IP4 {host}\r\nt=0 0\r\n"
            f"m=audio {rtp_port} RTP/AVP 0 101\r\na=rtpmap:0 PCMU/8000\r\na=rtpmap:101 telephone-event/8000\r\n"
            f"a={direction}\r\n")


def request(line: SipLine, method: str, call_id: str, *, cseq: int = 1, branch: str | None = None,
            from_tag: str = "caller", to_tag: str | None = None, body: str = "", via_port: int | None = None,
            extra: str = "", uri: str | None = None, cseq_method: str | None = None) -> bytes:
    """A request from ``line``; ``via_port``: the port its Via names (the line's own by default)."""
    transport = "TCP" if line.tcp else "UDP"
    target = uri or f"sip:agent@127.0.0.1:{line.server_port}"
    to = "<sip:agent@127.0.0.1>" + (f";tag={to_tag}" if to_tag else "")
    content = "Content-Type: application/sdp\r\n" if body else ""
    return (f"{method} {target} SIP/2.0\r\n"
            f"Via: SIP/2.0/{transport} {line.source}:{via_port or line.port};branch={branch or 'z9hG4bK-' + call_id}\r\n"
            f"Max-Forwards: 70\r\nFrom: <sip:caller@{line.source}>;tag={from_tag}\r\nTo: {to}\r\n"
            f"Call-ID: {call_id}\r\nCSeq: {cseq} {cseq_method or method}\r\n"
            f"Contact: <sip:caller@{line.source}:{line.port}>\r\n{extra}{content}"
            f"Content-Length: {len(body.encode())}\r\n\r\n{body}").encode()


def invite(line: SipLine, call_id: str, rtp_port: int | None = 9, **kwargs: object) -> bytes:
    """An INVITE offering PCMU at ``rtp_port`` (None: no offer)."""
    return request(line, "INVITE", call_id, body=sdp(rtp_port) if rtp_port is not None else "", **kwargs)  # type: ignore[arg-type]


def code_of(text: str) -> int:
    return int(text.split(" ", 2)[1])


class SipLine:
    """One SIP peer's socket: UDP bound at ``source``, or a TCP connection from it."""

    def __init__(self, server_port: int, source: str = "127.0.0.1", tcp: bool = False) -> None:
        self.server_port, self.source, self.tcp = server_port, source, tcp
        self.socket = socket.socket(socket.AF_INET, socket.SOCK_STREAM if tcp else socket.SOCK_DGRAM)
        self.socket.bind((source, 0))
        if tcp:
            self.socket.connect(("127.0.0.1", server_port))
        self.port = self.socket.getsockname()[1]
        self._buffer = b""

    def close(self) -> None:
        self.socket.close()

    def send(self, data: bytes) -> None:
        if self.tcp:
            self.socket.sendall(data)
        else:
            self.socket.sendto(data, ("127.0.0.1", self.server_port))

    def read(self, timeout_s: float = 3.0) -> str | None:
        """The next message from lyre; None if none comes in ``timeout_s`` (or the connection closed)."""
        deadline, tried = time.monotonic() + timeout_s, False
        while True:
            if not self.tcp and self._buffer:
                message, self._buffer = self._buffer, b""
                return message.decode(errors="replace")
            if self.tcp and (message := self._framed()) is not None:
                return message
            left = deadline - time.monotonic()
            if left <= 0 and tried:
                return None
            tried = True  # a timeout of 0 still takes what has come
            self.socket.settimeout(max(left, 0.001))
            try:
                data = self.socket.recv(65536)
            except (TimeoutError, ConnectionError):
                return None
            if not data:
                return None
            self._buffer += data

    def _framed(self) -> str | None:
        head, sep, rest = self._buffer.partition(b"\r\n\r\n")
        if not sep:
            return None
        length = re.search(rb"(?im)^content-length:\s*(\d+)", head)
        size = int(length.group(1)) if length else 0
        if len(rest) < size:
            return None
        self._buffer = rest[size:]
        return (head + sep + rest[:size]).decode(errors="replace")

    def final(self, timeout_s: float = 10.0) -> tuple[int, str] | None:
        """The first final response (1xx passed over); None if none comes."""
        deadline = time.monotonic() + timeout_s
        while (text := self.read(deadline - time.monotonic())) is not None:
            if text.startswith("SIP/2.0") and code_of(text) >= 200:
                return code_of(text), text
        return None

    def respond(self, text: str, status: int = 200, reason: str = "OK") -> None:
        """Answer a request of lyre's (its BYE): its Via, From, To, Call-ID and CSeq copied."""
        head = text.split("\r\n\r\n", 1)[0].split("\r\n")[1:]
        kept = [line for line in head if line.split(":", 1)[0].strip().lower() in ("via", "from", "to", "call-id",
                                                                                   "cseq")]
        self.send((f"SIP/2.0 {status} {reason}\r\n" + "\r\n".join(kept) + "\r\nContent-Length: 0\r\n\r\n").encode())

    def request_from_lyre(self, method: str, timeout_s: float) -> str | None:
        """The next request of ``method`` lyre sends on this line (responses passed over)."""
        deadline = time.monotonic() + timeout_s
        while (text := self.read(deadline - time.monotonic())) is not None:
            if text.startswith(method + " "):
                return text
        return None

    def answer_to(self, method: str, timeout_s: float = 10.0) -> tuple[int, str] | None:
        """The final response whose CSeq names ``method`` (others, and lyre's requests, passed over)."""
        deadline = time.monotonic() + timeout_s
        while (found := self.final(deadline - time.monotonic())) is not None:
            if re.search(rf"(?im)^cseq:\s*\d+\s+{method}\s*$", found[1]):
                return found
        return None


class Dialog:
    """A caller's call over a SipLine: placed, re-invited, cancelled, hung up."""

    def __init__(self, line: SipLine, call_id: str, via_port: int | None = None) -> None:
        self.line, self.call_id, self.via_port = line, call_id, via_port
        self.cseq = 1
        self.to_tag: str | None = None

    def place(self, rtp_port: int) -> int:
        """INVITE, and ACK its 200; the final code."""
        self.line.send(invite(self.line, self.call_id, rtp_port, via_port=self.via_port))
        found = self.line.answer_to("INVITE")
        assert found is not None, "no final answer to the INVITE"
        code, text = found
        if code == 200:
            self.to_tag = re.search(r"(?im)^to:.*;tag=([^;\s]+)", text).group(1)  # type: ignore[union-attr]
            self._ack()
        return code

    def reinvite(self, rtp_port: int, direction: str = "sendrecv") -> int:
        self.cseq += 1
        self.line.send(request(self.line, "INVITE", self.call_id, cseq=self.cseq, to_tag=self.to_tag,
                               branch=f"z9hG4bK-re{self.cseq}-{self.call_id}", body=sdp(rtp_port, direction=direction),
                               via_port=self.via_port))
        found = self.line.answer_to("INVITE")
        assert found is not None, "no final answer to the re-INVITE"
        if found[0] == 200:
            self._ack()
        return found[0]

    def bye(self) -> int | None:
        self.cseq += 1
        self.line.send(request(self.line, "BYE", self.call_id, cseq=self.cseq, to_tag=self.to_tag,
                               branch=f"z9hG4bK-bye{self.cseq}-{self.call_id}", via_port=self.via_port))
        found = self.line.answer_to("BYE")
        return found[0] if found else None

    def _ack(self) -> None:
        self.line.send(request(self.line, "ACK", self.call_id, cseq=self.cseq, to_tag=self.to_tag,
                               branch=f"z9hG4bK-ack{self.cseq}-{self.call_id}", via_port=self.via_port))
