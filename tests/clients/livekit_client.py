"""LiveKit Agents' OpenAI realtime plugin (livekit-plugins-openai's ``RealtimeModel``) on its own defaults, driven
against a Realtime server the way LiveKit's ``AgentSession`` drives it, without a LiveKit room.

    .venv-clients/bin/python tests/clients/livekit_client.py http://127.0.0.1:PORT/v1 WEATHER.pcm

Run by tests/agent/test_client_livekit.py in the clients' virtual environment (tests/clients/requirements.txt).
``WEATHER.pcm`` is a spoken question about the weather, 24 kHz mono pcm16; a background "microphone" pushes it
at real time as ``rtc.AudioFrame``s and silence before and after it, as a room's track does.

What it does, in order (each step bounded in time; a step that fails is reported and the next one still runs):

1. ``update_instructions``, ``update_tools([get_weather])``, as AgentSession does on start;
2. ``generate_reply(instructions="Greet the user.")`` and the generation's text and audio streams to their end;
3. the spoken question: the server's turn detection answers it with a generation of its own, a message and a
   ``get_weather`` call;
4. the call's output sent back as LiveKit does (``update_chat_ctx`` with a ``FunctionCallOutput`` after the
   call, ``interrupt()``, ``generate_reply(tool_choice="auto")``) and that reply;
5. a typed user message (``update_chat_ctx``, as ``AgentSession.generate_reply(user_input=...)``) asking for a
   story, ``generate_reply()``, and at its first audio ``interrupt()`` and ``truncate()``, as an interruption;
6. the greeting deleted from the history (``update_chat_ctx`` without it: ``conversation.item.delete``).

It prints one JSON object a line on stdout: ``{"kind": "server", "event": ...}`` for every raw server event the
plugin receives (its ``openai_server_event_received``; audio deltas shortened), ``"client"`` for every client
event it sends but audio appends, ``"error"`` for the session's ``error`` events, ``"log"`` for the plugin's and
the framework's log records at WARNING and above, ``"step"`` for each step's outcome, ``"history"`` for the
plugin's chat context at the end, and ``"done"`` last.
"""

from __future__ import annotations

import asyncio
import json
import logging
import sys
import time
import traceback
from typing import Any

from livekit import rtc
from livekit.agents import function_tool, llm
from livekit.plugins.openai.realtime import RealtimeModel

RATE = 24_000
FRAME = RATE // 50  # 20 ms of audio a frame, as a room's track delivers it
SILENCE = bytes(2 * FRAME)


def emit(kind: str, **fields: Any) -> None:
    sys.stdout.write(json.dumps({"kind": kind, "t": round(time.monotonic() - START, 3), **fields}) + "\n")
    sys.stdout.flush()


START = time.monotonic()


class Capture(logging.Handler):
    def emit(self, record: logging.LogRecord) -> None:  # type: ignore[override]
        try:
            message = record.getMessage()
        except Exception:  # a bad format string is a finding too
            message = str(record.msg)
        extra = {k: repr(v)[:400] for k, v in vars(record).items() if k in ("error", "errors", "extra", "lk.pii.event",
                                                                            "item_id", "previous_item_id", "tool")}
        exc = "".join(traceback.format_exception(*record.exc_info))[-1500:] if record.exc_info else None
        emit("log", logger=record.name, level=record.levelname, message=message[:1000], extra=extra, exc=exc)


for name in ("livekit.agents", "livekit.plugins.openai", "livekit", "asyncio"):
    log = logging.getLogger(name)
    log.setLevel(logging.WARNING)
    log.addHandler(Capture(logging.WARNING))
    log.propagate = False


@function_tool
async def get_weather(city: str) -> str:
    """Look up today's weather in a city.

    Args:
        city: The city's name.
    """
    return f"It is sunny in {city}."


class Microphone:
    """A room's audio track: 20 ms frames at real time, silence unless something is being said."""

    def __init__(self, session: llm.RealtimeSession) -> None:
        self.session = session
        self.queue: list[bytes] = []
        self.spoken = asyncio.Event()
        self.task = asyncio.create_task(self.run())

    def say(self, pcm: bytes) -> None:
        self.spoken.clear()
        self.queue.append(pcm)

    async def run(self) -> None:
        t0 = time.monotonic()
        sent = 0
        while True:
            if self.queue:
                pcm = self.queue.pop(0)
                for i in range(0, len(pcm), 2 * FRAME):
                    chunk = pcm[i:i + 2 * FRAME].ljust(2 * FRAME, b"\0")
                    sent = await self._push(chunk, t0, sent)
                self.spoken.set()
            else:
                sent = await self._push(SILENCE, t0, sent)

    async def _push(self, chunk: bytes, t0: float, sent: int) -> int:
        self.session.push_audio(rtc.AudioFrame(data=chunk, sample_rate=RATE, num_channels=1,
                                               samples_per_channel=len(chunk) // 2))
        sent += 1
        delay = t0 + sent * FRAME / RATE - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)
        return sent


def _short(event: dict[str, Any]) -> dict[str, Any]:
    """An audio delta with its base64 cut to 8 characters (still a string, as the event's type has it)."""
    if event.get("type") == "response.output_audio.delta" and isinstance(event.get("delta"), str):
        return {**event, "delta": event["delta"][:8]}
    return event


async def consume(gen: llm.GenerationCreatedEvent, on_audio: Any = None) -> dict[str, Any]:
    """Every stream of a generation to its end: the messages' text and audio, the function calls."""
    messages: list[dict[str, Any]] = []
    calls: list[dict[str, Any]] = []

    async def message(msg: llm.MessageGeneration) -> None:
        record: dict[str, Any] = {"id": msg.message_id, "text": "", "audio_ms": 0.0}
        messages.append(record)

        async def text() -> None:
            async for delta in msg.text_stream:
                record["text"] += str(delta)

        async def audio() -> None:
            async for frame in msg.audio_stream:
                record["audio_ms"] += 1000 * frame.samples_per_channel / frame.sample_rate
                if on_audio is not None:
                    on_audio(msg, record)

        await asyncio.gather(text(), audio())
        record["modalities"] = list(await msg.modalities)

    async def messages_() -> None:
        tasks = [asyncio.create_task(message(m)) async for m in gen.message_stream]
        await asyncio.gather(*tasks)

    async def calls_() -> None:
        async for call in gen.function_stream:
            calls.append({"id": call.id, "call_id": call.call_id, "name": call.name, "arguments": call.arguments,
                          "call": call})

    await asyncio.gather(messages_(), calls_())
    return {"user_initiated": gen.user_initiated, "response_id": gen.response_id, "messages": messages,
            "calls": calls}


class Driver:
    def __init__(self, base_url: str, weather_pcm: bytes) -> None:
        self.base_url = base_url
        self.weather_pcm = weather_pcm
        self.generations: asyncio.Queue[llm.GenerationCreatedEvent] = asyncio.Queue()
        self.server_events: list[dict[str, Any]] = []
        self.transcripts: list[dict[str, Any]] = []
        self.speech_started = 0
        self.calls: list[dict[str, Any]] = []
        self.greeting: str | None = None  # the greeting's item id

    def on_server(self, event: dict[str, Any]) -> None:
        self.server_events.append(event)
        emit("server", event=_short(event), **({"delta_chars": len(event["delta"])}
                                                 if event.get("type") == "response.output_audio.delta" else {}))

    def on_client(self, event: dict[str, Any]) -> None:
        if event.get("type") != "input_audio_buffer.append":
            emit("client", event=event)

    def on_error(self, error: llm.RealtimeModelError) -> None:
        emit("error", error=repr(error.error)[:1500], recoverable=error.recoverable)

    def on_transcript(self, ev: llm.InputTranscriptionCompleted) -> None:
        if ev.is_final:
            self.transcripts.append({"item_id": ev.item_id, "transcript": ev.transcript})
            emit("transcript", item_id=ev.item_id, transcript=ev.transcript)

    def on_speech_started(self, _: Any) -> None:
        self.speech_started += 1
        emit("speech_started")

    def saw(self, kind: str) -> int:
        return sum(1 for e in self.server_events if e.get("type") == kind)

    async def until(self, kind: str, count: int, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while self.saw(kind) < count:
            if time.monotonic() > deadline:
                return False
            await asyncio.sleep(0.02)
        return True

    async def reply(self, fut: asyncio.Future[llm.GenerationCreatedEvent], timeout: float,
                    on_audio: Any = None) -> dict[str, Any]:
        """What ``generate_reply`` gave: its future settled at ``response.created`` (the metadata's
        client_event_id echoed), and the generation read to its end. When the future does not settle, the
        generation the server created anyway (``generation_created``) is read, so the next steps can run: an
        AgentSession would have dropped the reply after the plugin's 10 s."""
        fut.add_done_callback(lambda f: f.cancelled() or f.exception())  # no "never retrieved" noise
        got = asyncio.ensure_future(self.generations.get())
        done, _ = await asyncio.wait([got], timeout=timeout)
        if not done:
            got.cancel()
            return {"ok": False, "why": f"no generation_created within {timeout} s",
                    "future": _state(fut)}
        gen = got.result()
        await asyncio.sleep(0)  # the future is settled before the event is emitted, when it is
        settled = _state(fut)
        out = await asyncio.wait_for(consume(gen, on_audio), timeout)
        out["future"] = settled
        out["ok"] = settled == "result"
        if not out["ok"]:
            out["why"] = (f"generate_reply's future was {settled} when its response was created: response.created "
                          "did not carry response.metadata.client_event_id (the plugin would time out after 10 s)")
        return out

    async def step(self, name: str, body: Any) -> dict[str, Any]:
        t0 = time.monotonic()
        try:
            result = await body()
        except BaseException as exc:  # noqa: BLE001 - every failure is a finding
            if isinstance(exc, KeyboardInterrupt):
                raise
            result = {"ok": False, "why": f"{type(exc).__name__}: {exc}",
                      "trace": traceback.format_exc()[-1500:]}
        result.setdefault("ok", True)
        result["seconds"] = round(time.monotonic() - t0, 2)
        for call in result.get("calls", []):
            self.calls.append(call)
        emit("step", name=name, result={k: v for k, v in result.items() if k != "calls"},
             calls=[{k: v for k, v in c.items() if k != "call"} for c in result.get("calls", [])])
        return result

    async def run(self) -> None:
        model = RealtimeModel(base_url=self.base_url, api_key="x")
        session = model.session()
        session.on("openai_server_event_received", self.on_server)
        session.on("openai_client_event_queued", self.on_client)
        session.on("error", self.on_error)
        session.on("generation_created", self.generations.put_nowait)
        session.on("input_speech_started", self.on_speech_started)
        session.on("input_audio_transcription_completed", self.on_transcript)
        mic = Microphone(session)
        try:
            await self.steps(session, mic)
        finally:
            history = [{"id": item.id, "type": item.type, "role": getattr(item, "role", None),
                        "text": getattr(item, "text_content", None) if item.type == "message" else None,
                        "name": getattr(item, "name", None), "call_id": getattr(item, "call_id", None)}
                       for item in session.chat_ctx.items]
            emit("history", items=history)
            mic.task.cancel()
            await asyncio.gather(mic.task, return_exceptions=True)
            await asyncio.wait_for(session.aclose(), 10)
            await model.aclose()

    async def steps(self, session: Any, mic: Microphone) -> None:
        async def start() -> dict[str, Any]:
            # AgentSession's start: the agent's instructions, its tools (each a session.update).
            await session.update_instructions("Answer in one short sentence.")
            await session.update_tools([get_weather])
            ok = await self.until("session.updated", 3, 5.0)
            return {"ok": ok, "session_updated": self.saw("session.updated"),
                    **({} if ok else {"why": "fewer than 3 session.updated for 3 session.update"})}

        async def greet() -> dict[str, Any]:
            got = await self.reply(session.generate_reply(instructions="Greet the user."), 30.0)
            self.greeting = next((m["id"] for m in got.get("messages", [])), None)
            return got

        async def spoken() -> dict[str, Any]:
            mic.say(self.weather_pcm)
            # the server's turn detection answers on its own: a generation nobody asked for
            got = await self.reply(asyncio.get_running_loop().create_future(), 40.0)
            got["ok"] = bool(got.get("messages") or got.get("calls"))
            got.pop("why", None)
            got["speech_started"] = self.speech_started
            got["transcripts"] = list(self.transcripts)
            return got

        async def tool_reply() -> dict[str, Any]:
            if not self.calls:
                return {"ok": False, "why": "no function call to answer"}
            call = self.calls[-1]["call"]
            output = llm.FunctionCallOutput(name=call.name, call_id=call.call_id,
                                            output=json.dumps("It is sunny in Paris."), is_error=False)
            chat_ctx = session.chat_ctx.copy()
            chat_ctx.items.append(output)
            await session.update_chat_ctx(chat_ctx)  # conversation.item.create, awaits conversation.item.added
            added = session.chat_ctx.get_by_id(output.id) is not None  # the plugin logs a rejection and goes on
            session.interrupt()
            got = await self.reply(session.generate_reply(tool_choice="auto"), 30.0)
            got["output_added"] = added
            got["ok"] = got["ok"] and added
            return got

        async def story() -> dict[str, Any]:
            chat_ctx = session.chat_ctx.copy()
            asked = chat_ctx.add_message(role="user", content="Tell me a story.")
            await session.update_chat_ctx(chat_ctx)  # conversation.item.create, awaits conversation.item.added
            added = session.chat_ctx.get_by_id(asked.id) is not None
            cut: dict[str, Any] = {}

            def on_audio(msg: llm.MessageGeneration, record: dict[str, Any]) -> None:
                if not cut:  # the user talks over the first audio: AgentSession interrupts, then truncates
                    cut["message_id"] = msg.message_id
                    cut["audio_end_ms"] = int(min(record["audio_ms"], 200))
                    session.interrupt()

            got = await self.reply(session.generate_reply(), 30.0, on_audio)
            if cut:
                session.truncate(message_id=cut["message_id"], modalities=got["messages"][0].get("modalities",
                                 ["audio", "text"]), audio_end_ms=cut["audio_end_ms"],
                                 audio_transcript=got["messages"][0]["text"])
                await self.until("conversation.item.truncated", 1, 3.0)
            got["interrupted"] = cut
            got["user_message_added"] = added
            got["ok"] = got["ok"] and bool(cut) and added
            return got

        async def forget() -> dict[str, Any]:
            # the greeting, out of the history: LiveKit edits it by a diff, here one conversation.item.delete
            if self.greeting is None:
                return {"ok": False, "why": "no greeting to delete"}
            chat_ctx = session.chat_ctx.copy()
            item = chat_ctx.get_by_id(self.greeting)
            if item is None:
                return {"ok": False, "why": f"the greeting {self.greeting} is not in the plugin's history"}
            chat_ctx.items.remove(item)
            before = self.saw("conversation.item.deleted")
            await session.update_chat_ctx(chat_ctx)  # awaits conversation.item.deleted (5 s); logs a rejection
            gone = session.chat_ctx.get_by_id(self.greeting) is None
            ok = gone and self.saw("conversation.item.deleted") > before
            return {"ok": ok, "deleted": self.greeting,
                    **({} if ok else {"why": "no conversation.item.deleted; the item is still in the history"})}

        for name, body in (("start", start), ("greet", greet), ("spoken", spoken), ("tool_reply", tool_reply),
                           ("story", story), ("forget", forget)):
            await self.step(name, body)
        await asyncio.sleep(0.3)  # the last events in


def _state(fut: asyncio.Future[Any]) -> str:
    if not fut.done():
        return "pending"
    if fut.cancelled():
        return "cancelled"
    return "exception" if fut.exception() is not None else "result"


async def main() -> None:
    base_url, weather = sys.argv[1], sys.argv[2]
    with open(weather, "rb") as f:
        pcm = f.read()
    await Driver(base_url, pcm).run()
    emit("done")


if __name__ == "__main__":
    asyncio.run(main())
