"""The streaming WebSocket: text in as a language model writes it, audio out as it is made.

Shaped like Cartesia's protocol, so agent-framework plugins can point at lyre:

    -> {"context_id": "c1", "voice": {"mode": "id", "id": "tara"}, "transcript": "Hello, ", "continue": true}
    -> {"context_id": "c1", "transcript": "how are you?", "continue": false}      (or "cancel": true)
    <- {"type": "chunk", "context_id": "c1", "data": "<base64 pcm_s16le>", "done": false}
    <- {"type": "timestamps", "context_id": "c1", "done": false,               (with "add_timestamps": true)
        "word_timestamps": {"words": ["Hello,"], "start": [0.08], "end": [0.41]}}
    <- {"type": "done", "context_id": "c1", "done": true}     (or "type": "error" with "error": "...")
       (with "cut_segments": [{"segment": 0, "reason": "budget", "max_tokens": 1554, "text": "..."}] when a
        segment ended on its token budget, its last words perhaps missing: a field of ``done``, not a message of
        its own, which Cartesia's clients would take for an error)

This module is the protocol only: each context is one `lyre.tts` speech
stream (the same pipeline HTTP requests use) fed with the context's text as
it arrives, on its own task, holding one admission slot for its whole life.
A context's voice, sampling extras, ``trim`` and ``add_timestamps`` come from
its first message. Word timestamps are seconds from the context's first audio,
one message per spoken segment as soon as it is aligned (after its audio, never
holding audio back), all before the context's ``done``. A problem with one
context ends it and leaves the socket and the others alone.
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
from collections import OrderedDict
from typing import Any

from fastapi import APIRouter, WebSocket

from lyre.server.aligner import word_timestamps
from lyre.server.auth import refuse_socket
from lyre.server.sockets import ws_messages as msg
from lyre.server.state import TTS_OFF, ServerState
from lyre.server.watched_socket import STALLED, Gone, WatchedSocket
from lyre.stt import WordTimer
from lyre.tts import TextError

__all__ = ["WEBSOCKET_PATH", "router"]

WEBSOCKET_PATH = "/v1/tts/websocket"
_API = "websocket"  # the metrics label
_ENDED_MEMORY = 1024  # ended context ids remembered per socket, so late messages for them are refused

router = APIRouter()
log = logging.getLogger("lyre.server.sockets.tts_socket")


class _Gone(Exception):
    """The client has disconnected: nothing more can be sent."""


class _Context:
    """One context: a speech stream fed with the context's text, spoken on its own task.

    It holds one admission slot from its first message to its end, so a
    context is never refused halfway through a reply.
    """

    def __init__(self, session: _Session, context_id: str, stream: Any, timestamps: bool,
                 language: str | None = None) -> None:
        self.id = context_id
        self.stream = stream
        self.timer = session.state.word_timer(("ws", id(session), context_id), language) if timestamps else None
        self.closed = False  # `continue: false` has arrived: no more text
        self.outcome = "cancelled"  # for the requests metric, unless it ends otherwise
        self._session = session
        self.task = asyncio.create_task(self._run(), name=f"lyre-ws-{context_id}")
        # A context ended before its task ran (its first text refused) never reaches `_speak`'s close.
        self.task.add_done_callback(lambda _: stream.leave())

    def add(self, text: str, last: bool) -> None:
        """The context's next text (TextError when its total is too long)."""
        if text:
            self.stream.push(text)
        if last:
            self.closed = True
            self.stream.end()

    async def _run(self) -> None:
        session = self._session
        try:
            try:
                await self._speak()
            except _Gone:
                raise
            except Exception as exc:
                self.outcome = "error"
                await session.send_error(self.id, *msg.describe(exc, self.id))
                return
            done = {"type": "done", "context_id": self.id, "done": True}
            if self.stream.warnings:  # what of its SSML was read as plain text
                done["warnings"] = self.stream.warnings
            if self.stream.cuts:  # segments that ran out of tokens: their last words may be missing
                done["cut_segments"] = [cut.event() for cut in self.stream.cuts]
            await session.send(done)
            self.outcome = "ok"
        except _Gone:
            pass  # the client left; the session is cancelling everything
        finally:
            session.metrics.requests.labels(_API, self.outcome).inc()
            session.end(self.id, self)

    async def _speak(self) -> None:
        state, stream, timer = self._session.state, self.stream, self.timer
        metrics = state.metrics
        words, heard = None, 0  # heard: the listener's underruns counted so far, as they come
        if timer is not None:  # each segment aligned as soon as its audio is out; sent as soon as aligned
            stream.on_spoken(lambda ended: timer.segment(ended.text, ended.start, ended.end, ended.said))
            words = asyncio.create_task(self._send_words(timer), name=f"lyre-ws-words-{self.id}")
        try:
            websocket = self._session.websocket
            client = websocket.client.host if websocket.client else None
            async with state.admission.slot(state.tts.overloaded, client=client) as wait:
                metrics.queue_wait.observe(wait)
                async for chunk in stream:
                    if stream.samples == len(chunk) and (ttfa := stream.ttfa_s) is not None:
                        metrics.ttfa.labels(_API).observe(ttfa)  # from the context's first text
                    heard = metrics.count_underruns(_API, stream.clock.gaps, heard)
                    if timer is not None:
                        timer.add(chunk)
                    data = base64.b64encode(chunk.astype("<i2", copy=False).tobytes()).decode("ascii")
                    await self._session.send({"type": "chunk", "context_id": self.id, "data": data, "done": False})
            if timer is not None and words is not None:  # the last words go out before `done`
                timer.finish()
                await words
        finally:
            if timer is not None and words is not None:
                words.cancel()
                timer.close()
                state.metrics.count_word_times(_API, timer)
            await stream.aclose()  # aborts the engine requests and drops codec work if we stopped early
        metrics.audio.labels(_API).inc(stream.audio_seconds)
        metrics.trimmed.observe(stream.trimmed_ms / 1000)
        metrics.count_underruns(_API, stream.clock.gaps, heard)

    async def _send_words(self, timer: WordTimer) -> None:
        """Each segment's words as a Cartesia timestamps message, as soon as it is aligned (the segment's
        audio went out before: the alignment starts only once its last chunk has been handed out)."""
        async for words in timer.results():
            if words:
                await self._session.send({"type": "timestamps", "context_id": self.id, "done": False,
                                          "word_timestamps": word_timestamps(words)})


class _Session:
    """One socket: reads messages, routes them to contexts, and sends one frame at a time (a listener that takes
    nothing for the write timeout cuts it, lyre.server.watched_socket: its contexts end, the socket closes)."""

    def __init__(self, websocket: WebSocket, state: ServerState) -> None:
        self.websocket = websocket
        self.socket = WatchedSocket.of(websocket, state, _API)
        self.state = state
        self.metrics = state.metrics
        self.contexts: dict[str, _Context] = {}  # the open ones
        self._ended: OrderedDict[str, None] = OrderedDict()
        self._tasks: set[asyncio.Task[None]] = set()  # context tasks not yet finished, cancelled ones too
        self._send_lock = asyncio.Lock()
        self._gone = False

    async def send(self, message: dict[str, Any]) -> None:
        async with self._send_lock:
            if self._gone:
                raise _Gone
            try:
                await self.socket.send_text(json.dumps(message))
            except Gone:
                self._gone = True
                raise _Gone from None

    async def send_error(self, context_id: str | None, error: str, kind: str = "invalid_request") -> None:
        self.metrics.errors.labels(kind).inc()
        await self.send({"type": "error", "context_id": context_id, "error": error, "done": True})

    def end(self, context_id: str, finished: _Context | None = None) -> None:
        """Close a context and refuse its id from now on: cancel its task, unless it is ``finished``."""
        if finished is None:
            if (context := self.contexts.pop(context_id, None)) is not None:
                context.task.cancel()
        elif self.contexts.get(context_id) is finished:
            del self.contexts[context_id]
        self._ended[context_id] = None
        if len(self._ended) > _ENDED_MEMORY:
            self._ended.popitem(last=False)

    async def serve(self) -> None:
        """Read until the client leaves or stops taking what it is sent, then cancel every context (aborting its
        engine requests)."""
        try:
            while (message := await self.socket.receive())["type"] != "websocket.disconnect":
                await self._handle(message.get("text"))
        except (_Gone, Gone):
            pass
        finally:
            self._gone = True
            tasks = list(self._tasks)
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            if (stall := self.socket.stall) is not None:
                await self.socket.close(STALLED, str(stall))

    async def _fail(self, context_id: str, error: str, kind: str = "invalid_request") -> None:
        """Report a problem on a context and end it: nothing more is sent for it."""
        if (context := self.contexts.get(context_id)) is not None:
            context.outcome = "error"
        self.end(context_id)
        await self.send_error(context_id, error, kind)

    async def _handle(self, text: str | None) -> None:
        if text is None:
            await self.send_error(None, "binary frames are not supported; send JSON text frames")
            return
        limit = self.state.config.ws_max_message_bytes
        if len(text) > limit or (size := len(text.encode())) > limit:  # before parsing any of it
            await self.send_error(None, f"message is {size if len(text) <= limit else len(text.encode())} bytes, "
                                        f"over the limit of {limit}")
            return
        try:
            message = json.loads(text)
        except (ValueError, RecursionError) as exc:  # RecursionError: nested deeper than the parser goes
            await self.send_error(None, f"invalid JSON: {exc}")
            return
        context_id = message.get("context_id") if isinstance(message, dict) else None
        if not isinstance(context_id, str) or not context_id:
            await self.send_error(None, "every message must be a JSON object with a non-empty string context_id")
            return
        if message.get("cancel") is True:
            if context_id in self.contexts:  # one that has already ended needs nothing
                self.end(context_id)
        else:
            try:
                self._route(context_id, message)
            except msg.ContextError as exc:
                await self._fail(context_id, str(exc), exc.kind)
            except Exception as exc:  # a bug in lyre: this context ends, the socket and its other contexts go on
                log.exception("context %r: a message failed", context_id)
                await self._fail(context_id, f"the message failed inside lyre ({type(exc).__name__}); this "
                                             "context is ended, the socket goes on", "server_error")

    def _route(self, context_id: str, message: dict[str, Any]) -> None:
        """Add a message's text to its context, opening the context on its first message."""
        config = self.state.config
        context = self.contexts.get(context_id)
        if context_id in self._ended or (context is not None and context.closed):
            raise msg.ContextError(f"context {context_id!r} has already ended; start a new context_id")
        transcript, more = message.get("transcript", ""), message.get("continue", False)
        if not isinstance(transcript, str):
            raise msg.ContextError("transcript must be a string")
        if not isinstance(more, bool):
            raise msg.ContextError(f"continue must be true or false, got {more!r}")
        msg.check_output_format(message.get("output_format"))
        if context is None:
            settings = msg.settings(message, self.state.tts)
            if self.state.draining:
                raise msg.ContextError("server is shutting down; open new contexts on another server", "draining")
            if len(self.contexts) >= config.ws_max_contexts:
                raise msg.ContextError(f"too many open contexts on this socket (limit {config.ws_max_contexts}); "
                                    "wait for one to finish or cancel one")
            tts = self.state.tts
            try:
                stream = tts.open(settings.voice, settings.options, settings.trim, streamed=True,
                                  idle_timeout_s=config.ws_idle_timeout_s, text=settings.reading)
            except ValueError as exc:  # options the pipeline refuses, e.g. max_tokens over its limit
                raise msg.ContextError(str(exc)) from None
            context = self.contexts[context_id] = _Context(self, context_id, stream, settings.timestamps,
                                                           settings.reading.language)
            self._tasks.add(context.task)
            context.task.add_done_callback(self._tasks.discard)
        elif "voice" in message and msg.voice_of(message, self.state.tts) != (first := context.stream.named):
            raise msg.ContextError(f"a context keeps the voice of its first message ({first!r})")
        try:
            context.add(transcript, last=not more)
        except TextError as exc:
            raise msg.ContextError(f"context {exc}") from None


@router.websocket(WEBSOCKET_PATH)
async def tts_websocket(websocket: WebSocket) -> None:
    """Streaming text-to-speech over one socket, many contexts at once."""
    state: ServerState = websocket.app.state.lyre
    if await refuse_socket(websocket, state, TTS_OFF if state.tts is None else None):
        return
    await websocket.accept()
    await _Session(websocket, state).serve()
