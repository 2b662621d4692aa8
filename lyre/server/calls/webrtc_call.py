"""One WebRTC call (lyre.server.calls.webrtc): its peer connection (aiortc), its agent session, and the tasks
between them. Loaded with the first call.

Whether the caller is there is lyre.server.calls.webrtc_watch's to judge: while its audio has stopped for a
moment the reply stops (`VoiceCall.hush`), and a caller gone is hung up. The caller's events wait for the
agent in a bounded inbox: one that comes with _MAX_INBOX events (or _MAX_INBOX_CHARS of them) already
waiting is refused with an ``error`` event naming it, and the call goes on. Refused, not the call ended:
a data channel cannot be read slower to hold a caller back as a socket can, and a burst costs its sender
only the events over the bound, each named so it can be sent again; a caller that floods on and reads
nothing is hung up by the bound on what it leaves unread (_MAX_UNSENT_BYTES)."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable
from contextlib import AsyncExitStack, ExitStack
from typing import Any

from aiortc import (MediaStreamTrack, RTCConfiguration, RTCDataChannel, RTCIceServer, RTCPeerConnection,
                    RTCSessionDescription)
from aiortc.exceptions import OperationError
from aiortc.mediastreams import MediaStreamError
from av import AudioFrame

from lyre.fleet.records import tagged_id
from lyre.server.config import ice_server_parts
from lyre.server.sessions import RealtimeSessions
from lyre.server.state import ServerState
from lyre.server.calls.voice_call import VoiceCall
from lyre.server.calls.webrtc_audio import InOrder, OutboundAudio, hear_sooner
from lyre.server.calls.webrtc_offer import EVENTS_CHANNEL, no_common_codec
from lyre.server.calls.webrtc_watch import Change, MediaWatch
from lyre.stt import RealtimeError

__all__ = ["Call"]

_WATCH_S = 0.1  # how often the call looks at its connection and its audio
_MAX_UNSENT_BYTES = 4 * 2**20  # events the caller leaves unread on the data channel, at most
_MAX_INBOX = 256  # the caller's events waiting for the agent to read them, at most
_MAX_INBOX_CHARS = 2 * 2**20  # ... and their characters: eight of the largest (aiortc takes 256 KiB a message)
_MAX_QUEUED_S = 5.0  # the caller's audio the agent may fall behind by
_FRAME_S = 0.02  # a WebRTC audio frame

log = logging.getLogger("lyre.webrtc")


class Call:
    """One WebRTC call: its peer connection, its agent session, and the tasks between them."""

    def __init__(self, state: ServerState, model: str | None, hung_up: Callable[[Call], None]) -> None:
        """``hung_up`` is told the moment the call hangs up (its owner forgets it), before it is freed."""
        # In a fleet the id names this server, so a router sends the call's hang-up here.
        self.id = tagged_id("rtc_", state.config.advertise)
        self.state = state
        self._on_hang_up = hung_up
        servers = [RTCIceServer(*ice_server_parts(url)) for url in state.config.ice_servers]
        # An empty list, not None: given None, aiortc asks Google's public STUN server unbidden.
        self.pc = RTCPeerConnection(RTCConfiguration(iceServers=servers))
        self.out = OutboundAudio(self.event)
        self._channel: RTCDataChannel | None = None
        self._unsent: list[str] = []  # events before the caller's data channel is open
        self._attached: list[Callable[[dict[str, Any] | None], None]] = []  # backends' sockets (sideband)
        self._inbox: asyncio.Queue[str] = asyncio.Queue()
        self._inbox_chars = 0
        self._tasks: set[asyncio.Task[Any]] = set()
        self._heard_at: float | None = None  # when the caller's audio last arrived, decoded
        self._packets: InOrder | None = None  # the caller's audio packets as they arrive
        self._hung_up: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        self._closing: asyncio.Task[None] | None = None  # freeing what the call holds, once hung up
        self._held = ExitStack()
        self._errors: list[str] | None = None  # while the offer's session settings are applied
        self.voice = VoiceCall(state, self, model)
        self.pc.on("track", self._on_track)
        self.pc.on("datachannel", self._on_channel)
        self.pc.on("connectionstatechange", self._on_state)

    # -- MediaSink: what the agent session sends --

    def play(self, pcm: bytes, response_id: str) -> None:
        self.out.push(pcm, response_id)

    def clear(self) -> list[tuple[str, float]]:
        return self.out.clear()

    def event(self, event: dict[str, Any]) -> None:
        if event["type"] == "error" and self._errors is not None:
            self._errors.append(event["error"]["message"])
        if event["type"] == "response.done":
            self.out.finish(event["response"]["id"])
        for listener in list(self._attached):
            listener(event)
        text = json.dumps(event)
        channel = self._channel
        if channel is None or channel.readyState != "open":
            self._unsent.append(text)
            return
        if channel.bufferedAmount > _MAX_UNSENT_BYTES:
            self.hang_up(f"over {_MAX_UNSENT_BYTES // 2**20} MiB of events unread on the data channel")
            return
        channel.send(text)

    # -- the call's life --

    async def answer(self, offer: str, session: dict[str, Any] | None) -> str:
        """Take the caller's offer (and session settings); returns the SDP answer. ValueError names what
        is wrong with either; any other exception is a fault of the server's. Either way the caller hangs
        up the call."""
        if session is not None:
            self._errors = []
            await self.voice.receive(json.dumps({"type": "session.update", "session": session}))
            errors, self._errors = self._errors, None
            if errors:
                raise ValueError(f"session: {errors[0]}")
        try:
            await self.pc.setRemoteDescription(RTCSessionDescription(offer, "offer"))
        except OperationError:  # aiortc raises it here only for a media section with no codec it speaks
            raise ValueError(no_common_codec(offer)) from None
        except Exception as exc:  # aiortc reading what the caller wrote (lyre's checks passed it)
            log.info("call %s: aiortc refused the offer: %r", self.id, exc)
            raise ValueError(f"sdp: the offer was refused ({type(exc).__name__}: {exc})") from None
        self.pc.addTrack(self.out)
        for transceiver in self.pc.getTransceivers():
            if transceiver.kind == "audio":
                self._packets = hear_sooner(transceiver.receiver)
        self._spawn(self._watch())  # from here on, a call never connected is hung up
        await self.pc.setLocalDescription(await self.pc.createAnswer())
        self._spawn(self._read_events())
        return self.pc.localDescription.sdp

    def hold(self, sessions: RealtimeSessions, client: str | None = None) -> None:
        """The call counts against the server's sessions (and ``client``'s share), and a backend may attach to
        it, until it is freed."""
        self._held.enter_context(sessions.hold(client))
        self._held.enter_context(sessions.call(self.id, self))
        self._held.callback(self._call_over)

    # -- a backend attached (lyre.server.sessions.Attachable) --

    def attach(self, listener: Callable[[dict[str, Any] | None], None]) -> Callable[[], None]:
        """``listener`` gets every event of the call from now on, and None once the call is over."""
        self._attached.append(listener)

        def detach() -> None:
            if listener in self._attached:
                self._attached.remove(listener)
        return detach

    def sideband(self, text: str) -> None:
        self._on_message(text)

    def _call_over(self) -> None:
        attached, self._attached = self._attached, []
        for listener in attached:
            listener(None)

    def hang_up(self, reason: str) -> None:
        """End the call (again: nothing more); ``reason`` is logged and, while the channel is open, sent."""
        if self._hung_up.done():
            return
        log.info("call %s hangs up: %s", self.id, reason)
        if reason != "hung up by the caller":
            self.voice.report(RealtimeError(f"call ended: {reason}", "call_ended", kind="server_error"))
        self._hung_up.set_result(reason)
        self._on_hang_up(self)
        self._closing = asyncio.ensure_future(self._close())
        self._closing.add_done_callback(self._freed)

    async def closed(self) -> str:
        """Once the call is hung up and everything it held is free; why it hung up."""
        reason = await asyncio.shield(self._hung_up)
        assert self._closing is not None
        await asyncio.wait({self._closing})  # its failure is logged, not raised here
        return reason

    async def _close(self) -> None:
        """Free what the call holds, each part whatever became of the one before: the agent's replies and
        passes (their engine slots), the call's tasks, the peer connection, and last the session slot."""
        async with AsyncExitStack() as parts:  # unwound last first, every part even when one raises
            parts.callback(self._held.close)
            parts.push_async_callback(self._close_peer)
            parts.push_async_callback(self._stop_tasks)
            await self.voice.close()

    async def _stop_tasks(self) -> None:
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        self.out.stop()
        if tasks:
            await asyncio.wait(tasks)

    async def _close_peer(self) -> None:
        try:
            await asyncio.wait_for(self.pc.close(), 5.0)
        except TimeoutError:
            log.warning("call %s: the peer connection took over 5 s to close", self.id)
        except Exception as exc:  # aiortc, on a connection an offer left half set up: closed as far as it goes
            log.warning("call %s: closing the peer connection failed: %r", self.id, exc)

    def _freed(self, closing: asyncio.Task[None]) -> None:
        if not closing.cancelled() and (exc := closing.exception()) is not None:
            log.error("call %s: closing it failed (its slots are free): %r", self.id, exc, exc_info=exc)

    # -- the peer connection's events --

    def _on_track(self, track: MediaStreamTrack) -> None:
        if track.kind == "audio":
            self._spawn(self._listen(track))

    def _on_channel(self, channel: RTCDataChannel) -> None:
        if channel.label != EVENTS_CHANNEL:
            log.info("call %s: data channel %r ignored (events go on %r)", self.id, channel.label, EVENTS_CHANNEL)
            return
        self._channel = channel
        channel.on("message", self._on_message)
        unsent, self._unsent = self._unsent, []
        for text in unsent:
            channel.send(text)

    def _on_message(self, message: str | bytes) -> None:
        if isinstance(message, bytes):
            self.voice.report(RealtimeError("binary data channel messages are not supported; send JSON text "
                                            "events", "invalid_event"))
            return
        if self._inbox.qsize() >= _MAX_INBOX or self._inbox_chars + len(message) > _MAX_INBOX_CHARS:
            self.voice.report(RealtimeError(
                f"event refused: {self._inbox.qsize()} events wait for the agent already (at most {_MAX_INBOX}, "
                f"{_MAX_INBOX_CHARS // 2**20} Mi characters); send it again once they are answered",
                "too_many_events"), _event_id(message))
            return
        self._inbox_chars += len(message)
        self._inbox.put_nowait(message)

    def _on_state(self) -> None:
        if self.pc.connectionState in ("failed", "closed"):
            self.hang_up(f"connection {self.pc.connectionState}")

    # -- tasks --

    async def _listen(self, track: MediaStreamTrack) -> None:
        """The caller's audio as it arrives: the time it came (for the media timeout, whatever the agent's
        pace), and the frame queued for the agent; past _MAX_QUEUED_S behind, the oldest is dropped."""
        frames: asyncio.Queue[AudioFrame] = asyncio.Queue()
        self._spawn(self._hear(frames))
        dropped = 0
        while True:
            try:
                frame = await track.recv()
            except MediaStreamError:
                return
            self._heard_at = time.monotonic()
            frames.put_nowait(frame)
            if frames.qsize() * _FRAME_S > _MAX_QUEUED_S:
                frames.get_nowait()
                if not dropped:
                    log.warning("call %s: the agent is over %g s behind the caller's audio; dropping the oldest",
                                self.id, _MAX_QUEUED_S)
                dropped += 1

    async def _hear(self, frames: asyncio.Queue[AudioFrame]) -> None:
        """Queued frames of the caller's audio into the agent, in order."""
        while True:
            frame = await frames.get()
            pcm = frame.to_ndarray().tobytes()
            await self.voice.audio(pcm, frame.sample_rate, len(frame.layout.channels))

    async def _read_events(self) -> None:
        """The caller's events, one at a time, in order."""
        while True:
            text = await self._inbox.get()
            self._inbox_chars -= len(text)
            await self.voice.receive(text)

    async def _watch(self) -> None:
        """Hangs up a call never connected, or whose caller is gone; while the caller's audio has stopped,
        keeps its reply stopped (lyre.server.calls.webrtc_watch)."""
        watch = MediaWatch(time.monotonic())
        while True:
            await asyncio.sleep(_WATCH_S)
            # Packets as they arrive; decoded frames only where aiortc's buffer could not be replaced.
            packet_at = self._packets.packet_at if self._packets is not None else None
            heard = max(self._heard_at or 0.0, packet_at or 0.0) or None
            change = watch.tick(time.monotonic(), self.pc.connectionState == "connected", heard)
            if change is Change.GONE:
                self.hang_up(watch.reason)
                return
            if change is not None:
                log.info("call %s: the caller's audio has %s", self.id,
                         "stopped: the reply stops, and the call waits" if watch.paused else "come back")
            if watch.paused:  # a reply begun meanwhile (a turn the caller ended before) stops too
                self.voice.hush()

    def _spawn(self, work: Any) -> None:
        task = asyncio.ensure_future(work)
        self._tasks.add(task)
        task.add_done_callback(self._done)

    def _done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and (exc := task.exception()) is not None:
            log.error("call %s: %r", self.id, exc, exc_info=exc)
            self.hang_up(f"internal error: {exc}")


def _event_id(text: str) -> str | None:
    """The client's ``event_id`` of an event, if it has one: for an error that names the event."""
    try:
        event = json.loads(text)
    except json.JSONDecodeError:
        return None
    event_id = event.get("event_id") if isinstance(event, dict) else None
    return event_id if isinstance(event_id, str) else None
