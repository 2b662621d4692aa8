"""A voice conversation with lyre's ``/v1/realtime`` agent, held by OpenAI's Agents SDK for Python
(``openai-agents``, ``agents.realtime``) on its default settings: what a user of that SDK writes, pointed at
lyre's URL. Run by the clients' own interpreter (.venv-clients: the SDK pins websockets<17), started by
tests/agent/test_client_agents_py.py:

    .venv-clients/bin/python tests/clients/agents_py_client.py --url ws://HOST/v1/realtime?model=lyre \\
        --weather weather.pcm --story story.pcm --over over.pcm

The three files are pcm16 mono at 24 kHz, spoken turns. A microphone task streams through the SDK's
``send_audio`` at real time, 40 ms a chunk, silence between turns, as an app's microphone does. The turns:

1. the user asks about the weather: the agent calls the SDK's own ``get_weather`` tool, which the SDK runs
   and answers, and the agent replies after it;
2. the user asks for a story, and while its audio is coming in (the SDK takes audio as played when it
   arrives: no playback tracker by default) speaks over it: the SDK sees the audio interrupted;
3. the agent begins to answer the interruption.

Each thing seen is printed as one JSON line on stdout, flushed as it comes:

    {"kind": "server", "event": {...}}          a raw server event, as the SDK received it (raw_model_event);
                                                an audio delta's base64 cut to 16 characters, its size in "bytes"
    {"kind": "sent", "event": {...}}            a client event the SDK sent (audio appends counted, not printed)
    {"kind": "session", "type": ..., ...}       a RealtimeSession event other than raw_model_event
    {"kind": "model", "type": ..., ...}         a model-layer event the SDK raised that is an error or exception
    {"kind": "tool", "name": ..., "arguments"}  the tool ran
    {"kind": "log", "level": ..., ...}          a log record at WARNING or above (the SDK's and any other's)
    {"kind": "phase", "name": ..., "ok": ...}   a step of the conversation reached (or timed out)
    {"kind": "exception", "error": ...}         the session raised
    {"kind": "end", "appended_bytes": ...}      the driver finished
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import sys
import threading
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from agents import function_tool
from agents.realtime import RealtimeAgent, RealtimeRunner
from agents.realtime.openai_realtime import OpenAIRealtimeWebSocketModel

CHUNK = 24 * 40 * 2  # 40 ms of 24 kHz pcm16
SILENCE = bytes(CHUNK)
_T0 = time.monotonic()
_PRINTING = threading.Lock()  # the SDK runs a plain function tool on a worker thread


def emit(kind: str, **fields: Any) -> None:
    line = json.dumps({"kind": kind, "t": round(time.monotonic() - _T0, 3), **fields}, default=repr)
    with _PRINTING:
        print(line, flush=True)


class _LogLines(logging.Handler):
    def emit(self, record: logging.LogRecord) -> None:
        text = record.getMessage()
        if record.exc_info:
            text += "\n" + "".join(traceback.format_exception(*record.exc_info))[-3000:]
        emit("log", level=record.levelname, logger=record.name, message=text[:6000])


@function_tool
def get_weather(city: str) -> str:
    """Get the weather in a city."""
    emit("tool", name="get_weather", arguments={"city": city})
    return f"It is sunny in {city}."


class RecordingModel(OpenAIRealtimeWebSocketModel):
    """The SDK's default model, unchanged but for a copy of each client event it sends (for the report)."""

    appended = 0

    async def _create_websocket_connection(self, url: str, headers: dict[str, str],
                                           transport_config: Any = None) -> Any:
        ws = await super()._create_websocket_connection(url, headers, transport_config)
        send = ws.send

        async def recording_send(message: Any, *args: Any, **kwargs: Any) -> Any:
            event = json.loads(message)
            if event.get("type") == "input_audio_buffer.append":
                RecordingModel.appended += len(event.get("audio", "")) * 3 // 4
            else:
                emit("sent", event=event)
            return await send(message, *args, **kwargs)

        ws.send = recording_send  # type: ignore[method-assign]
        return ws


class Mic:
    """A microphone: 40 ms chunks at real time through ``session.send_audio``, silence unless speaking."""

    def __init__(self, session: Any) -> None:
        self.session = session
        self.speech = b""
        self.done = asyncio.Event()

    def say(self, pcm: bytes) -> asyncio.Event:
        self.speech = pcm
        self.done = asyncio.Event()
        return self.done

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        start, sent = loop.time(), 0
        while True:
            if self.speech:
                chunk, self.speech = self.speech[:CHUNK], self.speech[CHUNK:]
                if not self.speech:
                    self.done.set()
            else:
                chunk = SILENCE
            await self.session.send_audio(chunk)
            sent += 1
            await asyncio.sleep(max(0.0, start + sent * 0.04 - loop.time()))


class Seen:
    """What the session has yielded so far."""

    def __init__(self) -> None:
        self.server: list[dict[str, Any]] = []
        self.session: list[Any] = []
        self.failed: BaseException | None = None

    def first(self, kind: str, after: int = 0, **fields: Any) -> tuple[int, dict[str, Any]] | None:
        """The first server event of ``kind`` from index ``after`` on whose top-level ``fields`` match."""
        for i in range(after, len(self.server)):
            event = self.server[i]
            if event.get("type") == kind and all(event.get(k) == v for k, v in fields.items()):
                return i, event
        return None

    def done(self, response_id: str, after: int = 0) -> tuple[int, dict[str, Any]] | None:
        for i in range(after, len(self.server)):
            event = self.server[i]
            if event.get("type") == "response.done" and event["response"].get("id") == response_id:
                return i, event
        return None

    def open_responses(self) -> set[str]:
        created = {e["response"]["id"] for e in self.server if e.get("type") == "response.created"}
        return created - {e["response"]["id"] for e in self.server if e.get("type") == "response.done"}

    def events(self, kind: str, after: int = 0) -> list[Any]:
        return [e for e in self.session[after:] if e.type == kind]


async def until(seen: Seen, name: str, test: Callable[[], Any], timeout: float, **about: Any) -> Any:
    """Wait for ``test()`` to be truthy; emit the phase; return its value (None on timeout or a failed session)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and seen.failed is None:
        if value := test():
            emit("phase", name=name, ok=True, **about)
            return value
        await asyncio.sleep(0.02)
    emit("phase", name=name, ok=False, why="session failed" if seen.failed else f"not within {timeout} s", **about)
    return None


async def turn(seen: Seen, mic: Mic, name: str, pcm: bytes) -> tuple[int, str] | None:
    """Say ``pcm``; the index of the response.created that answers it (the first after its commit) and its id."""
    mark = len(seen.server)
    mic.say(pcm)
    committed = await until(seen, f"{name}: committed", lambda: seen.first("input_audio_buffer.committed", mark),
                            20)
    if committed is None:
        return None
    at, event = committed
    await until(seen, f"{name}: transcribed", lambda: seen.first(
        "conversation.item.input_audio_transcription.completed", mark, item_id=event["item_id"]), 10,
        item_id=event["item_id"])
    created = await until(seen, f"{name}: response.created", lambda: seen.first("response.created", at), 10)
    if created is None:
        return None
    emit("phase", name=f"{name}: reply", ok=True, response_id=created[1]["response"]["id"], item_id=event["item_id"])
    return created[0], created[1]["response"]["id"]


def _short_server_event(event: dict[str, Any]) -> dict[str, Any]:
    if event.get("type") in ("response.output_audio.delta", "response.audio.delta") and isinstance(
            event.get("delta"), str):
        return {**event, "delta": event["delta"][:16]}
    return event


def _session_fields(event: Any) -> dict[str, Any]:
    kind = event.type
    if kind in ("tool_start", "tool_end"):
        return {"tool": event.tool.name, "arguments": event.arguments,
                **({"output": str(event.output)} if kind == "tool_end" else {})}
    if kind == "audio":
        return {"item_id": event.item_id, "response_id": event.audio.response_id, "bytes": len(event.audio.data)}
    if kind in ("audio_interrupted", "audio_end"):
        return {"item_id": event.item_id, "content_index": event.content_index}
    if kind == "error":
        return {"error": str(event.error)[:4000]}
    if kind == "history_added":
        return {"item": event.item.model_dump(mode="json")}
    if kind == "history_updated":
        return {"items": [item.model_dump(mode="json") for item in event.history]}
    return {}


async def read(session: Any, seen: Seen) -> None:
    try:
        async for event in session:
            if event.type == "raw_model_event":
                data = event.data
                if data.type == "raw_server_event":
                    seen.server.append(data.data)
                    emit("server", event=_short_server_event(data.data),
                         **({"bytes": len(data.data["delta"]) * 3 // 4}
                            if data.data.get("type") == "response.output_audio.delta" else {}))
                elif data.type in ("error", "exception"):
                    emit("model", type=data.type, error=repr(getattr(data, "error", None) or data.exception)[:4000],
                         context=getattr(data, "context", None))
                continue
            seen.session.append(event)
            if event.type != "audio":  # one a delta: counted from the server's events instead
                emit("session", type=event.type, **_session_fields(event))
    except Exception as exc:  # noqa: BLE001  (the session raises what it stored: an exception event)
        seen.failed = exc
        emit("exception", error=repr(exc), traceback="".join(traceback.format_exception(exc))[-4000:])


async def converse(url: str, weather: bytes, story: bytes, over: bytes) -> None:
    agent = RealtimeAgent(name="Assistant", instructions="You are a helpful voice assistant. Be brief.",
                          tools=[get_weather])
    runner = RealtimeRunner(agent, model=RecordingModel())
    session = await runner.run(model_config={"url": url, "api_key": "unused"})
    seen = Seen()
    async with asyncio.timeout(120), session:
        reader = asyncio.create_task(read(session, seen))
        mic = Mic(session)
        microphone = asyncio.create_task(mic.run())
        try:
            await until(seen, "session.updated", lambda: seen.first("session.updated"), 10)

            # 1. A spoken question; the SDK runs the tool the agent calls; the agent replies after it.
            asked = await turn(seen, mic, "weather", weather)
            if asked is not None:
                await until(seen, "weather: tool_end", lambda: seen.events("tool_end"), 20)
                checking = await until(seen, "weather: response.done", lambda: seen.done(asked[1], asked[0]), 20)
                if checking is not None:
                    after = await until(seen, "after tool: response.created",
                                        lambda: seen.first("response.created", checking[0]), 10)
                    if after is not None:
                        reply = after[1]["response"]["id"]
                        await until(seen, "after tool: response.done", lambda: seen.done(reply, after[0]), 25,
                                    response_id=reply)
            await until(seen, "settled", lambda: not seen.open_responses(), 10)

            # 2. A story, spoken over while its audio comes in; 3. the interruption is answered.
            asked = await turn(seen, mic, "story", story)
            if asked is not None:
                at, story_id = asked
                if await until(seen, "story: audio", lambda: seen.first(
                        "response.output_audio.delta", at, response_id=story_id), 25):
                    await asyncio.sleep(0.5)  # half a second of the story "played"
                    marked = len(seen.session)
                    interrupting = await turn(seen, mic, "over", over)
                    await until(seen, "over: audio_interrupted", lambda: seen.events("audio_interrupted", marked), 1)
                    await until(seen, "story: response.done", lambda: seen.done(story_id, at), 10)
                    if interrupting is not None:  # its reply begins to speak (not waited out: time)
                        await until(seen, "over: audio", lambda: seen.first(
                            "response.output_audio.delta", interrupting[0], response_id=interrupting[1]), 20)
            await asyncio.sleep(0.5)  # what the last events brought (a retrieve's answer, say)
        finally:
            microphone.cancel()
            await asyncio.gather(microphone, return_exceptions=True)
    await asyncio.wait_for(reader, 5)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", required=True)
    parser.add_argument("--weather", required=True)
    parser.add_argument("--story", required=True)
    parser.add_argument("--over", required=True)
    args = parser.parse_args()
    handler = _LogLines(logging.WARNING)
    logging.getLogger().addHandler(handler)
    logging.captureWarnings(True)
    pcm = [Path(path).read_bytes() for path in (args.weather, args.story, args.over)]
    try:
        asyncio.run(converse(args.url, *pcm))
    except BaseException as exc:  # noqa: BLE001  (reported on stdout for the test)
        emit("exception", error=repr(exc), traceback="".join(traceback.format_exception(exc))[-4000:])
        return 1
    finally:
        emit("end", appended_bytes=RecordingModel.appended)
    return 0


if __name__ == "__main__":
    sys.exit(main())
