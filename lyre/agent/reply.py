"""One assistant reply: the think step's text spoken as it comes, as Realtime response events.

    reply = Reply(ReplySpec(...), thinker, tts, emit)
    reply.start()               # a task: think, speak, emit
    reply.release()             # a held (speculative) reply: its events go out now, and from now on
    reply.cancel(reason)        # stops thinking and speaking; the engine slots are freed within a step
    await reply.done            # the reply's end, whichever it was

A held reply (started speculatively, before the turn is confirmed) emits
nothing until `release` (lyre.agent.response_events). Speculative replies send
text to speech only once ``first_sentences`` sentences are written (or the
reply ends), so a reply cancelled early costs little speech work. Text goes to
the client as the audio transcript as it goes to speech; a written reply
(``modality`` "text") sends it as output text and speaks nothing. With tools,
each function call's item is added as its arguments begin to stream.
``response.done`` carries the tokens used: the think step's text in and out,
and the speech engine's audio tokens out.
"""

from __future__ import annotations

import asyncio
import base64
import logging
import time
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager, nullcontext
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from lyre.agent.audio_out import AudioOut
from lyre.agent.calls import ToolCalls
from lyre.agent.events import EventNames, new_id
from lyre.agent.gate import SentenceGate
from lyre.agent.heard import heard_words
from lyre.agent.response_events import ResponseEvents
from lyre.agent.think import ThinkError, Thinker, ThinkOptions, ThinkUsage, ToolCallDelta
from lyre.stt import AlignedWord, WordAligner
from lyre.stt.realtime_events import format_object
from lyre.orpheus import FRAME_TOKENS
from lyre.tts import SpeechOptions, Synthesizer, TextOptions

__all__ = ["Reply", "ReplySpec", "ReplyTimes"]

log = logging.getLogger("lyre.agent")

_SAMPLE_RATE = 24_000


@dataclass(frozen=True)
class ReplySpec:
    """What one reply needs: the messages to answer and how to speak."""

    messages: list[dict[str, Any]]
    voice: str | None
    tools: list[dict[str, Any]]
    names: EventNames
    first_sentences: int = 0  # 0: speak from the first sentence (no gate)
    held: bool = False
    max_speech_tokens: int | None = None  # per speech segment; None: the pipeline's default
    discarded: int = 0  # the session's speculative replies thrown away before this one
    language: str | None = None  # how the reply's text is read (the language the caller is heard in; None: English)
    modality: str = "audio"  # "audio": spoken, with its transcript; "text": written only
    output_encoding: str = "pcm16"  # the audio deltas': pcm16 at 24 kHz, or G.711 (pcmu, pcma) at 8 kHz
    speed: float = 1.0  # how fast the audio plays (a time stretch, pitch kept); its times are as played
    think: ThinkOptions = ThinkOptions()
    metadata: dict[str, str] | None = None  # the client's, echoed on response.created and .done
    in_conversation: bool = True  # False: out of band (conversation "none"); nothing of it joins the history
    conversation_id: str | None = None  # the session's conversation, as response objects name it
    lyre_events: bool = False  # lyre's own events (segment cuts) and fields (timing) go out too


@dataclass
class ReplyTimes:
    """perf_counter() marks of one reply, for the timeline and the benchmark."""

    started: float = field(default_factory=time.perf_counter)
    possible_end: float | None = None  # a speculative reply's possible end of turn
    first_token: float | None = None
    to_speech: float | None = None  # text first sent to speech
    first_audio: float | None = None  # first audio made (held or not)
    released: float | None = None

    def report(self) -> dict[str, float | None]:
        """Milliseconds from the possible end of turn (a speculative reply's), else from the reply's start."""
        origin = self.possible_end or self.started

        def ms(t: float | None) -> float | None:
            return None if t is None else round(1000 * (t - origin), 1)
        return {"started_ms": ms(self.started), "llm_first_token_ms": ms(self.first_token), "tts_start_ms": ms(self.to_speech),
                "first_audio_ms": ms(self.first_audio), "released_ms": ms(self.released)}


class Reply:
    """One response; see the module docstring."""

    def __init__(self, spec: ReplySpec, thinker: Thinker, tts: Synthesizer, emit: Callable[[dict[str, Any]], None],
                 admit: Callable[[], AbstractAsyncContextManager[Any]] | None = None) -> None:
        """``admit``: the server's admission of one speech stream, held while the reply speaks."""
        self.id = new_id("resp")
        self._admit = admit or nullcontext
        self.item_id = new_id("item")
        self.spec = spec
        self._thinker = thinker
        self._tts = tts
        self.text = ""  # the reply's text so far (what was sent to speech)
        self.calls: list[dict[str, Any]] = []  # function_call items of the session's tools, once over
        self.audio_samples = 0
        self._cuts_told = 0  # the speech stream's cut segments told the client so far
        self.status = "in_progress"
        self.cancel_reason = "turn_detected"
        self.error: str | None = None
        self.usage = ThinkUsage(0, 0)  # the think step's tokens
        self.audio_tokens = 0  # the speech engine's
        self.times = ReplyTimes()
        self._events = ResponseEvents(self.id, self.item_id, spec.names, emit, spec.held, spec.modality,
                                      spec.in_conversation)
        self._gate = SentenceGate(spec.first_sentences)
        self._speaking: Any = None  # the speech stream, while text may go to it
        self._stream: Any = None  # the speech stream, from its start (its segments tell which text is where)
        self._pcm: list[np.ndarray] = []  # the reply's audio, kept to find which words were heard
        self._calls = ToolCalls(spec.tools)
        self._task: asyncio.Task[None] | None = None
        self.done: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    # -- control --

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name=f"lyre-reply-{self.id}")
        # Whatever ends the task ends the reply: one cancelled before its first step never runs `_run` at all.
        self._task.add_done_callback(self._ended)

    def release(self) -> None:
        """Let the held events out, in order, and send the rest as they come."""
        if not self.held:
            return
        self.times.released = time.perf_counter()
        self._events.release()
        # The turn is confirmed: the reply will be heard, so the text held for the first sentences goes to
        # speech now rather than when they are complete.
        if self._speaking is not None and (text := self._gate.open()):
            self._to_speech(self._speaking, text)

    def cancel(self, reason: str = "turn_detected") -> None:
        """Stop the reply (a no-op once it is over); a released one ends with response.done, cancelled for
        ``reason`` (OpenAI's: turn_detected, client_cancelled)."""
        if self._task is not None and not self._task.done():
            self.cancel_reason = reason
            self._task.cancel()

    @property
    def held(self) -> bool:
        """Its events are kept back: a speculative reply not yet released."""
        return self._events.held

    @property
    def over(self) -> bool:
        return self.done.done()

    @property
    def audio_ms(self) -> float:
        """How long the reply's audio so far plays (at its speed)."""
        return 1000 * self.audio_samples / _SAMPLE_RATE / self.spec.speed

    def call(self, item_id: str) -> dict[str, Any]:
        """The function call whose item is ``item_id``, as it stands (its arguments may still be streaming)."""
        return self._calls.by_id(item_id)

    def played_ms(self) -> float:
        """How much of the audio the client can have played by now, at real time from its first delta."""
        if (out_at := self._events.audio_out_at) is None:
            return 0.0
        return min(self.audio_ms, 1000 * (time.perf_counter() - out_at))

    async def heard(self, heard_ms: float, aligner: WordAligner) -> tuple[str, list[AlignedWord]]:
        """What the listener heard in the reply's first ``heard_ms``, by its words (lyre.agent.heard)."""
        segments = self._stream.segments_so_far() if self._stream is not None else []
        made_ms = heard_ms * self.spec.speed  # the words are placed in the audio as made
        text, words = await heard_words(segments, self._pcm, _SAMPLE_RATE, made_ms, aligner, ("truncate", self.id))
        return text, [AlignedWord(w.text, w.start / self.spec.speed, w.end / self.spec.speed) for w in words]

    # -- the work --

    async def _run(self) -> None:
        self._events.open(self._object())
        try:
            if self.spec.modality == "audio":
                async with self._admit():
                    await self._speak()
            else:
                await self._write()
            self.status = "completed"
        except asyncio.CancelledError:
            self.status = "cancelled"
        except ThinkError as exc:
            self.status, self.error = "failed", str(exc)
        except Exception as exc:  # speech failed (a bad voice, the engine full): the reply ends, the session goes on
            self.status, self.error = "failed", f"{type(exc).__name__}: {exc}"
        self._finish()

    def _ended(self, task: asyncio.Task[None]) -> None:
        """The task is over: if `_run` did not finish the reply (cancelled before it ran, or a bug), finish it."""
        if self.over:
            return
        try:
            if task.cancelled():
                self.status = "cancelled"
            else:
                exc = task.exception()
                log.error("reply %s ended without finishing", self.id, exc_info=exc)
                self.status, self.error = "failed", f"{type(exc).__name__}: {exc}" if exc else "ended early"
            if not self._events.opened:  # the client asked for it: it opens and closes like any other
                self._events.open(self._object())
            self._finish()
        finally:
            if not self.done.done():  # whatever happened above, the session must not wait for ever
                self.done.set_result(None)

    async def _speak(self) -> None:
        gate = self._gate
        stream = self._open_speech()
        self._speaking = self._stream = stream
        audio = asyncio.create_task(self._audio(stream), name=f"lyre-reply-audio-{self.id}")
        thinking = self._think()

        def spoken(piece: str) -> None:
            if (ready := gate.push(piece)):
                self._to_speech(stream, ready)
        try:
            await self._follow(thinking, spoken)
            if (rest := gate.open()):
                self._to_speech(stream, rest)
            self._speaking = None
            stream.end()
            await audio
        finally:
            self._speaking = None
            await thinking.aclose()
            if not audio.done():
                audio.cancel()
                await asyncio.wait({audio})
            await stream.aclose()  # aborts its engine requests if speech stopped early
            self.audio_tokens = stream.frames * FRAME_TOKENS

    async def _write(self) -> None:
        """A written reply: the think step's text as output text, and its calls."""
        thinking = self._think()

        def written(piece: str) -> None:
            self.text += piece
            self._events.send(self._events.text_delta, **self._events.where, delta=piece)
        try:
            await self._follow(thinking, written)
        finally:
            await thinking.aclose()

    async def _follow(self, thinking: Any, text: Callable[[str], None]) -> None:
        """The think step's answer: its text to ``text``, its calls streamed, its usage kept."""
        async for piece in thinking:
            if isinstance(piece, ThinkUsage):
                self.usage = piece
            elif isinstance(piece, ToolCallDelta):
                self._call_delta(piece)
            else:
                if self.times.first_token is None:
                    self.times.first_token = time.perf_counter()
                text(piece)

    def _open_speech(self) -> Any:
        options = None if self.spec.max_speech_tokens is None else SpeechOptions(max_tokens=self.spec.max_speech_tokens)
        return self._tts.open(self.spec.voice, options, trim=True, streamed=True,
                              text=TextOptions(language=self.spec.language))

    def _think(self) -> Any:
        return self._thinker.reply(self.spec.messages, self.spec.tools, self.spec.think)

    def _to_speech(self, stream: Any, text: str) -> None:
        if self.times.to_speech is None:
            self.times.to_speech = time.perf_counter()
        stream.push(text)
        self.text += text
        self._events.send(self._events.text_delta, **self._events.where, delta=text)

    async def _audio(self, stream: Any) -> None:
        out = AudioOut(self.spec.output_encoding, self.spec.speed)
        async for chunk in stream:
            if self.times.first_audio is None:
                self.times.first_audio = time.perf_counter()
            self._pcm.append(chunk)
            self.audio_samples += len(chunk)
            self._delta(out.push(chunk))
            self._tell_cuts(stream)
        self._delta(out.flush())
        self._tell_cuts(stream)

    def _delta(self, audio: bytes) -> None:
        if audio:
            self._events.send(self.spec.names.audio_delta, **self._events.where,
                              delta=base64.b64encode(audio).decode("ascii"))

    def _tell_cuts(self, stream: Any) -> None:
        """The reply's segments that ended on their token budget since last told: words may be missing."""
        for cut in stream.cuts[self._cuts_told:]:
            self._events.send("lyre.response.segment_cut", **self._events.where, **cut.event())
        self._cuts_told = len(stream.cuts)

    def _call_delta(self, piece: ToolCallDelta) -> None:
        if (streamed := self._calls.push(piece)) is not None:
            call, position, delta = streamed
            self._events.call_added(call, 1 + position)
            self._events.send("response.function_call_arguments.delta", response_id=self.id, item_id=call["id"],
                              output_index=1 + position, call_id=call["call_id"], delta=delta)

    def _finish(self) -> None:
        self.calls, unknown = self._calls.finished()
        self._events.close(self.status == "completed", self.text, self.calls, unknown)
        self._events.send("response.done", response=self._object([self._events.message, *self.calls]))
        if not self.done.done():
            self.done.set_result(None)

    def _object(self, output: list[dict[str, Any]] | None = None) -> dict[str, Any]:
        spec, details = self.spec, None
        if self.status == "failed":
            details = {"type": "failed", "error": {"type": "server_error", "code": "reply_failed",
                                                   "message": self.error}}
        elif self.status == "cancelled":
            details = {"type": "cancelled", "reason": self.cancel_reason}
        text_out = self.usage.output_tokens
        response: dict[str, Any] = {
            "id": self.id, "object": "realtime.response", "status": self.status, "status_details": details,
            "output": output or [], "output_modalities": [spec.modality],
            "conversation_id": spec.conversation_id if spec.in_conversation else None,
            "max_output_tokens": "inf" if spec.think.max_tokens is None else spec.think.max_tokens,
            "metadata": spec.metadata,
            "usage": {"total_tokens": self.usage.input_tokens + text_out + self.audio_tokens,
                      "input_tokens": self.usage.input_tokens, "output_tokens": text_out + self.audio_tokens,
                      "input_token_details": {"text_tokens": self.usage.input_tokens, "audio_tokens": 0,
                                              "cached_tokens": 0},
                      "output_token_details": {"text_tokens": text_out, "audio_tokens": self.audio_tokens}}}
        if spec.modality == "audio":
            response["audio"] = {"output": {"format": format_object(spec.output_encoding, _SAMPLE_RATE),
                                            "voice": spec.voice}}
        if spec.lyre_events:
            response["lyre"] = {"timing": self.times.report(), "speculative": spec.held, "discarded": spec.discarded,
                                "audio_seconds": round(self.audio_ms / 1000, 3)}
        return response
