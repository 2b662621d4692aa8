"""A voice agent session: OpenAI Realtime conversation events in, the assistant's spoken replies out.

    session = AgentSession(transcriber, tts, thinker, emit)   # emits session.created
    await session.receive(text)                               # one client event, as JSON text
    await session.close()                                     # cancels every pass and reply

Listening is a transcription session (lyre.stt.realtime) inside this one: the
input_audio_buffer events go to it, and its speech, commit and transcription
events go out as they are. On top, this session keeps the conversation (user
transcripts, assistant replies cut to what was heard, function calls and their
outputs), and answers each detected turn with a `Reply`: at the VAD's full
silence, or earlier when the semantic end-of-turn model is sure
(lyre.agent.end_of_turn), or before that, held, at a possible end of turn
(lyre.agent.speculation). Client events are read and checked by
lyre.agent.client_events, which calls this session's actions (`update`,
`add_item`, `truncate`, `respond`, `cancel_response`). Barge-in, and each
reply kept in the history cut to what was heard: lyre.agent.replies.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from lyre.agent.client_events import ClientEvents
from lyre.agent.conversation import Conversation, item_object
from lyre.agent.end_of_turn import EndOfTurn, confirm_end
from lyre.agent.events import BETA, AgentSettings, new_id, session_object
from lyre.agent.replies import Replies
from lyre.agent.reply import Reply, ReplySpec
from lyre.agent.speculation import Speculator
from lyre.agent.think import Thinker
from lyre.stt import PcmResampler, RealtimeConfig, RealtimeError, RealtimeSession, Transcriber, WordAligner, error_event
from lyre.stt.realtime_events import session_object as heard_object
from lyre.stt.utterances import Utterance
from lyre.stt.whisper import Transcript
from lyre.tts import Synthesizer

__all__ = ["AgentConfig", "AgentSession"]


@dataclass(frozen=True)
class AgentConfig:
    """A conversation session's limits and its possible-end silence."""

    realtime: RealtimeConfig = RealtimeConfig(pause_ms=200)
    model: str = "lyre-agent"
    end_of_turn_threshold: float = 0.5  # the semantic model's probability that confirms a turn early


class AgentSession:
    """One client's conversation; see the module docstring."""

    def __init__(self, transcriber: Transcriber, tts: Synthesizer, thinker: Thinker,
                 emit: Callable[[dict[str, Any]], None], config: AgentConfig = AgentConfig(),
                 end_of_turn: EndOfTurn | None = None,
                 admit: Callable[[], AbstractAsyncContextManager[Any]] | None = None,
                 aligner: WordAligner | None = None) -> None:
        """``end_of_turn``: a semantic end-of-turn model; ``admit``: the server's admission of a speech stream
        (each reply holds one while it thinks and speaks; refused, the reply fails saying why); ``aligner``:
        what places a cut reply's words in its audio (default: the transcriber's Whisper)."""
        self.id = new_id("sess")
        self.config = config
        self.settings = AgentSettings()
        self.conversation = Conversation()
        self._stt = transcriber
        self._tts = tts
        self._thinker = thinker
        self._emit = emit
        self._end_of_turn = end_of_turn
        self._admit = admit
        self._ear_errors = 0
        self._untranscribed: set[str] = set()  # committed utterances whose final pass is still running
        self._reply_when_transcribed = False  # a response.create waits for them
        self._tasks: set[asyncio.Task[Any]] = set()
        self._replies = Replies(self.conversation, aligner if aligner is not None else transcriber, self._send,
                                self.report, self._spawn)
        self._speculator = Speculator(self._think_ahead, self._spawn)
        self.ear = RealtimeSession(transcriber, self._heard, config.realtime, listener=self)
        self._events = ClientEvents(self, self.ear.config.max_message_bytes)
        self._send("session.created", session=self._session_object())

    @property
    def busy(self) -> bool:
        """Something is running the client may be waiting for: a pass, or a reply."""
        return self.ear.busy or (self.reply is not None and not self.reply.over)

    @property
    def reply(self) -> Reply | None:
        """The reply the client hears (or is about to)."""
        return self._replies.current

    @property
    def wasted(self) -> int:
        """Speculative replies thrown away."""
        return self._speculator.wasted

    @property
    def supports_tools(self) -> bool:
        return self._thinker.supports_tools

    @property
    def max_speech_tokens(self) -> int:
        return self._tts.max_tokens_limit

    async def receive(self, text: str) -> None:
        """Act on one client event; a problem with it is sent back as an ``error`` event."""
        await self._events.receive(text)

    def report(self, error: RealtimeError, client_event_id: str | None = None) -> None:
        self._emit(error_event(error, client_event_id))

    async def close(self) -> None:
        """Cancel every pass and reply; nothing more is emitted."""
        self._emit = _drop
        self._speculator.drop()
        if self.reply is not None:
            self.reply.cancel()
        await self.ear.close()
        for task in list(self._tasks):
            task.cancel()
        pending = [t for t in self._tasks] + ([self.reply.done] if self.reply is not None else [])
        if pending:
            await asyncio.wait(pending, timeout=5.0)

    # -- what client events ask (lyre.agent.client_events reads and checks them) --

    def listen(self, event: dict[str, Any]) -> Awaitable[None] | None:
        return self.ear.handle(event)

    async def update(self, settings: AgentSettings, heard: dict[str, Any] | None) -> None:
        """New settings; the transcription session takes its part first, and if it refuses (its error event
        says why), nothing changes."""
        if settings.voice != self.settings.voice:
            try:
                self._tts.check_voice(settings.voice)
            except ValueError as exc:
                where = "session.voice" if settings.names is BETA else "session.audio.output.voice"
                raise RealtimeError(f"{where}: {exc}", "invalid_value", where) from None
        if heard is not None:
            errors = self._ear_errors
            await self.ear.receive(json.dumps(heard))
            if self._ear_errors != errors:
                return
        self.settings = settings
        self.ear.pause_ms = self.config.realtime.pause_ms if settings.speculative else None
        self._send("session.updated", session=self._session_object())

    async def transcribe(self, pcm: bytes) -> str:
        resampler = PcmResampler(self.ear.settings.rate)
        audio = np.concatenate([resampler.push(pcm), resampler.flush()])
        transcript = await self._stt.transcribe(audio, self.ear.settings.options(), session=self.id)
        return transcript.text

    def add_item(self, entry: dict[str, Any]) -> None:
        previous = self.conversation.last_id
        self.conversation.add(entry)
        shown = item_object(entry)
        self._send(self.settings.names.item_added, item=shown, previous_item_id=previous)
        self._send("conversation.item.done", item=shown, previous_item_id=previous)

    def truncate(self, item_id: object, content_index: object, audio_end_ms: object) -> None:
        self._replies.truncate(item_id, content_index, audio_end_ms)

    def respond(self) -> None:
        if (self.reply is not None and not self.reply.over) or self._reply_when_transcribed:
            raise RealtimeError("Conversation already has an active response in progress"
                                + (f": {self.reply.id}" if self.reply is not None and not self.reply.over else ""),
                                "conversation_already_has_active_response")
        self._speculator.drop()
        if self._untranscribed:  # what the person just said must be in the prompt: answer once it is
            self._reply_when_transcribed = True
            return
        self._start_reply(held=False)

    def hush(self) -> None:
        """Stop replying now (the listener cannot hear for a while): the reply under way is cancelled, its
        history cut to what was played, and a speculative one is dropped."""
        self._speculator.drop()
        if self.reply is not None:
            self.reply.cancel()

    def cancel_response(self) -> None:
        if self.reply is None or self.reply.over:
            raise RealtimeError("Cancellation failed: no active response found", "response_cancel_not_active")
        self.reply.cancel()

    # -- what the transcription session hears --

    def _heard(self, event: dict[str, Any]) -> None:
        kind = event["type"]
        if kind in ("transcription_session.created", "transcription_session.updated", "session.updated"):
            return  # this session answers for itself
        if kind == "error":
            self._ear_errors += 1
        self._emit(event)
        if kind == "input_audio_buffer.speech_started" and self.settings.interrupt_response:
            self._replies.barge_in()
        elif kind == "input_audio_buffer.committed":
            self._untranscribed.add(event["item_id"])
            item = {"id": event["item_id"], "type": "message", "role": "user", "status": "completed",
                    "content": [{"type": "input_audio", "transcript": None}]}
            self._send(self.settings.names.item_added, item=item, previous_item_id=event.get("previous_item_id"))

    def paused(self, item: Utterance, sample: int, early: asyncio.Task[Transcript]) -> None:
        if self.ear.settings.turn_detection is None:
            return
        if self._end_of_turn is not None and self.settings.smart_turn:
            self._spawn(confirm_end(self.ear, item, self._end_of_turn, self.config.end_of_turn_threshold))
        if not (self.settings.speculative and self.settings.create_response):
            return
        if self.reply is not None and not self.reply.over:
            return  # the person talks over a reply: barge-in decides, not a new speculation
        self._speculator.start(item, sample, early)

    def resumed(self, item: Utterance) -> None:
        self._speculator.resumed(item)

    def transcribed(self, item: Utterance, transcript: Transcript | None) -> None:
        self._untranscribed.discard(item.id)
        heard = transcript.text.strip() if transcript is not None else ""
        if heard:
            self.conversation.add({"id": item.id, "type": "message", "role": "user", "text": heard})
        if self._reply_when_transcribed and not self._untranscribed:
            self._reply_when_transcribed = False
            self._speculator.drop()
            self._start_reply(held=False)  # the client's response.create, waiting for this transcript
            return
        if not heard or not (self.settings.create_response and self.ear.settings.turn_detection):
            self._speculator.drop()
            return
        if (held := self._speculator.confirmed(item, heard)) is not None:
            self._replies.replace(held)
            held.release()
            return
        self._start_reply(held=False)

    # -- replies --

    def _start_reply(self, held: bool) -> Reply:
        reply = self._new_reply(self.conversation.messages(self.settings.instructions), held)
        self._replies.replace(reply)
        return reply

    def _think_ahead(self, user: dict[str, Any], possible_end: float) -> Reply:
        """A held reply to ``user``, the words so far of a turn that may have ended at ``possible_end``."""
        return self._new_reply(self.conversation.messages(self.settings.instructions, user), held=True,
                               possible_end=possible_end)

    def _new_reply(self, messages: list[dict[str, Any]], held: bool, possible_end: float | None = None) -> Reply:
        settings = self.settings
        spec = ReplySpec(messages=messages, voice=settings.voice, tools=list(settings.tools), names=settings.names,
                         first_sentences=settings.first_sentences if held else 0, held=held,
                         max_speech_tokens=settings.max_speech_tokens, discarded=self.wasted,
                         language=self.ear.settings.language)
        reply = Reply(spec, self._thinker, self._tts, self._emit_event, self._admit)
        reply.times.possible_end = possible_end
        self._replies.start(reply)
        return reply

    # -- plumbing --

    def _session_object(self) -> dict[str, Any]:
        shape: Literal["beta", "ga"] = "beta" if self.settings.names is BETA else "ga"
        return session_object(self.settings, heard_object(self.ear.settings, self.id, shape), self.id,
                              self.config.model)

    def _send(self, kind: str, **fields: Any) -> None:
        self._emit({"type": kind, "event_id": new_id("event"), **fields})

    def _emit_event(self, event: dict[str, Any]) -> None:
        self._emit(event)  # late-bound: after close, emit is _drop

    def _spawn(self, work: Awaitable[None]) -> asyncio.Task[None]:
        task = asyncio.ensure_future(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task


def _drop(event: dict[str, Any]) -> None:
    """``emit`` once the session is closed."""
