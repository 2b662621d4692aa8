"""The streaming WebSocket: text in as a language model writes it, audio out as it is made.

Shaped like Cartesia's protocol, so agent-framework plugins can point at lyre:

    -> {"context_id": "c1", "voice": {"mode": "id", "id": "tara"}, "transcript": "Hello, ", "continue": true}
    -> {"context_id": "c1", "transcript": "how are you?", "continue": false}      (or "cancel": true)
    <- {"type": "chunk", "context_id": "c1", "data": "<base64 pcm_s16le>", "done": false}
    <- {"type": "done", "context_id": "c1", "done": true}     (or "type": "error" with "error": "...")

Each context runs on its own task; its text is joined verbatim, cut into
sentence segments as it arrives, and each segment spoken once complete. A
context's voice, sampling extras and ``trim`` come from its first message.
A problem with one context ends it and leaves the socket and the others alone.
"""

from __future__ import annotations

import asyncio
import base64
import json
import time
from collections import OrderedDict, deque
from dataclasses import replace
from typing import Any

from fastapi import APIRouter, WebSocket, WebSocketDisconnect
from starlette.websockets import WebSocketDisconnected

from lyre.server.auth import refuse_unauthorized
from lyre.server import ws_messages as msg
from lyre.server.errors import error_response
from lyre.server.speech import PROMPT_ROOM
from lyre.server.state import TTS_OFF, ServerState
from lyre.tts.segments import IncrementalSplitter

__all__ = ["WEBSOCKET_PATH", "router"]

WEBSOCKET_PATH = "/v1/tts/websocket"
_API = "websocket"  # the metrics label
_ENDED_MEMORY = 1024  # ended context ids remembered per socket, so late messages for them are refused
_SEED_SPACE = 2**63  # SamplingParams.seed range

router = APIRouter()


class _Gone(Exception):
    """The client has disconnected: nothing more can be sent."""


class _Context:
    """One context: its text as it arrives, spoken segment by segment on its own task."""

    def __init__(self, session: _Session, context_id: str, settings: msg.Settings) -> None:
        self.id = context_id
        self.settings = settings
        self.chars = 0  # text received, for the max_input_chars limit
        self.closed = False  # `continue: false` has arrived: no more text
        self.outcome = "cancelled"  # for the requests metric, unless it ends otherwise
        self._session = session
        self._inbox: deque[tuple[str, float]] = deque()  # (text, when it arrived)
        self._wake = asyncio.Event()
        self.task = asyncio.create_task(self._run(), name=f"lyre-ws-{context_id}")

    def add(self, text: str, last: bool) -> None:
        self.chars += len(text)
        self.closed = last
        self._inbox.append((text, time.monotonic()))
        self._wake.set()

    async def _run(self) -> None:
        session = self._session
        try:
            try:
                await self._speak_all()
            except _Gone:
                raise
            except Exception as exc:
                self.outcome = "error"
                await session.send_error(self.id, *msg.describe(exc, self.id))
                return
            await session.send({"type": "done", "context_id": self.id, "done": True})
            self.outcome = "ok"
        except _Gone:
            pass  # the client left; the session is cancelling everything
        finally:
            session.metrics.requests.labels(_API, self.outcome).inc()
            session.end(self.id, self)

    async def _speak_all(self) -> None:
        """Feed text to the splitter and speak each segment as it completes, through the last one."""
        state = self._session.state
        splitter = IncrementalSplitter(max_chars=state.tts.config.segment_chars)
        ready: deque[tuple[str, float]] = deque()  # complete segments and when each completed
        unflushed = False  # text has gone into the splitter since it was last flushed
        last_text = spoke_at = time.monotonic()
        index = 0
        while True:
            self._wake.clear()
            while self._inbox:
                text, last_text = self._inbox.popleft()
                ready.extend((segment, last_text) for segment in splitter.push(text))
                unflushed = True
            if self.closed and unflushed:
                ready.extend((segment, last_text) for segment in splitter.flush())
                unflushed = False
            if ready:
                segment, complete_at = ready.popleft()
                # A segment is speakable once it is complete and the one before it has been spoken.
                await self._speak(segment, max(complete_at, spoke_at), index)
                spoke_at, index = time.monotonic(), index + 1
                continue
            if self.closed:
                return
            config = state.config
            # Pending text with no sentence end is spoken after a pause in the text (the writer
            # may have stalled mid-sentence); with nothing pending, wait out the idle limit.
            if unflushed:
                deadline = last_text + config.ws_flush_after_s
            else:
                deadline = max(last_text, spoke_at) + config.ws_idle_timeout_s
            try:
                async with asyncio.timeout(max(0.0, deadline - time.monotonic())):
                    await self._wake.wait()
            except TimeoutError:
                if not unflushed:
                    raise msg.ContextError(f"context idle for {config.ws_idle_timeout_s:g} s", "idle") from None
                now = time.monotonic()
                ready.extend((segment, now) for segment in splitter.flush())
                unflushed = False

    async def _speak(self, text: str, ready_at: float, index: int) -> None:
        state, settings = self._session.state, self.settings
        metrics, sampling = state.metrics, settings.sampling
        if sampling is not None and sampling.seed is not None:
            # A seed per segment: one seed for all would start each segment on the same random stream.
            sampling = replace(sampling, seed=(sampling.seed + index) % _SEED_SPACE)
        trim = settings.trim and index == 0  # later segments keep their lead-in: a pause between sentences
        stream = state.tts.stream(text, settings.voice, sampling, trim=trim)  # validates before any work
        try:
            async with state.admission.slot() as wait:
                metrics.queue_wait.observe(wait)
                async for chunk in stream:
                    if stream.samples == len(chunk):  # this segment's first audio
                        metrics.ttfa.labels(_API).observe(time.monotonic() - ready_at)
                    data = base64.b64encode(chunk.astype("<i2", copy=False).tobytes()).decode("ascii")
                    await self._session.send({"type": "chunk", "context_id": self.id, "data": data, "done": False})
        finally:
            await stream.aclose()  # aborts the engine request and drops codec work if we stopped early
        metrics.audio.labels(_API).inc(stream.audio_seconds)
        if trim:
            metrics.trimmed.observe(stream.trimmed_ms / 1000)


class _Session:
    """One socket: reads messages, routes them to contexts, and sends one frame at a time."""

    def __init__(self, websocket: WebSocket, state: ServerState) -> None:
        self.websocket = websocket
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
                await self.websocket.send_text(json.dumps(message))
            except (WebSocketDisconnect, WebSocketDisconnected):
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
        """Read until the client leaves, then cancel every context (aborting its engine requests)."""
        try:
            while (message := await self.websocket.receive())["type"] != "websocket.disconnect":
                await self._handle(message.get("text"))
        except _Gone:
            pass
        finally:
            self._gone = True
            tasks = list(self._tasks)
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

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
        try:
            message = json.loads(text)
        except (ValueError, RecursionError) as exc:  # RecursionError: nested deeper than the parser goes
            await self.send_error(None, f"invalid JSON: {exc}")
            return
        context_id = message.get("context_id") if isinstance(message, dict) else None
        if not isinstance(context_id, str) or not context_id:
            await self.send_error(None, "every message must be a JSON object with a non-empty string context_id")
            return
        limit = self.state.config.ws_max_message_bytes
        if (size := len(text.encode())) > limit:
            await self._fail(context_id, f"message is {size} bytes, over the limit of {limit}")
        elif message.get("cancel") is True:
            if context_id in self.contexts:  # one that has already ended needs nothing
                self.end(context_id)
        else:
            try:
                self._route(context_id, message)
            except msg.ContextError as exc:
                await self._fail(context_id, str(exc), exc.kind)

    def _route(self, context_id: str, message: dict[str, Any]) -> None:
        """Add a message's text to its context, opening the context on its first message."""
        config, voices = self.state.config, self.state.tts.voices
        context = self.contexts.get(context_id)
        if context_id in self._ended or (context is not None and context.closed):
            raise msg.ContextError(f"context {context_id!r} has already ended; start a new context_id")
        transcript, more = message.get("transcript", ""), message.get("continue", False)
        if not isinstance(transcript, str):
            raise msg.ContextError("transcript must be a string")
        if not isinstance(more, bool):
            raise msg.ContextError(f"continue must be true or false, got {more!r}")
        msg.check_output_format(message.get("output_format"))
        if (chars := len(transcript) + (context.chars if context else 0)) > config.max_input_chars:
            raise msg.ContextError(f"context text is {chars} characters, over the limit of {config.max_input_chars}")
        if context is None:
            settings = msg.settings(message, voices, self.state.config.max_seq_len - PROMPT_ROOM)
            if self.state.draining:
                raise msg.ContextError("server is shutting down; open new contexts on another server", "draining")
            if len(self.contexts) >= config.ws_max_contexts:
                raise msg.ContextError(f"too many open contexts on this socket (limit {config.ws_max_contexts}); "
                                    "wait for one to finish or cancel one")
            context = self.contexts[context_id] = _Context(self, context_id, settings)
            self._tasks.add(context.task)
            context.task.add_done_callback(self._tasks.discard)
        elif "voice" in message and msg.voice_of(message, voices) != context.settings.voice:
            raise msg.ContextError(f"a context keeps the voice of its first message ({context.settings.voice!r})")
        context.add(transcript, last=not more)


@router.websocket(WEBSOCKET_PATH)
async def tts_websocket(websocket: WebSocket) -> None:
    """Streaming text-to-speech over one socket, many contexts at once."""
    state: ServerState = websocket.app.state.lyre
    if await refuse_unauthorized(websocket, state.config.api_key):
        state.metrics.errors.labels("unauthorized").inc()
        return
    if state.tts is None:
        # Refused with an HTTP 404 and an OpenAI-shaped body, as the HTTP routes are.
        await websocket.send_denial_response(error_response(404, TTS_OFF, "invalid_request_error"))
        return
    await websocket.accept()
    await _Session(websocket, state).serve()
