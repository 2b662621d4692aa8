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

The session's language is its transcription's (``audio.input.transcription.language``), or, where the
client named none, the first language Whisper hears the caller speak that the model has voices in and that
is not English (English is what a session is taken to be in until then). It is pinned for the rest of the
session's transcription, asked of the chat model (lyre.agent.think.in_language), and chosen in the voice: a
voice of another language gives way to the model's first voice of the session's (a voice of the wrong
language mispronounces every word), which ``session.updated`` shows and says why under ``lyre.refused``.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, replace
from typing import Any, Literal

import numpy as np

from lyre.agent.client_events import ClientEvents
from lyre.agent.conversation import LAST, Conversation, item_object
from lyre.agent.end_of_turn import EndOfTurn, confirm_end, threshold_for
from lyre.agent.events import BETA, GA, AgentSettings, new_id, session_object
from lyre.agent.replies import Replies
from lyre.agent.reply import Reply, ReplySpec
from lyre.agent.response_request import ResponseRequest
from lyre.agent.session_update import SessionUpdate, fit_voice
from lyre.agent.speculation import Speculator
from lyre.agent.think import Thinker, ThinkOptions, in_language
from lyre.stt import PcmResampler, RealtimeConfig, RealtimeError, RealtimeSession, Transcriber, WordAligner, error_event
from lyre.stt.realtime_events import session_object as heard_object
from lyre.stt.utterances import Utterance
from lyre.stt.whisper import Transcript
from lyre.tts import Synthesizer, Voices
from lyre.tts.checkpoints import primary_language

__all__ = ["AgentConfig", "AgentSession"]

log = logging.getLogger("lyre.agent")


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
                 aligner: WordAligner | None = None, beta: bool = False) -> None:
        """``end_of_turn``: a semantic end-of-turn model; ``admit``: the server's admission of a speech stream
        (each reply holds one while it thinks and speaks; refused, the reply fails saying why); ``aligner``:
        what places a cut reply's words in its audio (default: the transcriber's Whisper); ``beta``: the client
        speaks the beta protocol (it said so with ``OpenAI-Beta: realtime=v1``), so the session opens in it."""
        self.id = new_id("sess")
        self.config = config
        self.conversation = Conversation()
        self._stt = transcriber
        self._tts = tts
        self._voices: Voices | None = getattr(tts, "voices", None)  # (a stand-in pipeline may list none)
        self.settings = AgentSettings(names=BETA if beta else GA)
        if self._voices is not None and not self._speaks(self.settings.voice):  # a model without the default
            self.settings = replace(self.settings, voice=self._voices.default)
        self._thinker = thinker
        self._emit = emit
        self._end_of_turn = end_of_turn
        self._admit = admit
        self.conversation_id = new_id("conv")
        self._untranscribed: set[str] = set()  # committed utterances whose final pass is still running
        self._reply_when_transcribed: ResponseRequest | None = None  # a response.create waits for them
        self._side: set[Reply] = set()  # out-of-band replies running
        self._idle: asyncio.TimerHandle | None = None  # idle_timeout_ms after a reply has played out
        self._closed = False
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
    def language(self) -> str | None:
        """The session's language: its transcription's, as the client set it or as first heard (None: not
        named, and no other language than English heard yet)."""
        return self.ear.settings.language

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
        self._closed = True
        self._quiet_again()
        self._speculator.drop()
        replies = [r for r in (self.reply, *self._side) if r is not None]
        for reply in replies:
            reply.cancel()
        await self.ear.close()
        for task in list(self._tasks):
            task.cancel()
        pending = [t for t in self._tasks] + [reply.done for reply in replies]
        if pending:
            await asyncio.wait(pending, timeout=5.0)

    # -- what client events ask (lyre.agent.client_events reads and checks them) --

    def listen(self, event: dict[str, Any]) -> Awaitable[None] | None:
        return self.ear.handle(event)

    async def update(self, update: SessionUpdate, heard: dict[str, Any] | None,
                     client_event_id: str | None = None) -> None:
        """New settings, field by field: the transcription session takes its part first (naming in error
        events what of it it refuses), then the rest; each field in error is named and left as it was, and
        what the session goes on without is logged and told in ``session.updated``."""
        settings = update.settings
        if settings.voice != self.settings.voice:
            try:
                self.check_voice(settings.voice, "session.voice" if settings.names is BETA
                                 else "session.audio.output.voice")
            except RealtimeError as exc:
                update.errors.append(exc)
                settings = replace(settings, voice=self.settings.voice)
        language = self.language
        if heard is not None:
            await self.ear.receive(json.dumps(heard))
        if (settings.voice, self.language) != (self.settings.voice, language):
            settings = self._fit_voice(settings, update.refused)
        for error in update.errors:
            self.report(error, client_event_id)
        for refusal in update.refused:
            log.info("session %s goes on without %s: %s", self.id, refusal.param, refusal)
        self.settings = settings
        self.ear.pause_ms = self.config.realtime.pause_ms if settings.speculative else None
        self._send("session.updated", session=self._session_object(update.refused))

    def _speaks(self, voice: str | None) -> bool:
        try:
            self._tts.check_voice(voice)
        except ValueError:
            return False
        return True

    def _fit_voice(self, settings: AgentSettings, notes: list[RealtimeError]) -> AgentSettings:
        """`fit_voice` to the session's language, its note (if any) added to ``notes``."""
        settings, note = fit_voice(settings, self._voices, self.language)
        notes.extend([note] if note is not None else [])
        return settings

    def _adopt_language(self, transcript: Transcript) -> None:
        """A session whose language was never named takes the first other language than English it hears in,
        where the model has voices in it: the transcription is pinned to it and the voice follows, told in a
        ``session.updated``. A speculative reply started before goes (it thought in the old language)."""
        heard = primary_language(transcript.language)
        if (self.language is not None or heard in (None, "en") or self._voices is None
                or heard not in self._voices.spoken_languages()):
            return
        self.ear.settings = replace(self.ear.settings, language=heard)
        notes: list[RealtimeError] = []
        self.settings = self._fit_voice(self.settings, notes)
        log.info("session %s heard %s: it goes on in it, voice %s", self.id, heard, self.settings.voice)
        self._speculator.drop()
        self._send("session.updated", session=self._session_object(notes))

    def check_voice(self, voice: str | None, param: str) -> None:
        try:
            self._tts.check_voice(voice)
        except ValueError as exc:
            raise RealtimeError(f"{param}: {exc}", "invalid_value", param) from None

    async def transcribe(self, pcm: bytes) -> str:
        resampler = PcmResampler(self.ear.settings.rate)
        pcm = self.ear.settings.pcm(pcm)
        audio = np.concatenate([resampler.push(pcm), resampler.flush()])
        transcript = await self._stt.transcribe(audio, self.ear.settings.options(), session=self.id)
        return transcript.text

    def add_item(self, entry: dict[str, Any], after: object = LAST) -> None:
        previous = self.conversation.add(entry, after)
        shown = item_object(entry, self.settings.names)
        self._send(self.settings.names.item_added, item=shown, previous_item_id=previous)
        self._send("conversation.item.done", item=shown, previous_item_id=previous)

    def retrieve_item(self, item_id: object) -> None:
        if (item := self.conversation.find(item_id)) is None:
            raise RealtimeError(f"item_id {item_id!r} names no item of this conversation",
                                "item_retrieve_invalid_item_id", "item_id")
        self._send("conversation.item.retrieved", item=item_object(item, self.settings.names))

    def delete_item(self, item_id: object) -> None:
        if not self.conversation.remove(item_id):
            raise RealtimeError(f"item_id {item_id!r} names no item of this conversation",
                                "item_delete_invalid_item_id", "item_id")
        self._send("conversation.item.deleted", item_id=item_id)

    def truncate(self, item_id: object, content_index: object, audio_end_ms: object) -> None:
        self._replies.truncate(item_id, content_index, audio_end_ms)

    def respond(self, request: ResponseRequest | None = None, items: list[dict[str, Any]] | None = None) -> None:
        """A response, as the session's settings make it or as ``request`` asks; ``items``: an out-of-band
        one's own input."""
        request = request or ResponseRequest.of(self.settings)
        if not request.in_conversation:  # out of band: beside whatever the conversation is doing
            messages = self.conversation.messages(in_language(request.instructions, self.language), items=items)
            reply = self._new_reply(messages, held=False, request=request)
            self._side.add(reply)
            reply.done.add_done_callback(lambda _: self._side.discard(reply))
            reply.start()
            return
        if (self.reply is not None and not self.reply.over) or self._reply_when_transcribed:
            raise RealtimeError("Conversation already has an active response in progress"
                                + (f": {self.reply.id}" if self.reply is not None and not self.reply.over else ""),
                                "conversation_already_has_active_response")
        self._speculator.drop()
        if self._untranscribed:  # what the person just said must be in the prompt: answer once it is
            self._reply_when_transcribed = request
            return
        self._start_reply(held=False, request=request)

    def hush(self) -> None:
        """Stop replying now (the listener cannot hear for a while): the reply under way is cancelled, its
        history cut to what was played, and a speculative one is dropped."""
        self._speculator.drop()
        if self.reply is not None:
            self.reply.cancel()

    def cancel_response(self, response_id: object = None) -> None:
        """``response.cancel``: the reply the client hears, or the one ``response_id`` names (an out-of-band
        one too)."""
        running = [r for r in (self.reply, *self._side) if r is not None and not r.over and not r.held]
        reply = next((r for r in running if r.id == response_id), None) if response_id else (
            self.reply if self.reply in running else None)
        if reply is None:
            raise RealtimeError("Cancellation failed: no active response found"
                                + (f" with id {response_id!r}" if response_id else ""), "response_cancel_not_active")
        reply.cancel("client_cancelled")

    # -- what the transcription session hears --

    def _heard(self, event: dict[str, Any]) -> None:
        kind = event["type"]
        if kind in ("transcription_session.created", "transcription_session.updated", "session.updated"):
            return  # this session answers for itself
        if kind in ("input_audio_buffer.speech_started", "input_audio_buffer.committed"):
            self._quiet_again()
        if kind == "input_audio_buffer.committed":  # it joins the conversation here, after whatever is last
            entry = {"id": event["item_id"], "type": "message", "role": "user", "text": None, "audio": True}
            event["previous_item_id"] = self.conversation.add(entry)
        self._emit(event)
        if kind == "input_audio_buffer.speech_started" and self.settings.interrupt_response:
            self._replies.barge_in()
        elif kind == "input_audio_buffer.committed":
            self._untranscribed.add(event["item_id"])
            self._send(self.settings.names.item_added, item=item_object(entry, self.settings.names),
                       previous_item_id=event["previous_item_id"])

    def paused(self, item: Utterance, sample: int, early: asyncio.Task[Transcript]) -> None:
        if self.ear.settings.turn_detection is None:
            return
        if self._end_of_turn is not None and self.settings.smart_turn:
            vad = self.ear.settings.turn_detection
            threshold = threshold_for(vad.eagerness, self.config.end_of_turn_threshold)
            self._spawn(confirm_end(self.ear, item, self._end_of_turn, threshold))
        if not (self.settings.speculative and self.settings.create_response):
            return
        if self.reply is not None and not self.reply.over:
            return  # the person talks over a reply: barge-in decides, not a new speculation
        self._speculator.start(item, sample, early)

    def resumed(self, item: Utterance) -> None:
        self._speculator.resumed(item)

    def transcribed(self, item: Utterance, transcript: Transcript | None) -> None:
        committed = item.id in self._untranscribed
        self._untranscribed.discard(item.id)
        heard = transcript.text.strip() if transcript is not None else ""
        if transcript is not None and heard:
            self._adopt_language(transcript)
        entry = self.conversation.find(item.id)
        if entry is None and not committed and heard:  # a turn never committed to the client: it joins now
            entry = {"id": item.id, "type": "message", "role": "user", "text": None, "audio": True}
            self.conversation.add(entry)
        if entry is not None:  # (a committed one the client deleted meanwhile stays deleted)
            entry["text"] = heard
            self._send("conversation.item.done", item=item_object(entry, self.settings.names))
        if (request := self._reply_when_transcribed) is not None and not self._untranscribed:
            self._reply_when_transcribed = None
            self._speculator.drop()
            self._start_reply(held=False, request=request)  # the client's response.create, waiting for this
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

    def _start_reply(self, held: bool, request: ResponseRequest | None = None) -> Reply:
        self._quiet_again()
        request = request or ResponseRequest.of(self.settings)
        reply = self._new_reply(self.conversation.messages(in_language(request.instructions, self.language)), held,
                                request=request)
        self._replies.replace(reply)
        self._replies.start(reply)
        return reply

    def _think_ahead(self, user: dict[str, Any], possible_end: float) -> Reply:
        """A held reply to ``user``, the words so far of a turn that may have ended at ``possible_end``."""
        reply = self._new_reply(self.conversation.messages(in_language(self.settings.instructions, self.language),
                                                           user), held=True,
                                possible_end=possible_end)
        self._replies.start(reply)
        return reply

    def _new_reply(self, messages: list[dict[str, Any]], held: bool, possible_end: float | None = None,
                   request: ResponseRequest | None = None) -> Reply:
        settings = self.settings
        request = request or ResponseRequest.of(settings)
        spec = ReplySpec(messages=messages, voice=request.voice, names=settings.names,
                         tools=list(request.tools) if self.supports_tools else [],
                         first_sentences=settings.first_sentences if held else 0, held=held,
                         max_speech_tokens=settings.max_speech_tokens, discarded=self.wasted,
                         language=self.ear.settings.language, modality=request.modality,
                         output_encoding=settings.output_encoding, speed=settings.speed,
                         think=ThinkOptions(request.max_output_tokens, request.tool_choice), metadata=request.metadata,
                         in_conversation=request.in_conversation, conversation_id=self.conversation_id,
                         lyre_events=settings.lyre_events)
        reply = Reply(spec, self._thinker, self._tts, lambda event: self._reply_out(reply, event), self._admit)
        reply.times.possible_end = possible_end
        return reply

    def _reply_out(self, reply: Reply, event: dict[str, Any]) -> None:
        """One of ``reply``'s events on its way to the client: what it adds joins the conversation there, and
        once its response.done is out, the reply takes its place in the history."""
        if reply.spec.in_conversation:
            kind = event["type"]
            if kind == reply.spec.names.item_added:
                item = event["item"]
                event["previous_item_id"] = (self.conversation.open_reply(item["id"], reply.spec.modality)
                                             if item["type"] == "message" else
                                             self.conversation.add_call(reply.call(item["id"])))
            elif kind == "response.done" and not self._closed:  # (after the close: no history, no work)
                self._replies.ended(reply)
                self._wait_for_the_user(reply)
        self._emit_event(event)

    # -- idle_timeout_ms --

    def _wait_for_the_user(self, reply: Reply) -> None:
        """A reply is over: with server_vad's ``idle_timeout_ms``, silence that long after its audio has played
        out prompts another."""
        idle = self.settings.idle_timeout_ms
        vad = self.ear.settings.turn_detection
        if idle is None or vad is None or vad.eagerness is not None:
            return
        self._quiet_again()
        still_playing_s = max(0.0, reply.audio_ms - reply.played_ms()) / 1000
        self._idle = asyncio.get_running_loop().call_later(still_playing_s + idle / 1000, self._timed_out, idle)

    def _quiet_again(self) -> None:
        """The user spoke, or a reply started: no idle timeout runs."""
        if self._idle is not None:
            self._idle.cancel()
            self._idle = None

    def _timed_out(self, idle_ms: int) -> None:
        """Nothing heard for ``idle_ms`` after a reply: as OpenAI's, the buffer is committed as an empty turn
        (``input_audio_buffer.timeout_triggered``) and, with ``create_response``, a reply prompts the user."""
        self._idle = None
        if self.ear.utterance_audio() is not None or (self.reply is not None and not self.reply.over):
            return  # someone is speaking
        end = self.ear.position_ms()
        entry = {"id": new_id("item"), "type": "message", "role": "user", "text": "", "audio": True}
        self._send("input_audio_buffer.timeout_triggered", audio_start_ms=max(0, end - idle_ms), audio_end_ms=end,
                   item_id=entry["id"])
        previous = self.conversation.add(entry)
        self._send("input_audio_buffer.committed", item_id=entry["id"], previous_item_id=previous)
        self._send(self.settings.names.item_added, item=item_object(entry, self.settings.names),
                   previous_item_id=previous)
        self._send("conversation.item.done", item=item_object(entry, self.settings.names), previous_item_id=previous)
        if self.settings.create_response:
            request = ResponseRequest.of(self.settings)
            note = f"(The user has said nothing for {idle_ms / 1000:g} seconds since your last reply.)"
            self._start_reply(held=False, request=replace(request, instructions=f"{request.instructions}\n\n{note}"))

    # -- plumbing --

    def _session_object(self, refused: list[RealtimeError] | None = None) -> dict[str, Any]:
        shape: Literal["beta", "ga"] = "beta" if self.settings.names is BETA else "ga"
        return session_object(self.settings, heard_object(self.ear.settings, self.id, shape), self.id,
                              self.config.model, refused)

    def _send(self, kind: str, **fields: Any) -> None:
        self._emit_event({"type": kind, "event_id": new_id("event"), **fields})

    def _emit_event(self, event: dict[str, Any]) -> None:
        if event["type"].startswith("lyre.") and not self.settings.lyre_events:
            return  # lyre's own events go only to a session that asked for them
        self._emit(event)  # late-bound: after close, emit is _drop

    def _spawn(self, work: Awaitable[None]) -> asyncio.Task[None]:
        task = asyncio.ensure_future(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task


def _drop(event: dict[str, Any]) -> None:
    """``emit`` once the session is closed."""
