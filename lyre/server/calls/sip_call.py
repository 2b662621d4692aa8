"""One SIP call's media bridged to the voice agent: RTP in, the agent's speech out as RTP paced at 20 ms.
The signalling (lyre.server.calls.sip_server) opens it once the offer is accepted and ends it with the dialog.

    call = SipCall(state, codec, dtmf_type, remote, signalling_host, hang_up)
    port = await call.bind(host)          # the RTP port the SDP answer names
    call.start()                          # the conversation opens; media flows both ways
    call.hold(True) / call.hold(False)    # a re-INVITE put the call on hold, or took it off
    call.move(("192.0.2.9", 4000))        # a re-INVITE moved the caller's media
    await call.close()                    # the conversation closed, its slots freed, the socket shut

The caller's packets pass a small jitter buffer (lyre.server.calls.sip_media), are decoded and handed to the
conversation (a `VoiceCall`) at 8 kHz. RTP goes back to where the caller's packets come from (symmetric RTP:
the address the SDP offer named only until the first packet, which a NAT may have rewritten). The call's port
takes packets from one source only: the first from the offer's host or the host the signalling came from is
latched, and packets from anywhere else are dropped and counted (``media_errors{kind="source"}``), so no one
else can steer the call's audio, speak or press keys in it, or keep a silent call alive. A latched source
quiet for a second may be replaced by another from those two hosts (a NAT that rebinds; sip_media.RtpSource). A reply's
audio is cut into 20 ms frames and sent at real time; between replies, silence keeps the stream (and the
NATs on its way) alive. A barge-in drops what is queued: the next packet is silence, and each reply cut
is cut in the history at the frames that went out. A key press (RFC 4733) reaches the agent as a user
message, "(the caller pressed 5 on the keypad)", in the conversation the next reply reads. The agent
hangs up by calling a tool named ``end_call`` (declared in the call's session, ``--sip-session``): once
the reply's audio has gone out, ``hang_up`` is called (a BYE); ``transfer_call`` with {"target": NAME} has
``transfer`` send a REFER to the configured target of that name (lyre.server.calls.sip_transfer).

No packet for webrtc_watch.MEDIA_TIMEOUT_S: the reply stops (its engine slots freed, as for WebRTC); none
for webrtc_watch.GONE_AFTER_S (the server's ``stt_idle_timeout_s`` while on hold): ``hang_up`` is called.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import time
from collections import deque
from collections.abc import Callable
from typing import Any

import numpy as np

from lyre.server.calls.sip_media import Codec, JitterBuffer, RtpSource, TelephoneEvents, read_rtp, rtp_packet
from lyre.server.calls.twilio_media import FRAME_BYTES, FRAME_MS, PHONE_RATE, Outbound, ulaw_decode
from lyre.server.calls.voice_call import VoiceCall
from lyre.server.calls.webrtc_watch import Change, MediaWatch
from lyre.server.state import ServerState

__all__ = ["SipCall"]

log = logging.getLogger("lyre.server.sip")

_HEARD_QUEUED = 250  # caller's packets waiting for the conversation (5 s): past this, dropped
_WATCH_S = 0.2
# The session listens at Whisper's own rate, so the caller's 8 kHz is resampled once.
_LISTEN = {"audio": {"input": {"format": {"type": "audio/pcm", "rate": 16_000}}}}
_ULAW_TO_PCM = np.frombuffer(ulaw_decode(bytes(range(256))), "<i2")


class _Rtp(asyncio.DatagramProtocol):
    def __init__(self, call: SipCall) -> None:
        self.call = call

    def datagram_received(self, data: bytes, addr: tuple[str, int] | Any) -> None:
        self.call.received(data, addr)

    def error_received(self, exc: Exception) -> None:
        self.call.media_errors += 1  # an ICMP unreachable for a packet sent: the caller may be gone


class SipCall:
    """One call's media and conversation, and the `MediaSink` of it; see the module docstring."""

    def __init__(self, state: ServerState, codec: Codec, dtmf_type: int | None, remote: tuple[str, int],
                 signalling_host: str, hang_up: Callable[[str], None],
                 on_media_error: Callable[[str], None] | None = None,
                 transfer: Callable[[str], bool] | None = None) -> None:
        self.state = state
        self.codec = codec
        self.dtmf_type = dtmf_type
        self.source = RtpSource(remote, signalling_host)  # where RTP goes, and which packets are the caller's
        self.media_errors = 0
        self.voice: VoiceCall | None = None
        self.sent_packets = 0
        self.received_packets = 0
        self.held = False
        self.port = 0  # the RTP port, once bound
        self._hang_up = hang_up
        self._transfer = transfer or (lambda target: False)
        self._on_media_error = on_media_error or (lambda kind: None)
        self._socket: asyncio.DatagramTransport | None = None
        self._jitter = JitterBuffer()
        self._keys = TelephoneEvents()
        self._heard: asyncio.Queue[bytes | str] = asyncio.Queue(_HEARD_QUEUED)
        self._heard_at: float | None = None
        self._frames: deque[tuple[str, bytes]] = deque()  # (response id, encoded 20 ms) waiting to go
        self._outbound: dict[str, Outbound] = {}  # replies whose audio is coming
        self._sent_ms: dict[str, float] = {}  # of each reply with frames queued: the ms that went out
        self._tasks: list[asyncio.Task[None]] = []
        self._ssrc = int.from_bytes(os.urandom(4), "big")
        self._sequence = int.from_bytes(os.urandom(2), "big")
        self._timestamp = int.from_bytes(os.urandom(4), "big")
        self._talking = False  # the last packet sent was a reply's (the next one after silence is marked)
        self._refused: str | None = None  # the conversation's last error
        self._ending = False  # the agent called end_call: hang up once the reply has gone out

    async def bind(self, host: str) -> int:
        loop = asyncio.get_running_loop()
        self._socket, _ = await loop.create_datagram_endpoint(lambda: _Rtp(self), local_addr=(host, 0))
        self.port = self._socket.get_extra_info("sockname")[1]
        return self.port

    async def start(self, session: dict[str, Any] | None) -> str | None:
        """Open the conversation, set up by ``session`` (a session.update's) after the input rate, and let
        the media flow; the session's error, if it refused the settings (the call goes on with the rest)."""
        self.voice = VoiceCall(self.state, self)
        refused = None
        for update in [_LISTEN, session] if session else [_LISTEN]:
            self._refused = None
            await self.voice.receive(json.dumps({"type": "session.update", "session": {"type": "realtime", **update}}))
            refused = refused or self._refused
        self._tasks = [asyncio.create_task(self._hear(), name="lyre-sip-hear"),
                       asyncio.create_task(self._send(), name="lyre-sip-send"),
                       asyncio.create_task(self._watch(), name="lyre-sip-watch")]
        for task in self._tasks:
            task.add_done_callback(self._failed)
        return refused

    def _failed(self, task: asyncio.Task[None]) -> None:
        """A fault of lyre's own in the call's media: logged, and the call ended."""
        if task.cancelled() or (exc := task.exception()) is None:
            return
        log.error("SIP call media (%s) failed", task.get_name(), exc_info=exc)
        self._hang_up("internal error")

    def hold(self, held: bool) -> None:
        """On hold the caller hears nothing: the reply stops and no audio is sent until resumed."""
        if held and not self.held and self.voice is not None:
            self.voice.hush()
        self.held = held

    def move(self, remote: tuple[str, int]) -> None:
        """The caller's media moved (a re-INVITE's offer): RTP goes there, and its packets are latched afresh."""
        self.source.move(remote)

    async def close(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks = []
        try:
            if self.voice is not None:
                await self.voice.close()
        finally:
            if self._socket is not None:
                self._socket.close()

    # -- the caller's packets --

    def received(self, data: bytes, addr: tuple[str, int]) -> None:
        now = time.monotonic()
        if not self.source.allows((addr[0], addr[1]), now):
            self.media_errors += 1
            self._on_media_error("source")
            return
        if (packet := read_rtp(data)) is None:
            return  # RTCP, or not RTP: nothing lyre needs from it
        if packet.payload_type == self.dtmf_type:
            if (key := self._keys.push(packet.payload, packet.timestamp)) is not None:
                self._queue(key)
        elif packet.payload_type != self.codec.payload_type:
            self.media_errors += 1
            self._on_media_error("payload_type")
            return
        else:
            for payload in self._jitter.push(packet):
                self._queue(payload)
        self.source.heard((addr[0], addr[1]), now)
        self._heard_at = now
        self.received_packets += 1

    def _queue(self, item: bytes | str) -> None:
        try:
            self._heard.put_nowait(item)
        except asyncio.QueueFull:
            self.media_errors += 1
            self._on_media_error("overrun")

    async def _hear(self) -> None:
        assert self.voice is not None
        while True:
            item = await self._heard.get()
            if isinstance(item, str):  # a key pressed
                await self.voice.receive(json.dumps({"type": "conversation.item.create", "item": {
                    "type": "message", "role": "user",
                    "content": [{"type": "input_text", "text": f"(the caller pressed {item} on the keypad)"}]}}))
            else:
                await self.voice.audio(self.codec.decode(item), PHONE_RATE)

    # -- the agent's speech (MediaSink) --

    def play(self, pcm: bytes, response_id: str) -> None:
        if (outbound := self._outbound.get(response_id)) is None:
            outbound = self._outbound[response_id] = Outbound()
        self._enqueue(response_id, outbound.push(pcm))

    def clear(self) -> list[tuple[str, float]]:
        """Drop what is queued: each reply cut short, with the ms of it that went out."""
        cut = [(response_id, ms) for response_id, ms in self._sent_ms.items()]
        cut += [(response_id, 0.0) for response_id in self._outbound if response_id not in self._sent_ms]
        self._frames.clear()
        self._outbound.clear()
        self._sent_ms.clear()
        return cut

    def event(self, event: dict[str, Any]) -> None:
        kind = event["type"]
        if kind == "response.done":
            response_id = event["response"]["id"]
            if (outbound := self._outbound.pop(response_id, None)) is not None:
                self._enqueue(response_id, outbound.finish())
        elif kind == "response.function_call_arguments.done" and event.get("name") == "end_call":
            self._ending = True  # once what the reply says has gone out
        elif kind == "response.function_call_arguments.done" and event.get("name") == "transfer_call":
            try:
                target = json.loads(event.get("arguments") or "{}").get("target")
            except (json.JSONDecodeError, AttributeError):
                target = None
            self._transfer(str(target))
        elif kind == "error":
            self._refused = str(event["error"].get("message"))
            log.info("sip call: %s", self._refused)

    def _enqueue(self, response_id: str, ulaw_frames: list[bytes]) -> None:
        if not ulaw_frames:
            return
        self._sent_ms.setdefault(response_id, 0.0)
        for frame in ulaw_frames:
            if self.codec.payload_type != 0:  # Outbound makes mu-law: the caller wants A-law
                frame = self.codec.encode(_ULAW_TO_PCM[np.frombuffer(frame, np.uint8)].tobytes())
            self._frames.append((response_id, frame))

    async def _send(self) -> None:
        """A packet every 20 ms, on a clock that does not drift: a reply's frame, or silence."""
        silence = bytes([self.codec.silence]) * FRAME_BYTES
        loop = asyncio.get_running_loop()
        due = loop.time()
        while True:
            due += FRAME_MS / 1000
            if (late := loop.time() - due) > 0.2:  # the loop was held up: skip, do not burst
                due += late
            await asyncio.sleep(max(0.0, due - loop.time()))
            payload, marker = silence, False
            if self._frames and not self.held:
                response_id, payload = self._frames.popleft()
                marker, self._talking = not self._talking, True
                self._sent_ms[response_id] = self._sent_ms.get(response_id, 0.0) + FRAME_MS
                self.state.metrics.audio.labels("sip").inc(FRAME_MS / 1000)
                if not any(r == response_id for r, _ in self._frames) and response_id not in self._outbound:
                    del self._sent_ms[response_id]  # all of it went out: nothing left to cut
            else:
                self._talking = False
                if self._ending and not self._outbound:  # the goodbye has gone out
                    self._ending = False
                    self._hang_up("the agent ended the call (end_call)")
            self._timestamp += FRAME_BYTES  # the clock runs through silence and hold alike
            if self.held or self._socket is None:
                continue
            self._sequence += 1
            self._socket.sendto(rtp_packet(self.codec.payload_type, self._sequence, self._timestamp, self._ssrc,
                                           payload, marker), self.source.remote)
            self.sent_packets += 1

    # -- the caller still there --

    async def _watch(self) -> None:
        assert self.voice is not None
        watch = MediaWatch(time.monotonic())
        held_since = time.monotonic()
        while True:
            await asyncio.sleep(_WATCH_S)
            now = time.monotonic()
            if self.held:  # the caller may send nothing while on hold; the wait is still bounded
                quiet = now - max(self._heard_at or 0.0, held_since)
                if quiet > self.state.config.stt_idle_timeout_s:
                    self._hang_up(f"on hold with no audio for {self.state.config.stt_idle_timeout_s:g} s")
                    return
                continue
            held_since = now
            change = watch.tick(now, True, self._heard_at)
            if change is Change.PAUSED:
                self.voice.hush()
            elif change is Change.GONE:
                self._on_media_error("timeout")
                self._hang_up(watch.reason)
                return
