"""SIP calls: a real ``lyre serve --stt --sip ...`` (demo TTS, Whisper base, thinking at a scripted endpoint,
tests/scripted_thinker.py: the SIP path is under test, not the chat model) called by SIPp (Debian's
``sip-tester``) with the scenarios in tests/server/calls/sip/. SIPp does the signalling; where a test needs
the call's media, the SDP offer names a port of the test's own (``-key rtp_port``), which sends the
caller's espeak-ng speech as G.711 RTP at real time and reads what lyre sends back (lyre answers RTP where
the caller's packets come from). The demo TTS has random weights: its audio is noise, so the tests check
packets and counts, never sound. The media parts alone (G.711, RTP, the jitter buffer, RFC 4733) come first.
"""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import time
import warnings
import wave
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from aiosipua import SipDigestAuth
from aiosipua.auth import build_credentials
from aiosipua.header_codec import parse_auth, stringify_auth
from scripted_thinker import ASKED, REPLY, thinking_at
from serving import running_server
from sip_endpoint import Sip, free_udp_port, passed
from sip_peer import SILENCE, RtpPeer, ulaw_speech as _ulaw
from speech import SENTENCES, speak

from lyre.server.calls.sip_media import (DTMF_KEYS, JitterBuffer, TelephoneEvents, alaw_decode, alaw_encode,
                                         read_rtp, rtp_packet)
from lyre.server.calls.sip_auth import NONCE_TTL_S, Digest, digest_params
from lyre.server.calls.sip_transport import GatedUdp, allowed_networks
from lyre.server.config import ServerConfig, sip_address

IDLE_S = 3  # --stt-idle-timeout: a held call with no audio this long is ended
RING_S = 0.3  # --sip-ring: long enough for a CANCEL to come before the answer
SHORT = 35  # audio tokens per spoken segment: 5 frames, about 0.4 s of noise
SESSION = {"max_speech_tokens": SHORT, "audio": {"input": {"transcription": {"language": "en"}}}}
LONG = {**SESSION, "max_speech_tokens": 1500}  # calls to the number "long": replies of many seconds
END_CALL = {"type": "function", "name": "end_call", "description": "Hang up the phone.",
            "parameters": {"type": "object", "properties": {}}}
BYE = {**SESSION, "tools": [END_CALL]}  # calls to "bye": the scripted think step says a sentence, then hangs up
TRANSFER_CALL = {"type": "function", "name": "transfer_call", "description": "Hand the call to a department.",
                 "parameters": {"type": "object", "properties": {"target": {"type": "string"}}}}
TRANSFER = {**SESSION, "tools": [TRANSFER_CALL]}  # calls to "transfer": a sentence, then a transfer to "sales"

needs_sipp = pytest.mark.skipif(shutil.which("sipp") is None, reason="SIPp (apt-get install sip-tester) is missing")


# -- the parts, alone --


def test_a_law_is_g711_as_audioop_computed_it() -> None:
    pcm = np.arange(-32768, 32768, dtype="<i2").tobytes()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        audioop = pytest.importorskip("audioop")
        assert alaw_encode(pcm) == audioop.lin2alaw(pcm, 2)
        assert alaw_decode(bytes(range(256))) == audioop.alaw2lin(bytes(range(256)), 2)


def test_a_law_round_trip_keeps_the_value_within_a_step() -> None:
    pcm = np.linspace(-30000, 30000, 1001).astype("<i2")
    back = np.frombuffer(alaw_decode(alaw_encode(pcm.tobytes())), "<i2").astype(int)
    assert np.all(np.abs(back - pcm) <= np.maximum(16, np.abs(pcm.astype(int)) // 16))


def test_rtp_packets_read_back_and_rtcp_and_junk_are_refused() -> None:
    data = rtp_packet(8, 65535, 2**32 - 1, 1234, b"\xd5" * 160, marker=True)
    packet = read_rtp(data)
    assert packet is not None and (packet.payload_type, packet.sequence, packet.ssrc, packet.marker) == (8, 65535,
                                                                                                        1234, True)
    assert packet.payload == b"\xd5" * 160
    assert read_rtp(bytes([0x80, 200]) + bytes(26)) is None  # an RTCP sender report
    assert read_rtp(b"\x80\x00") is None and read_rtp(b"INVITE sip:x SIP/2.0\r\n") is None
    assert read_rtp(bytes([0x8F]) + bytes(11)) is None  # 15 CSRCs said, none there


def test_the_jitter_buffer_reorders_waits_a_little_and_drops_the_late() -> None:
    def packet(seq: int) -> object:
        return read_rtp(rtp_packet(0, seq, seq * 160, 7, bytes([seq % 256])))

    jitter = JitterBuffer(depth=2)
    assert jitter.push(packet(65534)) == [bytes([254])]
    assert jitter.push(packet(0)) == []  # 65535 is missing: wait for it
    assert jitter.push(packet(65535)) == [bytes([255]), bytes([0])]  # across the wrap, in order
    assert jitter.push(packet(65535)) == [] and jitter.dropped == 1  # a duplicate
    for seq in (2, 3, 4):  # 1 never comes: past the depth, it is given up
        out = jitter.push(packet(seq))
    assert out == [bytes([2]), bytes([3]), bytes([4])] and jitter.lost == 1


def test_crafted_sequence_numbers_cost_the_jitter_buffer_a_step_each() -> None:
    """Packets whose numbers leap ahead made the buffer step over each missing number one at a time: 1,000 of
    them took a second of CPU. It jumps to the next packet it holds."""
    def packet(seq: int) -> object:
        return read_rtp(rtp_packet(0, seq & 0xFFFF, seq * 160, 7, bytes([seq % 256])))

    class Counted(dict):  # type: ignore[type-arg]
        looks = 0

        def pop(self, *args: object) -> object:  # the buffer looks for its next packet once a step
            Counted.looks += 1
            return super().pop(*args)

    jitter = JitterBuffer(depth=3)
    jitter.push(packet(0))
    jitter._held = Counted()
    for k in range(1, 1001):
        jitter.push(packet(k * 16411))  # each far from the last, on both sides of the wrap
    assert Counted.looks <= 1000 * (jitter.depth + 2)  # a few steps a packet (before: up to 32,767)
    assert jitter.lost + jitter.dropped + len(jitter._held) > 900  # given up or refused, not played in order
    jitter = JitterBuffer(depth=1)
    for seq in (10, 15, 12):  # 11 missing: waited for once, then 11 given up, 12 on; 13 and 14 wait for 15
        out = jitter.push(packet(seq))
    assert out == [bytes([12])] and jitter.lost == 1


def test_a_key_press_counts_once_though_its_end_comes_three_times() -> None:
    events = TelephoneEvents()
    start, end = bytes([5, 0x0A, 0, 160]), bytes([5, 0x8A, 3, 32])
    assert [events.push(p, 1000) for p in (start, start, end, end, end)] == [None, None, "5", None, None]
    assert events.push(bytes([11, 0x8A, 3, 32]), 5000) == "#" and DTMF_KEYS[11] == "#"


def test_the_sip_settings_are_checked() -> None:
    assert sip_address("0.0.0.0:5060") == ("0.0.0.0", 5060) and sip_address("[::1]:5070") == ("::1", 5070)
    for bad in ("5060", "host:", "host:99999"):
        with pytest.raises(ValueError, match="--sip must be HOST:PORT"):
            sip_address(bad)
    with pytest.raises(ValueError, match="--sip-allow 'ten' is not a network"):
        ServerConfig(stt=True, llm_url="http://127.0.0.1:9/v1", sip="127.0.0.1:5060", sip_allow=("ten",))


# -- calls, from SIPp --


@pytest.fixture(scope="module")
def sip() -> Iterator[Sip]:
    if shutil.which("sipp") is None:
        pytest.skip("SIPp (apt-get install sip-tester) is missing")
    port = free_udp_port()
    with thinking_at() as thinker, running_server(
            "--stt", "--llm-url", thinker, "--llm-model", "scripted", "--max-streams", "4",
            "--sip", f"127.0.0.1:{port}", "--sip-ring", str(RING_S), "--stt-idle-timeout", str(IDLE_S),
            "--stt-max-sessions", "4", "--sip-allow", "127.0.0.1/32", "--sip-auth", "lyre:secret",
            "--sip-session", json.dumps(SESSION),
            "--sip-session", "long=" + json.dumps(LONG), "--sip-session", "bye=" + json.dumps(BYE),
            "--sip-session", "transfer=" + json.dumps(TRANSFER),
            "--sip-transfer", "sales=sip:sales@127.0.0.1:9") as running:
        yield Sip(running, port)


@needs_sipp
def test_a_spoken_question_gets_a_spoken_answer_then_lyre_hangs_up_on_a_dead_line(sip: Sip) -> None:
    """SIPp calls; the caller presses 4 and asks a question as PCMU; lyre's reply comes back as RTP to where
    the caller's packets came from. Then the caller's media stops: lyre ends the call with a BYE."""
    ASKED.clear()
    peer = RtpPeer()
    try:
        sipp = sip.sipp("call_lyre_bye.xml", rtp_port=peer.port, background=True)
        ulaw = _ulaw(SENTENCES[3])
        peer.answered(keys="4")
        spoke = peer.talk(ulaw, until=lambda: bool(peer.replies()))
        peer.listen(1.0)
        out, _ = sipp.communicate(timeout=30)  # lyre's BYE, after webrtc_watch.GONE_AFTER_S of no audio
        assert sipp.returncode == 0, f"sipp exited {sipp.returncode}:\n{out[-3000:]}"
    finally:
        peer.close()
    packets = [p for _, d in peer.received if (p := read_rtp(d)) is not None]
    assert packets and all(p.payload_type == 0 and len(p.payload) == 160 for p in packets)
    assert len({p.ssrc for p in packets}) == 1
    steps = {(b.sequence - a.sequence) & 0xFFFF for a, b in zip(packets, packets[1:])}
    assert steps == {1}, f"sequence steps {steps}: lyre's packets are one stream, none skipped"
    first_reply = peer.replies()[0][0]
    assert first_reply > spoke  # the reply answers the question, after it
    assert any("pressed 4" in str(m.get("content")) for messages in ASKED for m in messages), ASKED[-1:]
    sip.wait_idle()
    assert sip.metric("lyre_sip_calls_total", outcome="hangup") >= 1
    assert sip.metric("lyre_sip_media_errors_total", kind="timeout") >= 1


@needs_sipp
def test_the_agent_ends_the_call_with_end_call_once_its_goodbye_has_gone_out(sip: Sip) -> None:
    """A call to "bye", whose session offers the tool end_call: the reply's sentence, then the call; lyre
    sends BYE after the reply's audio, though the caller's media goes on."""
    before = sip.metric("lyre_sip_calls_total", outcome="end_call")
    peer = RtpPeer()
    try:
        sipp = sip.sipp("call_lyre_bye.xml", rtp_port=peer.port, number="bye", background=True)
        peer.answered()
        peer.talk(_ulaw(SENTENCES[3]), until=lambda: sipp.poll() is not None, limit_s=30)  # silence until the BYE
        out, _ = sipp.communicate(timeout=10)
        assert sipp.returncode == 0, out[-3000:]
    finally:
        peer.close()
    # The goodbye went out whole before the BYE: its 35 audio tokens are about 0.4 s, 20 packets.
    assert len(peer.replies()) >= 15, f"{len(peer.replies())} packets of the goodbye heard"
    assert sip.metric("lyre_sip_calls_total", outcome="end_call") == before + 1
    sip.wait_idle()


@needs_sipp
def test_transfer_call_sends_a_refer_to_the_configured_target_and_lyre_leaves_once_it_connects(sip: Sip) -> None:
    before = sip.metric("lyre_sip_calls_total", outcome="transferred")
    peer = RtpPeer()
    try:
        sipp = sip.sipp("transfer.xml", rtp_port=peer.port, number="transfer", background=True)
        peer.answered()
        peer.talk(_ulaw(SENTENCES[3]), until=lambda: sipp.poll() is not None, limit_s=30)
        out, _ = sipp.communicate(timeout=10)
        assert sipp.returncode == 0, out[-3000:]
    finally:
        peer.close()
    assert sip.metric("lyre_sip_calls_total", outcome="transferred") == before + 1
    sip.wait_idle()


@needs_sipp
def test_the_caller_hangs_up_an_a_law_call(sip: Sip) -> None:
    before = sip.metric("lyre_sip_calls_total", outcome="bye")
    passed(sip.sipp("call_caller_bye.xml", codec=8, talk_ms=800))  # the 200 names PCMA, copies Record-Route
    sip.wait_idle()
    assert sip.metric("lyre_sip_calls_total", outcome="bye") == before + 1


@needs_sipp
def test_a_call_over_tcp(sip: Sip) -> None:
    """The same port takes SIP over TCP: OPTIONS, then a call answered (no 200 retransmission on TCP) and
    hung up by the caller."""
    before = sip.metric("lyre_sip_calls_total", outcome="bye")
    passed(sip.sipp("options.xml", "-t", "t1"))
    passed(sip.sipp("call_caller_bye.xml", "-t", "t1", talk_ms=800))
    sip.wait_idle()
    assert sip.metric("lyre_sip_calls_total", outcome="bye") == before + 1


@needs_sipp
def test_an_invite_over_tcp_whose_connection_closes_before_the_answer_leaves_nothing(sip: Sip) -> None:
    """Three INVITEs over TCP, each connection closed while the call rings: the answer cannot be sent, and the
    calls must still close and free their sessions (they were kept for good), so an ordinary call after them
    is answered."""
    before = sip.metric("lyre_sip_calls_total", outcome="caller_gone")
    for k in range(3):
        with socket.create_connection(("127.0.0.1", sip.port)) as tcp:
            local = tcp.getsockname()[1]
            sdp = ("v=0\r\no=- 1 1 IN IP4 127.0.0.1\r\ns=-\r\nc=IN IP4 127.0.0.1\r\nt=0 0\r\n"
                   "m=audio 9 RTP/AVP 0\r\na=rtpmap:0 PCMU/8000\r\n")
            tcp.sendall((f"INVITE sip:agent@127.0.0.1:{sip.port} SIP/2.0\r\n"
                         f"Via: SIP/2.0/TCP 127.0.0.1:{local};branch=z9hG4bK-gone-{k}\r\nMax-Forwards: 70\r\n"
                         f"From: <sip:caller@127.0.0.1>;tag=gone{k}\r\nTo: <sip:agent@127.0.0.1>\r\n"
                         f"Call-ID: tcp-gone-{k}@127.0.0.1\r\nCSeq: 1 INVITE\r\n"
                         f"Contact: <sip:caller@127.0.0.1:{local};transport=tcp>\r\n"
                         f"Content-Type: application/sdp\r\nContent-Length: {len(sdp)}\r\n\r\n{sdp}").encode())
            assert tcp.recv(4096).startswith(b"SIP/2.0 1")  # taken (trying or ringing); closed before the answer
    sip.wait_idle()
    assert sip.metric("lyre_sip_calls_total", outcome="caller_gone") == before + 3
    passed(sip.sipp("call_caller_bye.xml", talk_ms=300))
    sip.wait_idle()


@needs_sipp
def test_a_cancel_while_it_rings_gets_487_and_leaves_nothing(sip: Sip) -> None:
    before = sip.metric("lyre_sip_calls_total", outcome="cancel")
    passed(sip.sipp("cancel.xml", talk_ms=2 * RING_S * 1000))  # no 200 comes after the 487
    sip.wait_idle()
    assert sip.metric("lyre_sip_calls_total", outcome="cancel") == before + 1


@needs_sipp
def test_options_is_answered(sip: Sip) -> None:
    passed(sip.sipp("options.xml"))


@needs_sipp
def test_a_call_from_outside_the_allowed_networks_must_authenticate(sip: Sip) -> None:
    """--sip-allow 127.0.0.1/32 and --sip-auth lyre:secret: from 127.0.0.2 an INVITE gets 401 with a digest
    challenge; the INVITE again with the right credentials is answered, with wrong ones 401 again."""
    refused = sip.metric("lyre_sip_calls_total", outcome="refused_401")
    passed(sip.sipp("auth_call.xml", "-au", "lyre", "-ap", "secret", source="127.0.0.2", talk_ms=300))
    assert sip.metric("lyre_sip_calls_total", outcome="refused_401") == refused + 1
    wrong = sip.sipp("auth_call.xml", "-au", "lyre", "-ap", "guess", source="127.0.0.2", talk_ms=300, timeout_s=1.5)
    assert wrong.returncode != 0
    assert sip.metric("lyre_sip_calls_total", outcome="refused_401") == refused + 3  # challenged twice
    sip.wait_idle()


def test_the_gate_drops_sources_outside_the_allowed_networks_without_sip_auth() -> None:
    gate = GatedUdp(local_addr=("127.0.0.1", 0))
    gate.set_up(allowed_networks(("10.0.0.0/8", "::1")), None, {})  # type: ignore[arg-type]
    assert gate.allows("10.1.2.3") and gate.allows("::1") and gate.allows("::ffff:10.0.0.9")
    assert not gate.allows("192.0.2.1") and not gate.allows("127.0.0.1")
    gate.open_to_all = True  # with --sip-auth: all pass the gate, and only the allowed are trusted unchallenged
    assert gate.allows("192.0.2.1") and not gate.trusts("192.0.2.1")


def test_digest_credentials_made_by_a_client_library_check_and_others_do_not() -> None:
    """aiosipua's client side (an implementation apart from lyre's check) answers lyre's challenge."""
    digest = Digest("lyre", "secret")
    challenge = parse_auth(digest.challenge(1000.0))

    def authorization(password: str, method: str = "INVITE") -> str:
        credentials = build_credentials(SipDigestAuth("lyre", password), challenge, method, "sip:agent@127.0.0.1")
        assert credentials is not None
        return stringify_auth(credentials)

    assert digest.check(authorization("secret"), "INVITE", 1010.0)
    assert not digest.check(authorization("guess"), "INVITE", 1010.0)
    assert not digest.check(authorization("secret", "BYE"), "INVITE", 1010.0)  # made for another method
    assert not digest.check(authorization("secret"), "INVITE", 1000.0 + NONCE_TTL_S + 1)  # a stale nonce
    forged = authorization("secret").replace(challenge.params["nonce"], "1000000.00000000")
    assert not digest.check(forged, "INVITE", 1010.0)
    assert not digest.check(None, "INVITE", 1010.0) and not digest.check("Basic bHlyZTpzZWNyZXQ=", "INVITE", 1010.0)


def test_digest_credentials_are_good_once_for_their_own_uri_and_hostile_headers_are_cheap() -> None:
    """Replay (the same nc again, or for another server's URI) is refused; a 400-digit nonce and a 7,000-letter
    header are refused rather than raising or taking the event loop for half a second."""
    digest = Digest("lyre", "secret")
    challenge = parse_auth(digest.challenge(1000.0))
    uri = "sip:agent@127.0.0.1"

    def authorization(nc: int = 1) -> str:
        credentials = build_credentials(SipDigestAuth("lyre", "secret"), challenge, "INVITE", uri, nonce_count=nc)
        assert credentials is not None
        return stringify_auth(credentials)

    first = authorization(1)
    assert not digest.check(first, "INVITE", 1010.0, "sip:agent@192.0.2.7")  # made for another server
    assert digest.check(first, "INVITE", 1010.0, uri)
    assert not digest.check(first, "INVITE", 1011.0, uri)  # the same credentials again: a replay
    assert digest.check(authorization(2), "INVITE", 1012.0, uri)  # the client's next count
    assert not digest.check(authorization(2), "INVITE", 1013.0, uri)
    huge = first.replace(challenge.params["nonce"], "9" * 400 + ".00")
    assert not digest.check(huge, "INVITE", 1010.0, uri)  # refused, not OverflowError
    # A header longer than any real one is not parsed at all (the parser took 550 ms over 7,000 letters).
    assert digest_params("Digest " + "a " * 3500 + "b=") is None and digest_params("Digest a=b") == {"a": "b"}
    assert not digest.check("Digest " + "a" * 7000, "INVITE", 1010.0, uri)


@needs_sipp
def test_a_reinvite_puts_the_call_on_hold_and_takes_it_off(sip: Sip) -> None:
    """0.4 s talking, 0.5 s on hold (sendonly: lyre answers recvonly and sends nothing), then resumed
    (sendrecv) for 0.6 s: lyre's stream stops for the hold and goes on after it, one stream."""
    peer = RtpPeer()
    try:
        sipp = sip.sipp("reinvite.xml", rtp_port=peer.port, talk_ms=300, background=True)
        peer.answered()
        peer.talk(b"", until=lambda: sipp.poll() is not None, limit_s=15)
        out, _ = sipp.communicate(timeout=10)
        assert sipp.returncode == 0, out[-3000:]
    finally:
        peer.close()
    times = [t for t, _ in peer.received]
    gaps = [b - a for a, b in zip(times, times[1:])]
    held = max(range(len(gaps)), key=gaps.__getitem__)
    assert 0.35 < gaps[held] < 1.5, f"longest gap in lyre's stream {gaps[held]:.2f} s: the hold"
    assert held >= 10 and len(gaps) - held >= 10  # talking before it and after it
    packets = [read_rtp(d) for _, d in peer.received]
    assert {(b.sequence - a.sequence) & 0xFFFF for a, b in zip(packets, packets[1:])} == {1}  # no packet skipped
    sip.wait_idle()


@needs_sipp
def test_what_lyre_cannot_take_gets_a_4xx_and_junk_is_dropped(sip: Sip) -> None:
    """SIPp's set (an offer without G.711, no offer, video only, a BYE outside any dialog, an unknown method),
    then datagrams no parser should take, sent raw: lyre answers what it can with a 4xx, drops the rest,
    and still answers OPTIONS after it all."""
    before = sip.metric("lyre_sip_calls_total", outcome="refused_488")
    passed(sip.sipp("refused.xml"))
    assert sip.metric("lyre_sip_calls_total", outcome="refused_488") == before + 3
    junk = [b"", b"\x00" * 100, b"\xff\xfe garbage", b"INVITE\r\n\r\n", b"SIP/2.0 200 OK\r\n\r\n", b"A" * 9000,
            b"INVITE sip:a@b SIP/2.0\r\nVia: SIP/2.0/UDP 127.0.0.1:9;branch=z9hG4bK1\r\n"
            + b"X-A: b\r\n" * 400 + b"\r\n",
            b"INVITE sip:a@b SIP/2.0\r\nVia: SIP/2.0/UDP 127.0.0.1:9;branch=z9hG4bK2\r\n"
            b"Content-Length: 99999\r\n\r\nv=0",
            b"INVITE sip:a@b SIP/2.0\r\nVia: SIP/2.0/UDP 127.0.0.1:9;branch=z9hG4bK3\r\nFrom: <sip:x@y>;tag=1\r\n"
            b"To: <sip:a@b>\r\nCall-ID: j1\r\nCSeq: one INVITE\r\nContent-Type: application/sdp\r\n"
            b"Content-Length: 12\r\n\r\nm=audio x RT"]
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        for datagram in junk:
            s.sendto(datagram, ("127.0.0.1", sip.port))
    passed(sip.sipp("options.xml"))
    assert sip.metric("lyre_sip_messages_dropped_total", reason="too_long") >= 1
    assert sip.metric("lyre_sip_messages_dropped_total", reason="malformed") >= 5
    assert sip.server.process.poll() is None
    sip.wait_idle()


@needs_sipp
def test_calls_at_once_past_the_session_limit_are_busy(sip: Sip) -> None:
    """Four calls at once (--stt-max-sessions 4) are answered and hung up; a fifth while they last gets 486."""
    calls = sip.sipp("call_caller_bye.xml", calls=4, talk_ms=4000, background=True)
    deadline = time.monotonic() + 10
    while sip.metric("lyre_sip_calls_active") < 4:
        assert time.monotonic() < deadline, "four calls were not all answered"
        time.sleep(0.05)
    busy = sip.metric("lyre_sip_calls_total", outcome="refused_486")
    extra = sip.sipp("call_caller_bye.xml", "-trace_err", talk_ms=100)
    assert extra.returncode != 0  # 486 where the scenario wants 200
    assert sip.metric("lyre_sip_calls_total", outcome="refused_486") == busy + 1
    out, _ = calls.communicate(timeout=30)
    assert calls.returncode == 0, out[-3000:]
    sip.wait_idle()


@needs_sipp
def test_speaking_over_a_reply_stops_it_and_the_next_answer_follows(sip: Sip) -> None:
    """A call to the number "long" (its --sip-session: replies of many seconds): the caller speaks over the
    reply; lyre's packets turn to silence soon after, and the answer to the second question comes after."""
    ASKED.clear()
    peer = RtpPeer()
    try:
        sipp = sip.sipp("call_lyre_bye.xml", rtp_port=peer.port, number="long", background=True)
        peer.answered()
        peer.talk(_ulaw(SENTENCES[3]), until=lambda: len(peer.replies()) >= 25)  # half a second of reply
        barge = time.monotonic()
        first = len(peer.received)
        peer.talk(_ulaw(SENTENCES[6]), until=lambda: len(peer.replies()) >= 25 and any(
            t > barge + 1.0 for t, _ in peer.replies()) and _quiet_then_loud(peer.received[first:]))
        peer.listen(0.5)
        out, _ = sipp.communicate(timeout=30)
        assert sipp.returncode == 0, out[-3000:]
    finally:
        peer.close()
    after = peer.received[first:]
    silent_from = next(t for t, d in after if read_rtp(d).payload == SILENCE)
    # The VAD hears speech within a few hundred ms; the reply stops at the next packet.
    assert silent_from - barge < 1.5, f"the reply went on {silent_from - barge:.2f} s into the caller's speech"
    # Every later think step reads the first reply cut at what had gone out ("Sure," of REPLY). (Under load
    # the VAD may split the second question into two turns: the first reply is the history's first.)
    said = [m["content"] for m in ASKED[-1] if m["role"] == "assistant"]
    assert said and said[0] != REPLY and REPLY.startswith(said[0].rstrip(",.")), ASKED[-1]
    sip.wait_idle()


def _quiet_then_loud(received: list[tuple[float, bytes]]) -> bool:
    """lyre's packets went silent for at least 10 packets, then spoke again: one reply cut, another begun."""
    loud = [read_rtp(d).payload != SILENCE for _, d in received]
    quiet = 0
    for i, is_loud in enumerate(loud):
        quiet = 0 if is_loud else quiet + 1
        if quiet >= 10:
            return any(loud[i:])
    return False


BARESIP_CONFIG = """\
poll_method epoll
sip_listen 127.0.0.1:{sip_port}
audio_source aufile,{question}
audio_player aubridge,nowhere
audio_alert aubridge,nowhere
audio_srate 8000
audio_channels 1
module_path /usr/lib/baresip/modules
module g711.so
module aufile.so
module aubridge.so
module sndfile.so
snd_path {folder}
module_app account.so
module_app menu.so
"""


@pytest.mark.skipif(shutil.which("baresip") is None, reason="baresip (apt-get install baresip) is missing")
def test_baresip_calls_with_a_wav_for_its_microphone_and_hears_the_reply(sip: Sip, tmp_path: Path) -> None:
    """A real user agent: baresip dials lyre, its microphone a WAV of a spoken question (then silence), and
    dumps what it hears (its sndfile module); it hangs up when the file ends."""
    ASKED.clear()
    question = (np.clip(speak(SENTENCES[3], 8000), -1, 1) * 32767).astype("<i2")
    pause = np.zeros(8000 // 2, "<i2")
    mic = np.concatenate([pause, question, np.zeros(8000 * 3, "<i2")])
    with wave.open(str(tmp_path / "question.wav"), "wb") as w:
        w.setnchannels(1), w.setsampwidth(2), w.setframerate(8000), w.writeframes(mic.tobytes())
    (tmp_path / "accounts").write_text("<sip:caller@127.0.0.1>;regint=0;audio_codecs=PCMU\n")
    before = sip.metric("lyre_sip_calls_total", outcome="bye")
    for _ in range(3):  # baresip binds UDP, TCP and TLS on and beside its port: another process may hold one
        (tmp_path / "config").write_text(BARESIP_CONFIG.format(sip_port=free_udp_port(), folder=tmp_path,
                                                               question=tmp_path / "question.wav"))
        done = subprocess.run(["baresip", "-f", str(tmp_path), "-e", f"/dial sip:agent@127.0.0.1:{sip.port}",
                               "-t", str(len(mic) // 8000 + 2)], capture_output=True, text=True, timeout=60)
        if "Address already in use" not in done.stdout + done.stderr:
            break
    assert "Call established" in done.stdout, done.stdout[-2000:]
    heard_files = list(tmp_path.glob("dump-*-dec.wav"))
    assert heard_files, done.stdout[-2000:]
    with wave.open(str(heard_files[0])) as w:
        heard = np.frombuffer(w.readframes(w.getnframes()), "<i2").astype(np.float32)
    spoken_end = (len(pause) + len(question)) / 8000
    loud = np.abs(heard.reshape(-1, 160)).mean(axis=1) > 100  # 20 ms frames of the reply's noise
    assert loud[:int(spoken_end * 50)].sum() <= 2  # nothing but silence while the caller asked
    assert loud[int(spoken_end * 50):].sum() >= 10  # then the reply, heard by baresip
    assert any(m.get("role") == "user" and "pharmacy" in str(m.get("content")).lower()
               for messages in ASKED for m in messages), ASKED[-1:]
    sip.wait_idle()
    assert sip.metric("lyre_sip_calls_total", outcome="bye") == before + 1  # baresip hung up when its file ended


def test_an_invite_flood_gets_503_with_retry_after_and_leaves_nothing(sip: Sip) -> None:
    """80 INVITEs at once (without an offer, so none is answered) and never an ACK: the first burst is refused
    for what it is (488), the rest 503 with Retry-After, and lyre keeps no dialog or transaction of any."""
    codes: list[int] = []
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        me = s.getsockname()[1]
        for i in range(80):
            s.sendto((f"INVITE sip:agent@127.0.0.1:{sip.port} SIP/2.0\r\n"
                      f"Via: SIP/2.0/UDP 127.0.0.1:{me};branch=z9hG4bKflood{i}\r\n"
                      f"From: <sip:flood@127.0.0.1>;tag=f{i}\r\nTo: <sip:agent@127.0.0.1>\r\n"
                      f"Call-ID: flood-{i}\r\nCSeq: 1 INVITE\r\nMax-Forwards: 70\r\nContent-Length: 0\r\n\r\n"
                      ).encode(), ("127.0.0.1", sip.port))
        s.settimeout(1.0)
        retry_after = 0
        try:
            while True:
                reply = s.recv(4096).decode()
                code = int(reply.split(" ", 2)[1])
                if code >= 200:
                    codes.append(code)
                    retry_after += code == 503 and "Retry-After: " in reply
        except TimeoutError:
            pass
    assert len(codes) == 80 and set(codes) == {488, 503}, sorted(set(codes))
    assert codes.count(503) >= 30 and retry_after == codes.count(503)
    sip.wait_idle()
