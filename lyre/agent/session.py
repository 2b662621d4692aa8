"""A voice agent session: OpenAI Realtime conversation events in, the assistant's spoken replies out.

    session = AgentSession(transcriber, tts, thinker, emit)   # emits session.created
    await session.receive(text)                               # one client event, as JSON text
    await session.close()                                     # cancels every pass and reply

Listening is a transcription session (lyre.stt.realtime) inside this one: the
input_audio_buffer events go to it, and its speech, commit and transcription
events go out as they are. On top, this session keeps the conversation (user
transcripts, assistant replies cut to what was heard, function calls and their
outputs), and answers each detected turn with a `Reply`.

Speculative start: a short silence (``pause_ms``) marks a possible end of turn.
The utterance's final pass starts at once; once it has text, a reply starts
held (nothing sent). If the person speaks again, the reply is cancelled and
its engine slots freed; at the confirmed end of turn (the VAD's full silence,
or earlier when the semantic end-of-turn model is sure) the final transcript
is compared with the one the reply started on: the same words release the held
events at once, other words restart the reply.

Barge-in: speech starting while a released reply is still playing cancels it
(``interrupt_response``), and the assistant item keeps the text of the audio
the client had time to play (by the server's playback clock, or the client's
own ``conversation.item.truncate``).
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from lyre.agent.conversation import Conversation, item_object
from lyre.agent.events import BETA, AgentSettings, input_update, new_id, read_agent_update, session_object
from lyre.agent.reply import Reply, ReplySpec
from lyre.agent.think import Thinker
from lyre.stt import RealtimeConfig, RealtimeError, RealtimeSession, Transcriber, error_event
from lyre.stt.audio import AudioError, PcmResampler
from lyre.stt.realtime_events import act_on, append_audio, expect_object
from lyre.stt.realtime_events import session_object as heard_object
from lyre.stt.utterances import Utterance
from lyre.stt.whisper import Transcript
from lyre.tts import Synthesizer

__all__ = ["AgentConfig", "AgentSession", "EndOfTurn"]

_PLAYBACK_RATE = 24_000
_WORDS = re.compile(r"[a-z0-9']+")
_FRESH_SAMPLES = 1_600  # a partial that stopped 100 ms short of the silence has heard the last word

EndOfTurn = Callable[[np.ndarray], Awaitable[float]]  # 16 kHz audio -> probability the turn is over


@dataclass(frozen=True)
class AgentConfig:
    """A conversation session's limits and its possible-end silence."""

    realtime: RealtimeConfig = RealtimeConfig(pause_ms=200)
    model: str = "lyre-agent"
    end_of_turn_threshold: float = 0.5  # the semantic model's probability that confirms a turn early


@dataclass
class _Speculation:
    """A reply started at a possible end of turn, on the text of the utterance so far."""

    item: Utterance
    paused_at: float
    task: asyncio.Task[None] | None = None
    text: str = ""
    reply: Reply | None = None


class AgentSession:
    """One client's conversation; see the module docstring."""

    def __init__(self, transcriber: Transcriber, tts: Synthesizer, thinker: Thinker,
                 emit: Callable[[dict[str, Any]], None], config: AgentConfig = AgentConfig(),
                 end_of_turn: EndOfTurn | None = None,
                 admit: Callable[[], AbstractAsyncContextManager[Any]] | None = None) -> None:
        """``end_of_turn``: a semantic end-of-turn model; ``admit``: the server's admission of a speech stream
        (each reply holds one while it thinks and speaks; refused, the reply fails saying why)."""
        self.id = new_id("sess")
        self.config = config
        self.settings = AgentSettings()
        self.conversation = Conversation()
        self.reply: Reply | None = None  # the reply the client hears (or is about to)
        self.wasted = 0  # speculative replies thrown away
        self._stt = transcriber
        self._tts = tts
        self._thinker = thinker
        self._emit = emit
        self._end_of_turn = end_of_turn
        self._admit = admit
        self._speculation: _Speculation | None = None
        self._ear_errors = 0
        self._untranscribed: set[str] = set()  # committed utterances whose final pass is still running
        self._reply_when_transcribed = False  # a response.create waits for them
        self._tasks: set[asyncio.Task[Any]] = set()
        self.ear = RealtimeSession(transcriber, self._heard, config.realtime, listener=self)
        self._send("session.created", session=self._session_object())

    @property
    def busy(self) -> bool:
        """Something is running the client may be waiting for: a pass, or a reply."""
        return self.ear.busy or (self.reply is not None and not self.reply.over)

    async def receive(self, text: str) -> None:
        """Act on one client event; a problem with it is sent back as an ``error`` event."""
        await act_on(text, self.ear.config.max_message_bytes, self._handle, self.report)

    def _handle(self, event: dict[str, Any]) -> Awaitable[None] | None:
        kind = event["type"]
        if kind.startswith("input_audio_buffer."):
            return self.ear.handle(event)  # the transcription session's, errors and all
        handler = self._handlers.get(kind)
        if handler is None:
            raise RealtimeError(f"unknown event type {kind!r}; a conversation session takes "
                                f"{', '.join(['input_audio_buffer.append', *self._handlers])}",
                                "invalid_event", "type")
        return handler(self, event)

    def report(self, error: RealtimeError, client_event_id: str | None = None) -> None:
        self._emit(error_event(error, client_event_id))

    async def close(self) -> None:
        """Cancel every pass and reply; nothing more is emitted."""
        self._emit = _drop
        self._drop_speculation()
        if self.reply is not None:
            self.reply.cancel()
        await self.ear.close()
        for task in list(self._tasks):
            task.cancel()
        pending = [t for t in self._tasks] + ([self.reply.done] if self.reply is not None else [])
        if pending:
            await asyncio.wait(pending, timeout=5.0)

    # -- client events --

    async def _update(self, event: dict[str, Any]) -> None:
        settings = read_agent_update(event, self.settings, self._thinker.supports_tools)
        if settings.max_speech_tokens is not None and settings.max_speech_tokens > self._tts.max_tokens_limit:
            raise RealtimeError(f"session.max_speech_tokens {settings.max_speech_tokens} is over this server's "
                                f"limit of {self._tts.max_tokens_limit}", param="session.max_speech_tokens")
        if (update := input_update(event)) is not None:
            errors = self._ear_errors
            await self.ear.receive(json.dumps(update))
            if self._ear_errors != errors:
                return  # the transcription session named the problem; nothing changed
        self.settings = settings
        self.ear.pause_ms = self.config.realtime.pause_ms if settings.speculative else None
        self._send("session.updated", session=self._session_object())

    async def _create_item(self, event: dict[str, Any]) -> None:
        item = expect_object(event.get("item"), "item")
        kind = item.get("type", "message")
        entry: dict[str, Any] = {"id": item.get("id") or new_id("item"), "type": kind}
        if kind == "message":
            role = item.get("role")
            if role not in ("user", "assistant", "system"):
                raise RealtimeError(f"item.role must be user, assistant or system, got {role!r}", param="item.role")
            entry.update(role=role, text=await self._item_text(item.get("content")))
        elif kind == "function_call_output":
            if not isinstance(item.get("call_id"), str) or not isinstance(item.get("output"), str):
                raise RealtimeError("a function_call_output item needs call_id and output (strings)",
                                    "invalid_type", "item.call_id")
            if not self.conversation.has_call(item["call_id"]):
                raise RealtimeError(f"item.call_id {item['call_id']!r} names no function call of this conversation",
                                    param="item.call_id")
            entry.update(call_id=item["call_id"], output=item["output"])
        else:
            raise RealtimeError(f"item.type {kind!r} is not supported: use message or function_call_output",
                                param="item.type")
        previous = self.conversation.last_id
        self.conversation.add(entry)
        shown = item_object(entry)
        self._send(self.settings.names.item_added, item=shown, previous_item_id=previous)
        self._send("conversation.item.done", item=shown, previous_item_id=previous)

    async def _item_text(self, content: object) -> str:
        if not isinstance(content, list) or not content:
            raise RealtimeError("item.content must be a non-empty list of parts", "invalid_type", "item.content")
        texts = []
        for i, part in enumerate(content):
            part = expect_object(part, f"item.content[{i}]")
            kind = part.get("type")
            if kind in ("input_text", "text", "output_text") and isinstance(part.get("text"), str):
                texts.append(part["text"])
            elif kind == "input_audio":
                texts.append(await self._transcribe_part(part, f"item.content[{i}].audio"))
            else:
                raise RealtimeError(f"item.content[{i}]: a part of type {kind!r} with its text or audio is not "
                                    "supported: use input_text or input_audio", param=f"item.content[{i}].type")
        return " ".join(t.strip() for t in texts if t.strip())

    async def _transcribe_part(self, part: dict[str, Any], param: str) -> str:
        pcm = append_audio(part)
        try:
            resampler = PcmResampler(self.ear.settings.rate)
            audio = np.concatenate([resampler.push(pcm), resampler.flush()])
        except AudioError as exc:
            raise RealtimeError(f"{param}: {exc}", "invalid_audio", param) from None
        transcript = await self._stt.transcribe(audio, self.ear.settings.options(), session=self.id)
        return transcript.text

    def _truncate(self, event: dict[str, Any]) -> None:
        self.conversation.truncate(event.get("item_id"), event.get("audio_end_ms"))
        self._send("conversation.item.truncated", item_id=event["item_id"],
                   content_index=event.get("content_index", 0), audio_end_ms=event["audio_end_ms"])

    def _create_response(self, event: dict[str, Any]) -> None:
        if (self.reply is not None and not self.reply.over) or self._reply_when_transcribed:
            raise RealtimeError("Conversation already has an active response in progress"
                                + (f": {self.reply.id}" if self.reply is not None and not self.reply.over else ""),
                                "conversation_already_has_active_response")
        self._drop_speculation()
        if self._untranscribed:  # what the person just said must be in the prompt: answer once it is
            self._reply_when_transcribed = True
            return
        self._start_reply(held=False)

    def _cancel_response(self, event: dict[str, Any]) -> None:
        if self.reply is None or self.reply.over:
            raise RealtimeError("Cancellation failed: no active response found", "response_cancel_not_active")
        self.reply.cancel()

    _handlers: ClassVar[dict[str, Callable[[AgentSession, dict[str, Any]], Awaitable[None] | None]]] = {
        "session.update": _update,
        "conversation.item.create": _create_item,
        "conversation.item.truncate": _truncate,
        "response.create": _create_response,
        "response.cancel": _cancel_response,
    }

    # -- what the transcription session hears --

    def _heard(self, event: dict[str, Any]) -> None:
        kind = event["type"]
        if kind in ("transcription_session.created", "transcription_session.updated", "session.updated"):
            return  # this session answers for itself
        if kind == "error":
            self._ear_errors += 1
        self._emit(event)
        if kind == "input_audio_buffer.speech_started":
            self._barge_in()
        elif kind == "input_audio_buffer.committed":
            self._untranscribed.add(event["item_id"])
            item = {"id": event["item_id"], "type": "message", "role": "user", "status": "completed",
                    "content": [{"type": "input_audio", "transcript": None}]}
            self._send(self.settings.names.item_added, item=item, previous_item_id=event.get("previous_item_id"))

    def paused(self, item: Utterance, sample: int, early: asyncio.Task[Transcript]) -> None:
        if self.ear.settings.turn_detection is None:
            return
        if self._end_of_turn is not None and self.settings.smart_turn:
            self._spawn(self._judge(item))
        if not (self.settings.speculative and self.settings.create_response):
            return
        if self.reply is not None and not self.reply.over:
            return  # the person talks over a reply: barge-in decides, not a new speculation
        self._drop_speculation()
        speculation = _Speculation(item, paused_at=time.perf_counter())
        speculation.task = self._spawn(self._speculate(speculation, sample, early))
        self._speculation = speculation

    def resumed(self, item: Utterance) -> None:
        if self._speculation is not None and self._speculation.item is item:
            self._drop_speculation()

    def transcribed(self, item: Utterance, transcript: Transcript | None) -> None:
        self._untranscribed.discard(item.id)
        heard = transcript.text.strip() if transcript is not None else ""
        if heard:
            self.conversation.add({"id": item.id, "type": "message", "role": "user", "text": heard})
        if self._reply_when_transcribed and not self._untranscribed:
            self._reply_when_transcribed = False
            self._drop_speculation()
            self._start_reply(held=False)  # the client's response.create, waiting for this transcript
            return
        if not heard or not (self.settings.create_response and self.ear.settings.turn_detection):
            self._drop_speculation()
            return
        assert transcript is not None
        speculation = self._speculation
        if speculation is not None and speculation.item is not item:
            speculation = None  # it speculates on a later utterance: not this one's business
        else:
            self._speculation = None
        if speculation is not None and speculation.reply is not None and _same_words(speculation.text,
                                                                                      transcript.text):
            self._replace_reply(speculation.reply)
            speculation.reply.release()
            return
        if speculation is not None:
            self._throw_away(speculation)
        self._start_reply(held=False)

    async def _speculate(self, speculation: _Speculation, sample: int, early: asyncio.Task[Transcript]) -> None:
        """Think on the best text there is: the last partial if it heard the speech out, else the early pass."""
        item = speculation.item
        if item.hypothesis.strip() and item.hypothesis_end >= sample - _FRESH_SAMPLES:
            text = item.hypothesis
        else:
            text = (await asyncio.shield(early)).text  # the commit awaits the same pass
        if self._speculation is not speculation or not text.strip():
            return
        speculation.text = text.strip()
        user = {"id": speculation.item.id, "type": "message", "role": "user", "text": speculation.text}
        speculation.reply = self._new_reply(self.conversation.messages(self.settings.instructions, user), held=True,
                                            possible_end=speculation.paused_at)

    async def _judge(self, item: Utterance) -> None:
        """The semantic model's view of the turn so far: sure enough, it ends the turn now."""
        assert self._end_of_turn is not None
        audio = self.ear.utterance_audio()
        if audio is None:
            return
        probability = await self._end_of_turn(audio)
        # Only if the person has not spoken again since (the same pause still holds).
        if probability >= self.config.end_of_turn_threshold and self.ear.paused_item() is item:
            self.ear.end_turn()

    def _drop_speculation(self) -> None:
        speculation, self._speculation = self._speculation, None
        if speculation is not None:
            self._throw_away(speculation)

    def _throw_away(self, speculation: _Speculation) -> None:
        if speculation.task is not None:
            speculation.task.cancel()
        if speculation.reply is not None:
            self.wasted += 1
            speculation.reply.cancel()

    # -- replies --

    def _start_reply(self, held: bool) -> Reply:
        reply = self._new_reply(self.conversation.messages(self.settings.instructions), held)
        self._replace_reply(reply)
        return reply

    def _new_reply(self, messages: list[dict[str, Any]], held: bool, possible_end: float | None = None) -> Reply:
        settings = self.settings
        spec = ReplySpec(messages=messages, voice=settings.voice, tools=list(settings.tools), names=settings.names,
                         first_sentences=settings.first_sentences if held else 0, held=held,
                         max_speech_tokens=settings.max_speech_tokens, discarded=self.wasted)
        reply = Reply(spec, self._thinker, self._tts, self._send_event, self._admit)
        reply.times.possible_end = possible_end
        reply.done.add_done_callback(lambda _: self._replied(reply))
        reply.start()
        return reply

    def _replace_reply(self, reply: Reply) -> None:
        if self.reply is not None and self.reply is not reply:
            self.reply.cancel()
        self.reply = reply

    def _replied(self, reply: Reply) -> None:
        """A reply is over: a heard one joins the conversation, cut to what was played."""
        if reply.held:
            return
        if reply.status == "failed":  # response.done says it too; an error event names it for simple clients
            self.report(RealtimeError(f"response {reply.id} failed: {reply.error}", "response_failed",
                                      kind="server_error"))
        heard = reply.played_ms() if reply.status == "cancelled" else reply.audio_ms
        self.conversation.add_reply(reply.item_id, reply.text, reply.audio_ms, heard, reply.calls)

    def _barge_in(self) -> None:
        """Speech while the client still plays a reply: stop it, and keep only what was heard."""
        reply = self.reply
        if reply is None or reply.held or not self.settings.interrupt_response:
            return
        if not reply.over:
            reply.cancel()  # its history entry is cut when it is over
        else:  # all made, perhaps not all played yet
            self.conversation.cut(reply.item_id, reply.played_ms())

    # -- plumbing --

    def _session_object(self) -> dict[str, Any]:
        shape = "beta" if self.settings.names is BETA else "ga"
        return session_object(self.settings, heard_object(self.ear.settings, self.id, shape), self.id,
                              self.config.model)

    def _send(self, kind: str, **fields: Any) -> None:
        self._emit({"type": kind, "event_id": new_id("event"), **fields})

    def _send_event(self, event: dict[str, Any]) -> None:
        self._emit(event)

    def _spawn(self, work: Awaitable[None]) -> asyncio.Task[None]:
        task = asyncio.ensure_future(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task


def _same_words(a: str, b: str) -> bool:
    """Whether two transcripts say the same, case and punctuation aside."""
    return _WORDS.findall(a.lower()) == _WORDS.findall(b.lower())


def _drop(event: dict[str, Any]) -> None:
    """``emit`` once the session is closed."""
