"""What lyre sends on one Twilio Media Stream (lyre.server.calls.twilio_call), in order, from one writer: a
reply's audio as ``media`` messages of 20 ms (160 bytes of mu-law), a ``mark`` after each chunk of it, and
``clear`` when the caller speaks over a reply Twilio is still playing.

    sender = TwilioSender(socket)                # a WatchedSocket: a send Twilio leaves untaken is bounded
    writer = asyncio.create_task(sender.run())   # sends until close(), then ends
    sender.stream_sid = sid                      # once Twilio's start names it
    sender.play(pcm, response_id)                # the reply's audio (pcm16 at 24 kHz), as it comes
    sender.finish(response_id)                   # the reply is over: the frame it was filling goes too
    sender.echoed(mark_name)                     # Twilio echoed a mark: what came before it has played
    cut = sender.clear()                         # barge-in: [(response_id, heard_ms)] to cut replies at

Twilio plays what it is sent and echoes each mark once the audio before it has played; the marks say how
much of a reply the caller heard (lyre.server.calls.twilio_media.Playback).
"""

from __future__ import annotations

import asyncio
import base64
import json
import time
from typing import Any

from lyre.server.calls.twilio_media import FRAME_MS, Outbound, Playback
from lyre.server.watched_socket import Gone, WatchedSocket

__all__ = ["TwilioSender"]


class TwilioSender:
    """The messages lyre sends on one stream; see the module docstring."""

    def __init__(self, socket: WatchedSocket) -> None:
        self.socket = socket
        self.stream_sid = ""
        self._outbox: asyncio.Queue[dict[str, Any] | None] = asyncio.Queue()
        self._playback = Playback()
        self._outbound: dict[str, Outbound] = {}  # replies whose audio is going out
        self._marks = 0

    @property
    def unsent(self) -> int:
        """Messages queued and not yet sent."""
        return self._outbox.qsize()

    def play(self, pcm: bytes, response_id: str) -> None:
        if (outbound := self._outbound.get(response_id)) is None:
            outbound = self._outbound[response_id] = Outbound()
        self._send_audio(response_id, outbound.push(pcm))

    def finish(self, response_id: str) -> None:
        if (outbound := self._outbound.pop(response_id, None)) is not None:
            self._send_audio(response_id, outbound.finish())

    def echoed(self, name: str) -> None:
        self._playback.echoed(name, time.monotonic())

    def clear(self) -> list[tuple[str, float]]:
        """Stop what Twilio plays and drop what is on its way; the replies cut, with how much of each was
        heard. Nothing is sent when nothing plays."""
        speaking = bool(self._outbound)  # a reply is still sending audio
        self._outbound.clear()  # a reply cut short sends not even the frame it was filling
        if not (speaking or self._playback.playing):
            return []
        self._put({"event": "clear", "streamSid": self.stream_sid})
        return self._playback.clear(time.monotonic())

    async def run(self) -> None:
        """Send the queued messages in order until close(); once Twilio has left, or been cut for taking
        nothing, drop them."""
        gone = False
        while True:
            message = await self._outbox.get()
            try:
                if message is None:
                    return
                if not gone:
                    await self.socket.send_text(json.dumps(message))
            except Gone:
                gone = True
            finally:
                self._outbox.task_done()

    async def drained(self, within: float) -> bool:
        """Whether everything queued was sent within ``within`` seconds."""
        try:
            await asyncio.wait_for(self._outbox.join(), within)
        except TimeoutError:
            return False
        return True

    def close(self) -> None:
        """Nothing more: run() ends once what is queued has gone."""
        self._outbox.put_nowait(None)

    def _send_audio(self, response_id: str, frames: list[bytes]) -> None:
        """Frames of a reply, then a mark after them: Twilio echoes it once they have played."""
        if not frames:
            return
        for frame in frames:
            self._put({"event": "media", "streamSid": self.stream_sid,
                       "media": {"payload": base64.b64encode(frame).decode("ascii")}})
        self._playback.send(response_id, FRAME_MS * len(frames), time.monotonic())
        self._marks += 1
        name = f"{response_id}.{self._marks}"
        self._playback.mark(name)
        self._put({"event": "mark", "streamSid": self.stream_sid, "mark": {"name": name}})

    def _put(self, message: dict[str, Any]) -> None:
        self._outbox.put_nowait(message)
