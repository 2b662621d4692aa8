"""Pipecat's ``OpenAIRealtimeLLMService`` (pipecat-ai 1.14.0), on its defaults, talking to a real ``lyre serve``.

The service is pointed at lyre by ``base_url`` alone (the API key is unused; the model stays Pipecat's
default name): no session property is set, so lyre sees exactly what Pipecat sends OpenAI. The pipeline is
a realtime agent's (a context aggregator pair around the service, an output transport that plays the bot's
audio at real time), with a microphone that streams espeak-ng speech, and silence between, at real time.
The think step is tests/scripted_thinker.py, so each turn's words are known:

1. the kick-off (``LLMRunFrame``, with a user message in the context): a greeting (``REPLY``);
2. a spoken question about the weather: ``CHECKING`` and a call of ``get_weather``, which Pipecat runs
   itself (a registered function, declared in the context's tools); its result is answered (``SUNNY``);
3. a spoken request for a story (``STORY``, long), talked over while it plays: Pipecat sees the
   interruption (an ``InterruptionFrame``) and truncates what it played;
4. the words that interrupted are heard and answered (``REPLY``).

Nothing may go wrong on the way: no ErrorFrame, no ``error`` event, no warning or error in Pipecat's log,
and every server event holds to the openai SDK's GA types strictly (tests/realtime_types.py) and parses
with Pipecat's own models.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
import scripted_thinker
from loguru import logger
from pipecat.adapters.llm.schemas.function_schema import FunctionSchema
from pipecat.adapters.llm.schemas.tools_schema import ToolsSchema
from pipecat.frames.frames import (
    BotStartedSpeakingFrame,
    BotStoppedSpeakingFrame,
    EndFrame,
    ErrorFrame,
    InputAudioRawFrame,
    InterruptionFrame,
    LLMRunFrame,
    OutputAudioRawFrame,
    StartFrame,
    TTSTextFrame,
)
from pipecat.observers.base_observer import BaseObserver, FramePushed
from pipecat.pipeline.pipeline import Pipeline
from pipecat.pipeline.worker import PipelineParams, PipelineWorker
from pipecat.processors.aggregators.llm_context import LLMContext
from pipecat.processors.aggregators.llm_response_universal import LLMContextAggregatorPair
from pipecat.services.llm_service import FunctionCallParams
from pipecat.services.openai.realtime import events as pipecat_events
from pipecat.services.openai.realtime.llm import OpenAIRealtimeLLMService
from pipecat.transports.base_output import BaseOutputTransport
from pipecat.transports.base_transport import TransportParams
from pipecat.workers.runner import WorkerRunner
from realtime_types import check_event
from realtime_clients import scripted_agent
from scripted_thinker import CHECKING, REPLY, STORY, SUNNY
from speech import SENTENCES, normalise, speak_pcm16

from serving import Server

pytestmark = pytest.mark.slow

RATE = 24_000  # what a realtime session takes and speaks; the microphone sends it, so Pipecat resamples nothing
FRAME_S = 0.02  # a transport's 20 ms input frames
FRAME_BYTES = int(2 * RATE * FRAME_S)
WEATHER = SENTENCES[1]  # "Can you tell me what the weather will be like this weekend?"
STORY_ASK = "Please tell me a story."
BARGE_IN = SENTENCES[3]  # "What time does the pharmacy close today?"
TALK_OVER_S = 0.5  # how long the story plays before the user talks over it
TURN_S = 25.0  # the most one turn may take, from the end of the user's speech to the end of the answer's audio
TOOLS = ToolsSchema(standard_tools=[FunctionSchema(
    name="get_weather", description="The weather in a city.", properties={"city": {"type": "string"}},
    required=["city"])])


@pytest.fixture(scope="module")
def server() -> Iterator[Server]:
    with scripted_agent() as running:
        yield running


class _Tap:
    """The service's WebSocket, keeping every server event (as JSON) before Pipecat reads it."""

    def __init__(self, websocket: Any, into: list[dict[str, Any]]) -> None:
        self._websocket = websocket
        self._into = into

    def __getattr__(self, name: str) -> Any:
        return getattr(self._websocket, name)

    async def __aiter__(self) -> AsyncIterator[str | bytes]:
        async for message in self._websocket:
            self._into.append(json.loads(message))
            yield message


class _Service(OpenAIRealtimeLLMService):
    """Pipecat's service unchanged, but for keeping what goes over its WebSocket either way."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.received: list[dict[str, Any]] = []
        self.sent: list[dict[str, Any]] = []

    async def _ws_send(self, realtime_message: dict[str, Any]) -> None:
        self.sent.append(realtime_message)
        await super()._ws_send(realtime_message)

    async def _receive_task_handler(self) -> None:
        self._websocket = _Tap(self._websocket, self.received)  # type: ignore[assignment]
        await super()._receive_task_handler()

    def of(self, kind: str) -> list[dict[str, Any]]:
        return [e for e in self.received if e["type"] == kind]


class _Speaker(BaseOutputTransport):
    """A transport's output: plays the bot's audio at real time (so the bot speaks, and stops, as it would)."""

    def __init__(self) -> None:
        super().__init__(TransportParams(audio_out_enabled=True))
        self._until = 0.0

    async def start(self, frame: StartFrame) -> None:
        await super().start(frame)
        await self.set_transport_ready(frame)

    async def write_audio_frame(self, frame: OutputAudioRawFrame) -> bool:
        now = time.monotonic()
        self._until = max(self._until, now) + len(frame.audio) / (2 * frame.sample_rate * frame.num_channels)
        await asyncio.sleep(self._until - now)
        return True


@dataclass
class _Seen:
    """The frames of interest that crossed the pipeline, each once, with when (time.monotonic())."""

    errors: list[str] = field(default_factory=list)
    interruptions: list[float] = field(default_factory=list)
    bot_started: list[float] = field(default_factory=list)
    bot_stopped: list[float] = field(default_factory=list)
    spoken: list[tuple[float, str]] = field(default_factory=list)  # the service's TTSTextFrames


class _Watch(BaseObserver):
    def __init__(self, service: OpenAIRealtimeLLMService) -> None:
        super().__init__()
        self.service = service
        self.seen = _Seen()
        self._ids: set[int] = set()

    async def on_push_frame(self, data: FramePushed) -> None:
        frame = data.frame
        if frame.id in self._ids:
            return
        self._ids.add(frame.id)
        now = time.monotonic()
        if isinstance(frame, ErrorFrame):
            self.seen.errors.append(frame.error)
        elif isinstance(frame, InterruptionFrame):
            self.seen.interruptions.append(now)
        elif isinstance(frame, BotStartedSpeakingFrame):
            self.seen.bot_started.append(now)
        elif isinstance(frame, BotStoppedSpeakingFrame):
            self.seen.bot_stopped.append(now)
        elif isinstance(frame, TTSTextFrame) and data.source is self.service:
            self.seen.spoken.append((now, frame.text))

    def said_since(self, since: float) -> str:
        return "".join(text for at, text in self.seen.spoken if at >= since)


class _Mic:
    """A transport's input: 20 ms frames at real time, of what the user says, else silence."""

    def __init__(self, worker: PipelineWorker) -> None:
        self._worker = worker
        self._pending = bytearray()
        self._quiet = asyncio.Event()
        self._quiet.set()

    async def run(self) -> None:
        due = time.monotonic()
        while True:
            chunk = bytes(self._pending[:FRAME_BYTES]).ljust(FRAME_BYTES, b"\0")
            del self._pending[:FRAME_BYTES]
            if not self._pending:
                self._quiet.set()
            await self._worker.queue_frame(InputAudioRawFrame(chunk, RATE, 1))
            due += FRAME_S
            await asyncio.sleep(max(0.0, due - time.monotonic()))

    async def say(self, pcm: bytes) -> float:
        """Speak ``pcm`` and wait until it is all sent; when the speech began (time.monotonic())."""
        self._quiet.clear()
        began = time.monotonic()
        self._pending.extend(pcm)
        await self._quiet.wait()
        return began


async def _until(done: Callable[[], bool], timeout: float) -> bool:
    """Wait for ``done()``, at most ``timeout`` seconds; whether it came."""
    deadline = time.monotonic() + timeout
    while not done():
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(0.05)
    return True


@dataclass
class _Run:
    service: _Service
    seen: _Seen
    context: LLMContext
    calls: list[dict[str, Any]]  # get_weather's arguments, each time Pipecat ran it
    log: list[str]  # Pipecat's warnings and errors
    late: list[str]  # the waits that ran out, in order
    marks: dict[str, float]  # when each step began (time.monotonic())


async def _converse(server: Server) -> _Run:
    service = _Service(api_key="unused", base_url=f"{server.ws_url}/v1/realtime")
    calls: list[dict[str, Any]] = []

    async def get_weather(params: FunctionCallParams) -> None:
        calls.append(dict(params.arguments))
        await params.result_callback({"city": params.arguments.get("city"), "conditions": "sunny"})

    service.register_function("get_weather", get_weather)
    context = LLMContext([{"role": "user", "content": "Hello!"}], tools=TOOLS)
    user, assistant = LLMContextAggregatorPair(context)
    watch = _Watch(service)
    worker = PipelineWorker(Pipeline([user, service, _Speaker(), assistant]),
                            params=PipelineParams(audio_in_sample_rate=RATE, audio_out_sample_rate=RATE),
                            observers=[watch])
    runner = WorkerRunner(handle_sigint=False)
    await runner.add_workers(worker)
    seen, late, marks = watch.seen, [], {}
    weather, story, barge_in = (speak_pcm16(text, RATE) for text in (WEATHER, STORY_ASK, BARGE_IN))  # espeak-ng blocks

    def answered(text: str, since: float) -> Callable[[], bool]:
        """The bot has said ``text`` since ``since``, and then stopped speaking."""
        return lambda: (normalise(text) in normalise(watch.said_since(since))
                        and any(t > max(at for at, _ in seen.spoken) for t in seen.bot_stopped))

    async def wait(name: str, done: Callable[[], bool], timeout: float = TURN_S) -> None:
        if not await _until(done, timeout):
            late.append(name)

    log: list[str] = []
    sink = logger.add(lambda message: log.append(message.record["message"]), level="WARNING")
    running = asyncio.create_task(runner.run())
    mic = _Mic(worker)
    listening = asyncio.create_task(mic.run())
    try:
        marks["greeting"] = time.monotonic()
        await worker.queue_frame(LLMRunFrame())
        await wait("the greeting", answered(REPLY, marks["greeting"]))

        marks["weather"] = await mic.say(weather)
        await wait("get_weather run by Pipecat", lambda: bool(calls))
        await wait("the answer to the tool's result", answered(SUNNY, marks["weather"]))

        marks["story"] = await mic.say(story)
        await wait("the story playing", lambda: any(t > marks["story"] for t in seen.bot_started)
                   and normalise(STORY).split()[0] in normalise(watch.said_since(marks["story"])))
        await asyncio.sleep(TALK_OVER_S)
        marks["barge_in"] = time.monotonic()
        barging = asyncio.create_task(mic.say(barge_in))
        await wait("the interruption", lambda: any(t > marks["barge_in"] for t in seen.interruptions), 10.0)
        await barging
        await wait("the answer after the barge-in", answered(REPLY, marks["barge_in"]))
    finally:
        listening.cancel()
        await asyncio.wait({listening})
        await worker.queue_frame(EndFrame())
        try:
            await asyncio.wait_for(asyncio.shield(running), 10.0)
        except TimeoutError:
            await worker.cancel()
            await running
        logger.remove(sink)
    return _Run(service, seen, context, calls, log, late, marks)


def test_pipecat_on_its_defaults_holds_a_conversation_with_a_tool_call_and_a_barge_in(server: Server) -> None:
    asked_before = len(scripted_thinker.ASKED)
    run = asyncio.run(_converse(server))
    service, seen = run.service, run.seen
    # What the think step was asked, each request's last message (a speculative request may come twice).
    asked = [messages[-1] for messages in scripted_thinker.ASKED[asked_before:]]

    def heard(word: str) -> bool:
        return any(m.get("role") == "user" and word in normalise(str(m.get("content"))) for m in asked)
    kinds = [e["type"] for e in service.received]

    # Nothing went wrong, on either side.
    assert seen.errors == [], seen.errors
    assert service.of("error") == []
    assert run.log == [], run.log
    assert run.late == [], f"waited in vain for {run.late}; the think step was asked {asked}; server events: {kinds}"

    # The session: Pipecat's own session.update, taken as it is.
    assert kinds[:2] == ["session.created", "session.updated"], kinds[:4]
    # One on session.created, one when the context comes (the first has the tools too if the context came first).
    updates = [e["session"] for e in service.sent if e["type"] == "session.update"]
    assert len(updates) == 2 and all(u.keys() <= {"type", "model", "tools"} for u in updates), updates
    assert [t["name"] for t in updates[-1]["tools"]] == ["get_weather"]
    assert {(u["type"], u["model"]) for u in updates} == {("realtime", "gpt-realtime-2.1")}

    # The greeting: the context's message went in as Pipecat's own item, and was answered.
    (hello,) = [e for e in service.sent if e["type"] == "conversation.item.create" and e["item"]["type"] == "message"]
    added = [e["item"]["id"] for e in service.of("conversation.item.added")]
    assert hello["item"]["id"] in added  # Pipecat matches its own items by the id it chose
    assert asked[0] == {"role": "user", "content": "Hello!"}

    # The tool: heard, called, run by Pipecat, its result sent back and answered.
    assert heard("weather"), asked
    assert run.calls == [{"city": "Paris"}]
    (call,) = [e["item"] for e in service.of("conversation.item.added") if e["item"]["type"] == "function_call"]
    assert call["name"] == "get_weather"
    (output,) = [e["item"] for e in service.sent
                 if e["type"] == "conversation.item.create" and e["item"]["type"] == "function_call_output"]
    assert output["call_id"] == call["call_id"] and json.loads(output["output"])["conditions"] == "sunny"
    assert any(m.get("role") == "tool" and m.get("tool_call_id") == call["call_id"] for m in asked), asked
    said = normalise(" ".join(text for at, text in seen.spoken if run.marks["weather"] <= at < run.marks["story"]))
    assert normalise(CHECKING) in said and normalise(SUNNY) in said, said
    assert any(m.get("role") == "tool" and m.get("tool_call_id") == call["call_id"]
               for m in run.context.get_messages() if isinstance(m, dict))

    # The barge-in: the user talked over the story while it played; Pipecat saw it (an InterruptionFrame) and
    # truncated the story's item at what it had played, which the server took.
    assert heard("story"), asked
    assert any(run.marks["barge_in"] < t for t in seen.interruptions)
    (story,) = [e for e in service.received if e["type"] == "response.done" and _said(e).startswith(STORY[:16])]
    story_item = story["response"]["output"][0]["id"]
    (truncate,) = [e for e in service.sent if e["type"] == "conversation.item.truncate"]
    assert truncate["item_id"] == story_item and 0 < truncate["audio_end_ms"] < 1000 * (TALK_OVER_S + 2), truncate
    (truncated,) = service.of("conversation.item.truncated")
    assert (truncated["item_id"], truncated["audio_end_ms"]) == (story_item, truncate["audio_end_ms"])
    # A story still being made when the user spoke was cancelled, as OpenAI's server does (turn_detected); one
    # made in full before (a fast server) was only truncated.
    barged = service.of("input_audio_buffer.speech_started")[-1]
    if service.received.index(story) > service.received.index(barged):
        assert story["response"]["status"] == "cancelled", story["response"]["status"]
        assert story["response"]["status_details"] == {"type": "cancelled", "reason": "turn_detected"}

    # The words that interrupted were heard and answered.
    assert heard("pharmacy"), asked
    assert normalise(REPLY) in normalise("".join(text for at, text in seen.spoken if at > run.marks["barge_in"]))
    answers = [_said(e) for e in service.of("response.done") if e is not story]
    assert answers == [REPLY, CHECKING, SUNNY, REPLY]
    assert all(e["response"]["status"] == "completed" for e in service.of("response.done") if e is not story)

    # Every server event is one the openai SDK's GA types hold exactly, and Pipecat's own models parse.
    assert _misfits(service.received) == []


def _said(done: dict[str, Any]) -> str:
    """What a ``response.done``'s reply said (its message's audio transcript)."""
    return "".join(part.get("transcript") or "" for item in done["response"]["output"] if item["type"] == "message"
                   for part in item["content"])


def _misfits(received: list[dict[str, Any]]) -> list[str]:
    """What the SDK's types, strictly, or Pipecat's models make of the events: each kind of complaint once."""
    found: dict[str, str] = {}
    for event in received:
        for check in (check_event, lambda e: pipecat_events.parse_server_event(json.dumps(e))):
            try:
                check(event)
            except Exception as exc:  # noqa: BLE001 - each checker says what it rejects its own way
                found.setdefault(f"{event['type']}: {str(exc).splitlines()[0]}", str(exc)[:600])
    return list(found.values())
