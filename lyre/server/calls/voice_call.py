"""A conversation whose audio travels as media, not inside JSON events: what a WebRTC call and a phone
stream share.

    call = VoiceCall(state, sink, model)        # opens an AgentSession (session.created goes to the sink)
    await call.audio(pcm, rate)                 # the caller's audio: pcm16 mono at any rate
    await call.receive(text)                    # a client event, as JSON text (a data channel's)
    await call.heard(response_id, ms)           # the transport knows how much of a reply was played
    call.hush()                                 # the caller cannot hear for now: the reply stops
    await call.close()                          # cancels every pass and reply; frees their slots

Audio in is resampled (PyAV) to the session's input rate and handed to its ear as media, without a
base64 round trip. Audio out: the assistant's audio deltas reach the sink as pcm16 at 24 kHz
(``sink.play``), never as events; every other event goes to ``sink.event``. When the caller starts to
speak over a reply and the session interrupts replies, ``sink.clear`` drops what is queued and unplayed
at once, so the caller stops hearing the old reply, and says how much of each reply it cut had gone
out: the reply's history is cut there (`heard`), by what the transport sent or its listener played (a
WebRTC track counts the samples it sent, a phone stream has Twilio's marks), not by the session's
playback clock, which takes the audio to have played at real time from its first delta and so counts
every gap where the speech fell behind as heard.

A call's client events are the session's, with what only media calls take, as OpenAI's WebRTC and SIP
calls take it: ``output_audio_buffer.clear`` stops the reply playing now (its history cut to what went
out; a WebRTC track that was playing says ``output_audio_buffer.cleared``); and the output format is the transport's
(Opus on WebRTC, G.711 on a phone line), so a ``session.update``'s ``audio.output.format`` is not the
client's to set and is left out.
"""

from __future__ import annotations

import asyncio
import base64
import json
from typing import Any, Protocol

from lyre.agent import AgentSession
from lyre.common.resample import Resampler
from lyre.server.sessions import agent_config
from lyre.server.state import ServerState
from lyre.stt import RealtimeError

__all__ = ["OUTPUT_RATE", "MediaSink", "Resampler", "VoiceCall"]

OUTPUT_RATE = 24_000  # the assistant's audio, as the Realtime API's pcm16
_AUDIO_DELTAS = ("response.output_audio.delta", "response.audio.delta")  # GA and beta names
_ITEMS_KEPT = 8  # replies whose item id is kept, for a transport's late word on what was heard


class MediaSink(Protocol):
    """Where a call's output goes: the transport's side."""

    def play(self, pcm: bytes, response_id: str) -> None: ...  # pcm16 mono at 24 kHz, queued to play

    def clear(self) -> list[tuple[str, float]]:
        """Drop what is queued and not yet played; the replies cut, each with the ms of it heard."""
        ...

    def event(self, event: dict[str, Any]) -> None: ...  # a Realtime server event other than audio


class VoiceCall:
    """One caller's conversation with the agent, its audio as media; see the module docstring."""

    def __init__(self, state: ServerState, sink: MediaSink, model: str | None = None) -> None:
        assert state.stt is not None and state.tts is not None and state.thinker is not None
        self.sink = sink
        self._metrics = state.metrics
        self._resamplers: dict[tuple[int, int], Resampler] = {}
        self._silenced: str | None = None  # the reply barged in on: audio of it still on its way is dropped
        self._items: dict[str, str] = {}  # response id -> its message item's id, for the last few replies
        self._cuts: set[asyncio.Task[None]] = set()  # replies' histories being cut to what was heard
        # A reply holds a stream slot like any speech stream and queues for one, as on the WebSocket.
        self.session = AgentSession(state.stt, state.tts, state.thinker, self._emit, agent_config(state, model),
                                    state.end_of_turn, admit=state.admission.slot, aligner=state.aligner)
        self.id = self.session.id

    @property
    def busy(self) -> bool:
        return self.session.busy

    async def audio(self, pcm: bytes, rate: int, channels: int = 1) -> None:
        """The caller's audio (pcm16 at ``rate``), resampled to what the session listens at."""
        to_rate = self.session.ear.settings.rate
        key = (rate, channels)
        resampler = self._resamplers.get(key)
        if resampler is None or resampler.to_rate != to_rate:
            resampler = self._resamplers[key] = Resampler(rate, to_rate, channels)
        try:
            await self.session.ear.push(resampler.push(pcm))
        except RealtimeError as exc:
            self.session.report(exc)

    async def receive(self, text: str) -> None:
        """A client event, as JSON text; a problem with it comes back as an ``error`` event."""
        try:
            event = json.loads(text)
        except (ValueError, RecursionError):
            event = None  # the session names what is wrong with it
        if isinstance(event, dict) and event.get("type") == "output_audio_buffer.clear":
            self._clear_output(event)
            return
        if isinstance(event, dict) and event.get("type") == "session.update" and isinstance(
                output := ((event.get("session") or {}).get("audio") or {}).get("output"), dict):
            output.pop("format", None)  # the transport's, not the client's
            text = json.dumps(event)
        await self.session.receive(text)

    def _clear_output(self, event: dict[str, Any]) -> None:
        """``output_audio_buffer.clear``: the reply playing stops now, as at a barge-in (the sink that was
        playing says ``output_audio_buffer.cleared``, as at a barge-in)."""
        self.hush()

    def report(self, error: RealtimeError, client_event_id: str | None = None) -> None:
        self.session.report(error, client_event_id)

    async def heard(self, response_id: str, heard_ms: float) -> None:
        """The caller heard only the first ``heard_ms`` of a reply, by the transport's own account (a phone
        stream's marks), which the session's playback clock can only estimate: the reply's history keeps
        what was heard, as a client's ``conversation.item.truncate`` would cut it. A reply still ending is
        waited for; one that said nothing, or is no longer in the conversation, is left alone."""
        if (item_id := self._items.get(response_id)) is None:
            return
        reply = self.session.reply
        if reply is not None and reply.id == response_id and not reply.over:
            # Its item joins the conversation when it is over, in a callback that runs before this wait's.
            await asyncio.wait({reply.done})
        item = self.session.conversation.find(item_id)
        if item is None or "audio_ms" not in item:
            return
        self.session.truncate(item_id, 0, min(round(heard_ms), int(item["audio_ms"])))

    def hush(self) -> None:
        """The caller cannot hear for now (its media stopped): the reply stops as at a barge-in, its engine
        slots freed and its history cut to what went out, and a speculative one is dropped."""
        self._silence()
        self._cut(self.sink.clear())
        self.session.hush()

    async def close(self) -> None:
        for task in list(self._cuts):
            task.cancel()
        try:
            await self.session.close()
        finally:
            for resampler in self._resamplers.values():
                resampler.close()
            self._resamplers.clear()

    def _emit(self, event: dict[str, Any]) -> None:
        self._metrics.count_refusals(event)
        kind = event["type"]
        if kind in _AUDIO_DELTAS:
            if event.get("response_id") != self._silenced:
                self.sink.play(base64.b64decode(event["delta"]), event.get("response_id", ""))
            return
        if kind == "response.output_item.added" and event.get("output_index") == 0:
            self._items[event["response_id"]] = event["item"]["id"]
            if len(self._items) > _ITEMS_KEPT:
                del self._items[next(iter(self._items))]
        elif kind == "input_audio_buffer.speech_started" and self.session.settings.interrupt_response:
            # Barge-in: the caller stops hearing the old reply now, and the session cancels it next.
            self._silence()
            self.sink.event(event)
            self._cut(self.sink.clear())  # after the event that caused it, as OpenAI orders them
            return
        self.sink.event(event)

    def _silence(self) -> None:
        """Drop what still comes of the reply playing: a delta of it may already be on its way when it is
        cancelled (its audio task runs on until the cancel reaches it)."""
        reply = self.session.reply
        self._silenced = reply.id if reply is not None and not reply.held else None

    def _cut(self, cut: list[tuple[str, float]]) -> None:
        """The histories of the replies the transport cut, to what was heard of each."""
        for response_id, heard_ms in cut:
            task = asyncio.ensure_future(self.heard(response_id, heard_ms))
            self._cuts.add(task)
            task.add_done_callback(self._cuts.discard)
