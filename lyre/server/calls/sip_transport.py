"""SIP over UDP and TCP with lyre's gate in front of aiosipua's parser (lyre.server.calls.sip_server uses it): a
datagram from outside the allowed networks (``--sip-allow``) or over MAX_MESSAGE_BYTES is dropped unread and
counted, as is one aiosipua's parser refuses (a line it cannot read, over 256 headers, a body short of its
Content-Length); and the Record-Route of an INVITE is copied into the responses that set up its dialog (RFC 3261
12.1.1), which aiosipua leaves out. Over TCP, responses go back on the connection the request came on (RFC 3261
18.2.2), whatever port its Via names; connections are capped per source and closed when idle
(lyre.server.calls.sip_limits). The endpoint's metrics (SipMetrics) are here too.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import socket
from typing import Any

from aiosipua import SipMessage, SipRequest
from aiosipua.headers import parse_via, stringify_via
from aiosipua.transport import TcpSipTransport, UdpSipTransport, _read_sip_message, _stamp_via_received
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from lyre.server.calls.sip_limits import IDLE_S, TRUSTED_IDLE_S, ConnectionCaps

__all__ = ["MAX_MESSAGE_BYTES", "GatedTcp", "GatedUdp", "SipMetrics", "address_for", "allowed_networks", "routable"]

log = logging.getLogger("lyre.server.sip")

MAX_MESSAGE_BYTES = 8192  # a message longer than this is dropped unread (an INVITE with SDP is under 2 kB)


def allowed_networks(cidrs: tuple[str, ...]) -> tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...]:
    """``--sip-allow``'s networks; ValueError naming the one that is not a network."""
    networks = []
    for cidr in cidrs:
        try:
            networks.append(ipaddress.ip_network(cidr, strict=False))
        except ValueError:
            raise ValueError(f"--sip-allow {cidr!r} is not a network (e.g. 10.0.0.0/8 or 192.0.2.7)") from None
    return tuple(networks)


class SipMetrics:
    """The SIP endpoint's metrics, in the server's registry."""

    def __init__(self, r: CollectorRegistry) -> None:
        self.calls = Counter("lyre_sip_calls", "SIP calls by how they ended (or were refused)", ["outcome"], registry=r)
        self.active = Gauge("lyre_sip_calls_active", "SIP calls answered and not yet ended", registry=r)
        self.setup = Histogram("lyre_sip_call_setup_seconds", "INVITE received to 200 OK sent", registry=r)
        self.media_errors = Counter("lyre_sip_media_errors", "RTP trouble: an unexpected payload type, packets "
                                    "dropped for a slow conversation, media timeouts", ["kind"], registry=r)
        self.dialogs = Gauge("lyre_sip_dialogs", "SIP dialogs and transactions aiosipua keeps (answered, ringing, "
                             "or waiting for an ACK)", registry=r)
        self.dropped = Counter("lyre_sip_messages_dropped", "SIP messages and TCP connections dropped unanswered",
                               ["reason"], registry=r)
        self.connections = Gauge("lyre_sip_tcp_connections", "SIP TCP connections open", registry=r)


class _Gate:
    """lyre's gate before aiosipua's parser: sources outside the allowed networks and oversized messages are
    dropped unread; and Record-Route copied into the responses that set up a dialog (RFC 3261 12.1.1)."""

    allowed: tuple[Any, ...] = ()
    open_to_all = False  # with --sip-auth: any source passes; its INVITEs must authenticate
    dropped: Counter | None = None  # by reason
    record_routes: dict[str, list[str]] = {}
    on_message: Any = None

    def set_up(self, allowed: tuple[Any, ...], dropped: Counter, record_routes: dict[str, list[str]]) -> None:
        self.allowed, self.dropped, self.record_routes = allowed, dropped, record_routes

    def allows(self, host: str) -> bool:
        return self.open_to_all or self.trusts(host)

    def trusts(self, host: str) -> bool:
        """A source in the allowed networks (``--sip-allow``)."""
        return any(_address(host) in network for network in self.allowed)

    def _dispatch(self, data: bytes, addr: tuple[str, int]) -> None:
        reason = None
        if len(data) > MAX_MESSAGE_BYTES:
            reason = "too_long"
        elif not self.allows(addr[0]):
            reason = "source"
        if reason is None:
            try:  # aiosipua's parse, without its log of a traceback for each message it cannot read
                message = SipMessage.parse(data)
                if isinstance(message, SipRequest):
                    self._stamp(message, addr)
            except Exception as exc:  # noqa: BLE001 - whatever the parser refuses, the datagram is dropped
                log.info("SIP datagram from %s dropped: %s", addr[0], str(exc)[:200])
                reason = "malformed"
            else:
                if self.on_message is not None:
                    self.on_message(message, addr)
                return
        if self.dropped is not None:
            self.dropped.labels(reason).inc()

    def _stamp(self, request: SipRequest, addr: tuple[str, int]) -> None:
        """Where the request came from, in its top Via (RFC 3581): its responses are routed by it."""
        _stamp_via_received(request, addr)

    def send(self, message: Any, addr: tuple[str, int]) -> None:
        if not routable(addr):  # asyncio closes a UDP socket for good on a sendto that raises other than OSError
            log.info("SIP message to %r not sent: not an IP address and port", addr)
            if self.dropped is not None:
                self.dropped.labels("unroutable").inc()
            return
        if getattr(message, "status_code", 0) in range(101, 300):
            routes = self.record_routes.get(message.call_id or "")
            if routes and message.cseq is not None and message.cseq.method == "INVITE":
                message.headers.set_single("Record-Route", ", ".join(routes))
        super().send(message, addr)  # type: ignore[misc]


class GatedUdp(_Gate, UdpSipTransport):
    """SIP over UDP behind the gate."""

    async def start(self) -> None:  # aiosipua's own protocol asserts asyncio's transport class, which uvloop's is not
        loop = asyncio.get_running_loop()
        self._udp_transport, _ = await loop.create_datagram_endpoint(lambda: _Datagrams(self),
                                                                     local_addr=self.local_addr)


class GatedTcp(_Gate, TcpSipTransport):
    """SIP over TCP behind the gate: a connection from outside the allowed networks, or past its source's cap
    (lyre.server.calls.sip_limits), is closed at once; one that carries no call (``busy(addr)`` false) and
    sends no whole message for its idle time is closed then."""

    caps: ConnectionCaps
    busy: Any = staticmethod(lambda addr: False)  # a call's dialog runs over the connection from addr
    idle_s = (IDLE_S, TRUSTED_IDLE_S)  # a stranger's, a trusted source's

    async def start(self) -> None:
        self.caps = ConnectionCaps()
        await super().start()

    def _stamp(self, request: SipRequest, addr: tuple[str, int]) -> None:
        """Responses go back on the connection the request came on (RFC 3261 18.2.2): its top Via is made to
        name that connection's address and port, whatever the sender wrote there."""
        vias = request.headers.get("via")
        if not vias:
            return
        via = parse_via(vias[0])
        via.params["received"], via.params["rport"] = addr[0], str(addr[1])
        request.headers.remove("Via")
        for value in [stringify_via(via), *vias[1:]]:
            request.headers.append("Via", value)

    async def _handle_connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = writer.get_extra_info("peername")
        addr = (str(peer[0]), int(peer[1])) if peer else ("0.0.0.0", 0)
        trusted = peer is not None and self.trusts(addr[0])
        reason = None if peer and self.allows(addr[0]) else "source"
        if reason is None and (reason := self.caps.admit(addr[0], trusted)) is None:
            try:
                await self._read(reader, writer, addr, self.idle_s[trusted])
            finally:
                self.caps.release(addr[0], trusted)
            return
        if self.dropped is not None:
            self.dropped.labels(reason).inc()
        writer.close()

    async def _read(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, addr: tuple[str, int],
                    idle_s: float) -> None:
        self._connections[addr] = (reader, writer)
        try:
            while True:
                try:
                    async with asyncio.timeout(idle_s):
                        data = await _read_sip_message(reader)
                except TimeoutError:
                    if self.busy(addr):  # quiet, but a call's BYE or re-INVITE may still come this way
                        continue
                    if self.dropped is not None:
                        self.dropped.labels("idle").inc()
                    return
                if data is None:
                    return
                self._dispatch(data, addr)
        except (asyncio.IncompleteReadError, ConnectionError, ValueError):
            pass
        finally:
            self._connections.pop(addr, None)
            writer.close()


class _Datagrams(asyncio.DatagramProtocol):
    def __init__(self, transport: _Gate) -> None:
        self.transport = transport

    def datagram_received(self, data: bytes, addr: tuple[str, int] | Any) -> None:
        self.transport._dispatch(data, (str(addr[0]), int(addr[1])))


def address_for(caller: str, listening: str, advertised: str | None) -> str:
    """The address a caller reaches lyre at (SDP, Contact): --sip-advertise; else the one lyre listens on; else,
    listening on every interface, the local address the route to the caller leaves from."""
    if advertised is not None:
        return advertised
    if not ipaddress.ip_address(listening).is_unspecified:
        return listening
    with socket.socket(socket.AF_INET6 if ":" in caller else socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.connect((caller, 9))  # UDP: nothing is sent; the kernel picks the route
        return str(s.getsockname()[0])


def routable(addr: tuple[str, int]) -> bool:
    """An IP address and a port a datagram can go to: a Via or an offer naming port 99999 made ``sendto`` raise
    OverflowError, on which asyncio closed lyre's whole SIP socket (or the call's RTP socket)."""
    try:
        _address(str(addr[0]))
    except ValueError:
        return False
    return isinstance(addr[1], int) and 0 < addr[1] < 65536


def _address(host: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    address = ipaddress.ip_address(host.split("%")[0])
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address
