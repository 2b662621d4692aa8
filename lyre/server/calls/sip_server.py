"""``lyre serve --sip HOST:PORT``: a SIP user agent server over UDP and TCP that answers calls with the voice agent.

    sip = SipServer(state, sessions)
    await sip.start("127.0.0.1", 5060)   # listening
    await sip.stop()                     # every call ended with a BYE, its conversation closed

SIP messages, dialogs and transactions are aiosipua's (MIT): its parser has hard limits (header count, sizes,
required headers), and its UAS sends 100 Trying, retransmits a 200 on UDP until the ACK comes (RFC 3261's
timers G and H), matches a CANCEL to its INVITE and answers it 487, keeps the dialog's tags and route set, and
answers OPTIONS with 200. In front of it, lyre.server.calls.sip_transport's gate drops what does not parse, is
too long or comes from outside ``--sip-allow`` (unless ``--sip-auth`` is set: then an INVITE from outside
must authenticate, 401 with a digest challenge until it does), and lyre.server.calls.sip_screen answers what
aiosipua would mishandle. This module decides what a call is: over its source's INVITE rate
(lyre.server.calls.sip_limits) or while draining, 503 with Retry-After; past ``--stt-max-sessions`` (shared
with sockets, WebRTC calls and phone streams) or its source's share (``--max-per-client``), 486 Busy Here; an
offer with neither PCMU nor PCMA, or naming no port RTP can go to, 488. Otherwise 180 Ringing, then
(after ``--sip-ring`` seconds) 200 with the SDP answer, and the call's media runs in
lyre.server.calls.sip_call, its session from ``--sip-session`` by the number called. A re-INVITE whose offer
is sendonly, inactive or at address 0.0.0.0 puts the call on hold; sendrecv again takes it off; a new address
moves the call's media there. The call ends
at a BYE (200), a CANCEL, no ACK, no media, the agent's ``end_call``, a transfer that connected
(lyre.server.calls.sip_transfer) or the server stopping (lyre sends BYE for the last four); whatever the end,
the conversation is closed and its engine slots and session freed.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import time
from contextlib import AsyncExitStack
from typing import Any

from aiosipua import IncomingCall, SdpNegotiationError, SipRequest, SipUAS, negotiate_sdp

from lyre.server.calls.sip_auth import Digest
from lyre.server.calls.sip_call import SipCall
from lyre.server.calls.sip_limits import InviteBuckets
from lyre.server.calls.sip_media import CODECS, offer_codec, offer_dtmf
from lyre.server.calls.sip_screen import drop_stray, screen
from lyre.server.calls.sip_transfer import Transfers
from lyre.server.calls.sip_transport import GatedTcp, GatedUdp, SipMetrics, address_for, allowed_networks, routable
from lyre.server.sessions import RealtimeSessions
from lyre.server.state import ServerState

__all__ = ["SipServer"]

log = logging.getLogger("lyre.server.sip")

_RETRY_AFTER_S = 5
_HOLD_DIRECTIONS = ("sendonly", "inactive")


class SipServer:
    """The SIP endpoint and its calls; see the module docstring."""

    def __init__(self, state: ServerState, sessions: RealtimeSessions) -> None:
        self.state = state
        self.sessions = sessions
        self.calls: dict[str, tuple[IncomingCall, SipCall, AsyncExitStack]] = {}  # by Call-ID, answered or ringing
        self.metrics = SipMetrics(state.metrics.registry)
        self.metrics.active.set_function(lambda: sum(1 for c, _, _ in self.calls.values() if c._answered))
        self.metrics.dialogs.set_function(lambda: sum(len(uas._calls) + len(uas.transactions._server)
                                                      for uas in self._uases.values()))
        self._udp: GatedUdp | None = None
        self._uases: dict[int, SipUAS] = {}  # by id() of its transport: UDP's and TCP's
        self._invites = InviteBuckets()
        self._host = "127.0.0.1"
        self._closing: set[asyncio.Task[None]] = set()  # calls ended, their conversations closing
        self.transfers = Transfers(state.config.sip_transfers)
        auth = state.config.sip_auth
        self._digest = Digest(*auth.split(":", 1)) if auth is not None else None

    async def start(self, host: str, port: int) -> None:
        """Listen on UDP at ``host``:``port`` (0: a free port) and on TCP at the same port."""
        self._host = host
        allowed, record_routes = allowed_networks(self.state.config.sip_allow), {}
        self._udp = GatedUdp(local_addr=(host, port))
        for transport in (self._udp, None):
            if transport is None:  # TCP: the port UDP got
                transport = GatedTcp(local_addr=(host, self.port))
            transport.set_up(allowed, self.metrics.dropped, record_routes)
            transport.open_to_all = self._digest is not None
            if isinstance(transport, GatedTcp):
                transport.busy = self._carries_call
                self.metrics.connections.set_function(lambda tcp=transport: tcp.caps.open)
            uas = self._uases[id(transport)] = SipUAS(transport, user_agent="lyre")
            uas.on_invite = self._invite
            uas.on_reinvite = self._reinvite
            uas.on_bye = lambda call, request: self._ended(call.call_id, "bye")
            uas.on_cancel = lambda request, addr: self._ended(request.call_id or "", "cancel")
            uas.on_ack_timeout = lambda call: self._ended(call.call_id, "no_ack", call)
            uas.on_transfer_progress = self._transfer_progress
            await uas.start()
            transport.on_message = functools.partial(self._arrived, uas)
        log.info("SIP on udp and tcp %s:%d", host, self.port)

    def _transfer_progress(self, call_id: str, status: int, reason: str) -> None:
        if self.transfers.progress(call_id, status):
            self.hang_up(call_id, f"transferred ({status} {reason})", "transferred")

    def _uas(self, call: IncomingCall) -> SipUAS:
        return self._uases[id(call.transport)]

    def _carries_call(self, addr: tuple[str, int]) -> bool:
        """A call lyre holds came over the TCP connection from ``addr``."""
        return any(call.source_addr == addr and call.transport.reliable for call, _, _ in self.calls.values())

    def _arrived(self, uas: SipUAS, message: SipRequest | Any, addr: tuple[str, int]) -> None:
        """A message, past the gate and the screen (lyre.server.calls.sip_screen), for aiosipua. Whatever fails
        in it fails that message alone: 400 for a header that does not read, and no dialog left behind."""
        try:
            if isinstance(message, SipRequest) and not screen(uas, message, self.calls):
                return
            uas._on_message(message, addr)
        except Exception as exc:  # noqa: BLE001 - one peer's message must not fault the endpoint
            log.info("SIP %s from %s refused: %r", getattr(message, "method", "response"), addr[0], exc)
            self.metrics.dropped.labels("malformed").inc()
            if isinstance(message, SipRequest) and message.method != "ACK":
                try:
                    uas._send_error(message, 400, "Bad Request")
                except Exception:  # noqa: BLE001 - not even its Via reads, or the peer is gone: nowhere to answer
                    pass
            if isinstance(message, SipRequest) and (message.call_id or "") not in self.calls:
                self._forget(drop_stray(uas, message))

    @property
    def port(self) -> int:
        assert self._udp is not None and self._udp._udp_transport is not None
        return self._udp._udp_transport.get_extra_info("sockname")[1]

    async def stop(self) -> None:
        for call_id in list(self.calls):
            self.hang_up(call_id, "the server is stopping")
        await self.drained()
        for uas in self._uases.values():
            await uas.stop()

    # -- the dialogs --

    def _invite(self, call: IncomingCall) -> None:
        """A new call: refused, or taken. Whatever fails while it is taken fails it alone: it is answered 500
        (where it can be) and forgotten, so nothing of it stays behind."""
        try:
            self._take(call)
        except Exception as exc:  # noqa: BLE001 - one caller's INVITE must not leave a dialog or a session held
            log.warning("SIP call %s could not be taken: %r", call.call_id, exc)
            if call.call_id in self.calls:
                self.hang_up(call.call_id, f"it could not be taken: {exc!r}", "failed")
                return
            self.metrics.calls.labels("failed").inc()
            try:
                call._send_response(500, "Server Internal Error")
            except Exception:  # noqa: BLE001 - the caller may be unreachable (a closed TCP connection)
                pass
            call.dialog.terminate()
            self._forget(call)

    def _take(self, call: IncomingCall) -> None:
        refusal = self._refusal(call)
        if refusal is not None:
            code, reason, headers = refusal
            self.metrics.calls.labels(f"refused_{code}").inc()
            log.info("SIP call %s refused: %d %s", call.call_id, code, reason)
            call._send_response(code, reason, extra_headers=headers)
            call.dialog.terminate()
            self._forget(call)  # aiosipua would keep it until an ACK, which a flood never sends
            return
        assert self._udp is not None  # its record_routes are TCP's too
        self._udp.record_routes[call.call_id] = list(call.invite.headers.get("record-route"))
        call.advertised_addr = (self._address_for(call), self.port)  # Contact: never 0.0.0.0
        stack = AsyncExitStack()  # closed in reverse: the answer stopped, the media closed, the session freed
        stack.enter_context(self.sessions.hold(call.source_addr[0]))
        media = SipCall(self.state, CODECS[offer_codec(call.sdp_offer)], offer_dtmf(call.sdp_offer),
                        call.sdp_offer.rtp_address, call.source_addr[0],  # type: ignore[union-attr,arg-type]
                        lambda why: self.hang_up(call.call_id, why, "end_call" if "end_call" in why else "hangup"),
                        lambda kind: self.metrics.media_errors.labels(kind).inc(),
                        lambda target: self.transfers.refer(call, target))
        self.calls[call.call_id] = (call, media, stack)
        stack.push_async_callback(media.close)
        call.ringing()
        task = asyncio.ensure_future(self._answer(call, media, time.perf_counter()))
        task.add_done_callback(lambda t: self._unanswered(t, call.call_id))
        stack.callback(task.cancel)

    async def _answer(self, call: IncomingCall, media: SipCall, received: float) -> None:
        port = await media.bind(self._host)
        if self.state.config.sip_ring_s:
            await asyncio.sleep(self.state.config.sip_ring_s)
        if self.calls.get(call.call_id, (None,))[0] is not call:
            return  # cancelled while ringing
        assert call.sdp_offer is not None
        answer, _ = negotiate_sdp(call.sdp_offer, self._address_for(call), port, supported_codecs=[0, 8],
                                  dtmf_payload_type=media.dtmf_type or 0)
        try:
            call.accept(answer)
        except (RuntimeError, OSError) as exc:  # over TCP: the caller's connection closed before the answer
            self.hang_up(call.call_id, f"the caller cannot be answered: {exc}", "caller_gone")
            return
        if (refused := await media.start(self._session(call))) is not None:
            log.warning("SIP call %s: its session (--sip-session) was refused: %s", call.call_id, refused)
        self.metrics.setup.observe(time.perf_counter() - received)
        log.info("SIP call %s answered (%s) from %s", call.call_id, media.codec.name, call.caller)

    def _address_for(self, call: IncomingCall) -> str:
        return address_for(call.source_addr[0], self._host, self.state.config.sip_advertise)

    def _session(self, call: IncomingCall) -> dict[str, Any] | None:
        """The session configured for the number called (the request URI's user), or the default."""
        uri = call.invite.uri.partition(":")[2]
        number = uri.partition("@")[0] if "@" in uri else ""
        sessions = dict(self.state.config.sip_sessions)
        chosen = sessions.get(number, sessions.get(""))
        return json.loads(chosen) if chosen else None

    def _unanswered(self, task: asyncio.Task[None], call_id: str) -> None:
        if not task.cancelled() and (exc := task.exception()) is not None:
            log.error("answering SIP call %s failed", call_id, exc_info=exc)
            self.hang_up(call_id, "internal error")

    def _refusal(self, call: IncomingCall) -> tuple[int, str, dict[str, str] | None] | None:
        assert self._udp is not None
        source = call.source_addr[0]
        trusted = self._udp.trusts(source)
        if self.state.draining or not self._invites.take(source, trusted, time.monotonic()):
            return 503, "Service Unavailable", {"Retry-After": str(_RETRY_AFTER_S)}
        if not trusted and not self._authenticated(call):
            if self._digest is None:
                return 403, "Forbidden", None
            return 401, "Unauthorized", {"WWW-Authenticate": self._digest.challenge(time.time())}
        if self.sessions.refusal(self.state.config.stt_max_sessions, source) is not None:
            return 486, "Busy Here", None
        if call.sdp_offer is None or call.sdp_offer.rtp_address is None or not routable(call.sdp_offer.rtp_address):
            return 488, "Not Acceptable Here", None  # no offer (lyre answers offers only), or nowhere to send RTP
        try:
            offer_codec(call.sdp_offer)
        except SdpNegotiationError:
            return 488, "Not Acceptable Here", None
        return None

    def _authenticated(self, call: IncomingCall) -> bool:
        """Its credentials check (--sip-auth)."""
        return self._digest is not None and self._digest.check(call.invite.get_header("authorization"), "INVITE",
                                                               time.time(), call.invite.uri)

    def _reinvite(self, call: IncomingCall) -> None:
        held = self.calls.get(call.call_id)
        offer = call.sdp_offer
        if held is None or offer is None or offer.audio is None:
            call._send_response(488, "Not Acceptable Here")
            return
        media = held[1]
        try:
            if offer_codec(offer) != media.codec.payload_type:
                raise SdpNegotiationError("a codec change mid-call")
            answer, _ = negotiate_sdp(offer, self._address_for(call), media.port,
                                      supported_codecs=[media.codec.payload_type],
                                      dtmf_payload_type=media.dtmf_type or 0)
        except SdpNegotiationError:
            call._send_response(488, "Not Acceptable Here")
            return
        address = offer.rtp_address
        media.hold(offer.audio.direction in _HOLD_DIRECTIONS or address is None or address[0] == "0.0.0.0")
        if not media.held and address is not None and routable(address):
            media.move(address)
        call.accept(answer)
        log.info("SIP call %s %s", call.call_id, "on hold" if media.held else "resumed")

    def hang_up(self, call_id: str, why: str, outcome: str = "hangup") -> None:
        """lyre ends the call: BYE (to an answered call), then the call is closed."""
        if (held := self.calls.get(call_id)) is None:
            return
        log.info("SIP call %s: lyre hangs up: %s", call_id, why)
        try:
            if held[0]._answered:
                held[0].hangup()
            elif held[0].dialog.state.name != "TERMINATED":
                held[0]._send_response(503, "Service Unavailable")
        except (RuntimeError, OSError) as exc:  # over TCP, a caller whose connection closed cannot be told
            log.info("SIP call %s: the caller cannot be told: %s", call_id, exc)
        finally:  # the call is closed and its session freed whatever the caller heard
            self._forget(held[0])
            self._ended(call_id, outcome)

    def _forget(self, call: IncomingCall | None) -> None:
        """aiosipua's record of the call and its INVITE transaction dropped (an ACK that comes after is ignored),
        and its timers stopped: a 200 still waiting for its ACK is not sent again, and its ACK timeout (which
        aiosipua applies to whatever call holds the Call-ID by then) never comes."""
        if call is None:
            return
        call._stop_retransmissions()
        uas = self._uas(call)
        if uas._calls.get(call.call_id) is call:
            del uas._calls[call.call_id]
        uas._remove_invite_transaction(call.invite)

    def _ended(self, call_id: str, outcome: str, call: IncomingCall | None = None) -> None:
        """The call under ``call_id`` closed (if ``call`` is named: only if it is that call)."""
        if (held := self.calls.get(call_id)) is None or call not in (None, held[0]):
            return
        del self.calls[call_id]
        self.transfers.forget(call_id)
        if self._udp is not None:
            self._udp.record_routes.pop(call_id, None)
        self.metrics.calls.labels(outcome).inc()
        task = asyncio.ensure_future(held[2].aclose())
        self._closing.add(task)
        task.add_done_callback(self._closed)

    def _closed(self, task: asyncio.Task[None]) -> None:
        self._closing.discard(task)
        if not task.cancelled() and (exc := task.exception()) is not None:
            log.error("closing a SIP call failed", exc_info=exc)

    async def drained(self) -> None:
        """Every ended call closed."""
        while self._closing:
            await asyncio.wait(set(self._closing))

