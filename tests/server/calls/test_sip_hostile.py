"""SIP and RTP from peers that do not play by the rules, against a real ``lyre serve --sip`` on loopback:
messages built by hand (tests/sip_lines.py) from 127.0.0.1 (trusted: ``--sip-allow 127.0.0.1/32``) and from
127.0.0.2 and 127.0.0.3 (strangers, who must authenticate: ``--sip-auth``). After each test every dialog,
transaction, call, session, stream, TCP connection and task is gone again (Sip.wait_idle), and the log has
no traceback.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import time
from collections.abc import Iterator

import httpx
import pytest
from scripted_thinker import thinking_at
from serving import running_server
from sip_endpoint import Sip, free_udp_port
from sip_fuzz import SipFuzz
from sip_lines import Dialog, SipLine, code_of, invite, request
from sip_peer import RtpPeer

from lyre.server.calls.sip_media import rtp_packet
from lyre.server.calls.sip_transport import GatedTcp, allowed_networks

RING_S = 1.5  # --sip-ring: time for the tests to act on a call that rings
# The fuzzer's messages and seed; the long run: LYRE_SIP_FUZZ_MESSAGES=20000.
FUZZ_MESSAGES = int(os.environ.get("LYRE_SIP_FUZZ_MESSAGES", "1000"))
FUZZ_SEED = int(os.environ.get("LYRE_SIP_FUZZ_SEED", "1"))
SESSION = {"max_speech_tokens": 35, "audio": {"input": {"transcription": {"language": "en"}}}}


@pytest.fixture(scope="module")
def sip() -> Iterator[Sip]:
    port = free_udp_port()
    with thinking_at() as thinker, running_server(
            "--stt", "--llm-url", thinker, "--llm-model", "scripted", "--max-streams", "4", "--no-smart-turn",
            "--sip", f"127.0.0.1:{port}", "--sip-ring", str(RING_S), "--stt-idle-timeout", "3",
            "--stt-max-sessions", "4", "--sip-allow", "127.0.0.1/32", "--sip-auth", "lyre:secret",
            "--sip-session", json.dumps(SESSION)) as running:
        yield Sip(running, port)


def _codes(line: SipLine, count: int) -> list[int]:
    """The final codes of ``count`` answers (fewer if they stop coming)."""
    codes = []
    while len(codes) < count and (found := line.final(timeout_s=3.0)) is not None:
        codes.append(found[0])
    return codes


def test_an_invite_over_tcp_naming_another_port_in_its_via_is_answered_on_its_own_connection(sip: Sip) -> None:
    """Over TCP the answer goes back on the connection (RFC 3261 18.2.2): lyre routed it by the Via's port (9
    here), so the caller heard nothing and the call's dialog was kept for good."""
    line = SipLine(sip.port, tcp=True)
    try:
        call = Dialog(line, "tcp-via-port", via_port=9)
        assert call.place(rtp_port=9) == 200
        assert call.bye() == 200
    finally:
        line.close()
    sip.wait_idle()


def test_a_via_or_an_offer_naming_a_port_past_65535_is_not_answered_there_and_breaks_nothing(sip: Sip) -> None:
    """Found by the fuzzer: an answer to a Via naming port 99999 made sendto raise OverflowError, on which asyncio
    closed lyre's SIP socket over UDP for every caller. Now it is not sent (counted), and an offer naming such
    a port for its media gets 488."""
    unroutable = sip.metric("lyre_sip_messages_dropped_total", reason="unroutable")
    line = SipLine(sip.port)
    try:
        line.send(request(line, "OPTIONS", "port-99999", via_port=99999))
        line.send(invite(line, "rtp-70000", rtp_port=70000))
        assert _codes(line, 1) == [488]
        line.send(request(line, "OPTIONS", "after-it"))
        assert _codes(line, 1) == [200]
    finally:
        line.close()
    assert sip.metric("lyre_sip_messages_dropped_total", reason="unroutable") >= unroutable + 1
    sip.wait_idle()


def test_an_invite_whose_offer_does_not_read_is_refused_and_leaves_no_transaction(sip: Sip) -> None:
    """Found by the fuzzer's long run: bytes that are not UTF-8 in an offer made its parse fail after aiosipua had
    opened the INVITE's transaction, which stayed for good (eight of them after 20,000 messages)."""
    line = SipLine(sip.port)
    try:
        body = (b"v=0\r\no=- 1 1 IN IP4 127.0.0.1\r\ns=-\r\nc=IN IP4 127.0.0.1\r\nt=0 0\r\n"
                b"m=audio 9 RTP/AVP 0\r\na=rtpmap:0 PCMU/\xcc8000\r\n")
        head = request(line, "INVITE", "unreadable-offer").split(b"Content-Length")[0]
        line.send(head + b"Content-Type: application/sdp\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
        assert _codes(line, 1) == [400]
    finally:
        line.close()
    sip.wait_idle()


def test_one_sources_invite_flood_denies_neither_another_stranger_nor_the_trusted_trunk(sip: Sip) -> None:
    """100 INVITEs at once from 127.0.0.2 with no credentials: its own budget runs out (401 then 503), but
    127.0.0.3 is still challenged (401, not 503) and the trusted 127.0.0.1 still reaches the call checks (488:
    no offer), where one bucket for all had answered both 503."""
    flood = SipLine(sip.port, source="127.0.0.2")
    try:
        for i in range(100):
            flood.send(invite(flood, f"flood-{i}", rtp_port=None))
        codes = _codes(flood, 100)
    finally:
        flood.close()
    assert len(codes) == 100 and set(codes) == {401, 503}, sorted(set(codes))
    for source, call_id, want in (("127.0.0.3", "other-stranger", 401), ("127.0.0.1", "trunk", 488)):
        line = SipLine(sip.port, source=source)
        try:
            line.send(invite(line, call_id, rtp_port=None))
            assert _codes(line, 1) == [want], f"{source} was not answered {want}"
        finally:
            line.close()
    sip.wait_idle()


def test_a_strangers_idle_connections_do_not_lock_the_trusted_trunk_out(sip: Sip) -> None:
    """70 idle TCP connections from 127.0.0.2: past its cap of 4 each is closed at once, and the trusted
    trunk's connection still gets its OPTIONS answered (one cap of 64 for all had reset it)."""
    refused = sip.metric("lyre_sip_messages_dropped_total", reason="connections")
    idle = []
    try:
        for _ in range(70):
            s = socket.socket()
            s.bind(("127.0.0.2", 0))
            s.connect(("127.0.0.1", sip.port))
            idle.append(s)
        deadline = time.monotonic() + 10
        while sip.metric("lyre_sip_messages_dropped_total", reason="connections") < refused + 66:
            assert time.monotonic() < deadline, "the stranger's connections past its cap were not refused"
            time.sleep(0.05)
        trunk = SipLine(sip.port, tcp=True)
        try:
            trunk.send(request(trunk, "OPTIONS", "trunk-options"))
            assert (found := trunk.final()) is not None and found[0] == 200
        finally:
            trunk.close()
    finally:
        for s in idle:
            s.close()
    sip.wait_idle()


def test_tcp_connections_that_carry_no_call_are_closed_when_idle() -> None:
    """The gate alone, on a real TCP socket: a connection that sends nothing, and one that sends half a
    message, are closed after the idle time; one that carries a call stays."""

    async def scenario() -> tuple[bytes, bytes, bool]:
        tcp = GatedTcp(local_addr=("127.0.0.1", 0))
        tcp.set_up(allowed_networks(("127.0.0.1/32",)), None, {})  # type: ignore[arg-type]
        tcp.idle_s = (0.2, 0.2)
        await tcp.start()
        assert tcp._server is not None
        port = tcp._server.sockets[0].getsockname()[1]
        quiet_r, quiet_w = await asyncio.open_connection("127.0.0.1", port)
        half_r, half_w = await asyncio.open_connection("127.0.0.1", port)
        half_w.write(b"INVITE sip:agent@127.0.0.1 SIP/2.0\r\nVia: SIP/2.0/TCP 127.0.0.1")
        call_r, call_w = await asyncio.open_connection("127.0.0.1", port)
        calling = call_w.get_extra_info("sockname")
        tcp.busy = lambda addr: addr == (calling[0], calling[1])
        quiet = await asyncio.wait_for(quiet_r.read(), 10)
        half = await asyncio.wait_for(half_r.read(), 10)
        await asyncio.sleep(0.6)  # three idle times more
        kept = not call_r.at_eof() and tcp.caps.open == 1
        for writer in (quiet_w, half_w, call_w):
            writer.close()
        await tcp.stop()
        return quiet, half, kept

    quiet, half, kept = asyncio.run(scenario())
    assert quiet == b"" and half == b""  # closed by lyre
    assert kept


def test_rtp_from_anyone_but_the_caller_is_dropped_and_cannot_keep_a_dead_call_alive(sip: Sip) -> None:
    """A stranger sends RTP (audio and key presses) to a call's port before the caller's first packet and
    all through it: lyre's audio still goes to the caller alone, the stranger's packets are dropped and
    counted, and once the caller's media stops lyre hangs up, though the stranger keeps sending (its packets
    latched the call's audio and kept it alive)."""
    dropped = sip.metric("lyre_sip_media_errors_total", kind="source")
    line, peer = SipLine(sip.port), RtpPeer()
    stranger = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    stranger.bind(("127.0.0.2", 0))
    stranger.setblocking(False)
    sent = 0

    def intrude(payload_type: int = 0, payload: bytes = b"\x00" * 160) -> None:
        nonlocal sent
        assert peer.lyre is not None
        stranger.sendto(rtp_packet(payload_type, 1000 + sent, 160 * sent, 7, payload), peer.lyre)
        sent += 1

    try:
        call = Dialog(line, "rtp-stranger")
        assert call.place(rtp_port=peer.port) == 200
        peer.answered()  # lyre sends; the caller has sent nothing yet
        for _ in range(10):
            intrude()
        intrude(101, bytes([7, 0x8A, 0, 160]))  # the key 7, ended
        peer.talk(b"", until=lambda: len(peer.received) > 60)  # the caller's own packets, 20 ms apart
        got_late = len(peer.received)
        intrude()
        peer.talk(b"", until=lambda: len(peer.received) > got_late + 10)  # lyre still sends to the caller
        with pytest.raises(BlockingIOError):
            stranger.recv(2048)  # and never to the stranger
        bye = None
        deadline = time.monotonic() + 15
        while bye is None and time.monotonic() < deadline:  # the caller is silent now; the stranger is not
            intrude()
            bye = line.request_from_lyre("BYE", timeout_s=0.2)
        assert bye is not None, "lyre kept a call whose caller went silent alive on a stranger's packets"
        line.respond(bye)
    finally:
        line.close()
        peer.close()
        stranger.close()
    assert sip.metric("lyre_sip_media_errors_total", kind="source") == dropped + sent
    sip.wait_idle()


def test_an_invite_with_a_to_tag_or_a_mismatched_cancel_does_not_touch_a_ringing_call(sip: Sip) -> None:
    """While a call rings: an INVITE with its Call-ID and a To-tag (no dialog is confirmed) gets 481 rather
    than replacing the call; a CANCEL matching its transaction's branch but naming another Call-ID gets 481
    (the call is not ended, nor the one it names); the true CANCEL then gets 200, and the INVITE 487."""
    line = SipLine(sip.port)
    try:
        line.send(invite(line, "ringing", rtp_port=9, branch="z9hG4bK-ring"))
        assert (text := line.read()) is not None and code_of(text) < 200
        line.send(invite(line, "ringing", rtp_port=9, branch="z9hG4bK-forged", to_tag="forged"))
        assert _codes(line, 1) == [481]
        line.send(request(line, "CANCEL", "someone-else", branch="z9hG4bK-ring"))
        assert _codes(line, 1) == [481]
        assert sip.metric("lyre_sip_dialogs") >= 1  # still ringing
        line.send(request(line, "CANCEL", "ringing", branch="z9hG4bK-ring"))
        assert sorted(_codes(line, 2)) == [200, 487]
        line.send(request(line, "ACK", "ringing", branch="z9hG4bK-ring", to_tag="any"))
    finally:
        line.close()
    sip.wait_idle()


def test_a_cancel_after_the_answer_leaves_the_call_to_its_bye(sip: Sip) -> None:
    line = SipLine(sip.port)
    try:
        call = Dialog(line, "answered-cancel")
        assert call.place(rtp_port=9) == 200
        line.send(request(line, "CANCEL", "answered-cancel", branch="z9hG4bK-answered-cancel"))
        assert _codes(line, 1)[0] in (200, 481)  # too late: no effect either way
        assert sip.metric("lyre_sip_calls_active") == 1
        assert call.bye() == 200  # the dialog is still there to end
    finally:
        line.close()
    sip.wait_idle()


def test_a_reinvite_that_moves_the_media_moves_lyres_audio(sip: Sip) -> None:
    line, first, second = SipLine(sip.port), RtpPeer(), RtpPeer()
    try:
        call = Dialog(line, "moved")
        assert call.place(rtp_port=first.port) == 200
        first.answered()
        first.talk(b"", until=lambda: len(first.received) > 10)
        assert call.reinvite(second.port) == 200
        second.answered()  # lyre's packets now come to the new port (they had stayed at the first)
        second.talk(b"", until=lambda: len(second.received) > 10)
        assert call.bye() == 200
    finally:
        for closing in (line, first, second):
            closing.close()
    sip.wait_idle()


def test_the_sip_and_rtp_fuzzer_leaves_nothing_behind_and_the_server_still_answers(sip: Sip) -> None:
    """tests/sip_fuzz.py's messages and packets, in runs of 500; after each run /health answers, and after
    them all, once the calls still up are hung up, nothing is held and the log has no fault of lyre's."""
    fuzz = SipFuzz(sip.port, seed=FUZZ_SEED)
    health = []
    try:
        while fuzz.sent < FUZZ_MESSAGES:
            fuzz.run(min(500, FUZZ_MESSAGES - fuzz.sent))
            start = time.perf_counter()
            assert httpx.get(f"{sip.server.url}/health", timeout=10).status_code == 200
            health.append(time.perf_counter() - start)
    finally:
        fuzz.finish()
    print(f"\nSIP fuzzer: {fuzz.sent} messages, seed {FUZZ_SEED}; came back: {dict(sorted(fuzz.seen.items()))}; "
          f"/health after each 500: {', '.join(f'{1000 * t:.0f} ms' for t in health)}")
    assert all(fuzz.seen[code] for code in ("200", "400", "401", "405", "481", "486"))  # it reached each path
    sip.wait_idle(timeout_s=45)
    log = sip.server.output()
    assert "could not be taken" not in log and "media (" not in log, log[-3000:]



def test_a_call_lyre_hangs_up_before_its_ack_sends_no_more_answers(sip: Sip) -> None:
    """A caller that never ACKs lyre's 200 and goes silent: lyre hangs up (BYE), and from then on its 200 is not
    sent again. Once, it went on for 32 s, and at the end aiosipua's ACK timeout closed whatever call had the
    Call-ID by then: a new call with it was ended without a BYE, and its INVITE transaction was kept for good."""
    line, peer = SipLine(sip.port), RtpPeer()
    try:
        line.send(invite(line, "never-acked", rtp_port=peer.port))
        found = line.answer_to("INVITE")
        assert found is not None and found[0] == 200
        peer.answered()
        peer.talk(b"", until=lambda: True)  # one packet, then nothing: lyre hangs up when the media is gone
        bye = line.request_from_lyre("BYE", timeout_s=25)
        assert bye is not None, "lyre kept a call with no ACK and no media"
        line.respond(bye)
        after = []
        deadline = time.monotonic() + 4.5  # aiosipua resends a 200 at least every 4 s (T2)
        while (text := line.read(deadline - time.monotonic())) is not None:
            after.append(text.split("\r\n", 1)[0])
        assert after == [], f"lyre went on answering a call it had hung up: {after}"
    finally:
        line.close()
        peer.close()
    sip.wait_idle()
