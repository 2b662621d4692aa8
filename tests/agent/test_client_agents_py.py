"""OpenAI's Agents SDK for Python (``openai-agents``, ``agents.realtime``), on its default settings, holds a
voice conversation with a real ``lyre serve`` over ``/v1/realtime``: a spoken turn, a tool call the SDK runs
itself, and an interruption of a reply while its audio comes in.

The SDK pins websockets<17, so it runs in its own virtual environment (.venv-clients, made by
scripts/test.sh) as a separate process, tests/clients/agents_py_client.py, which prints what it saw as JSON
lines: every raw server event the SDK received, the client events it sent, its session events, the tool
runs, and every log record at WARNING or above. The chat model is tests/scripted_thinker.py, so each
reply's text is known; the demo TTS speaks noise, so audio is checked by its events, not its sound.

On its defaults the SDK opens with ``session.update`` (``semantic_vad`` with ``interrupt_response``,
``gpt-4o-mini-transcribe``, voice ``ash``, pcm at 24 kHz, its tools, model ``gpt-realtime-2.1``), then on
``session.created`` another carrying ``tracing: "auto"``. It asks for ``conversation.item.retrieve`` after
each transcription and truncation, truncates the item it was playing when speech starts, and runs a tool on
``response.output_item.done`` with a completed ``function_call``, answering with a ``function_call_output``
item and ``response.create`` once the response is done.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any

import pydantic
import pytest
from openai.types.realtime import RealtimeServerEvent
from realtime_types import check_event
from realtime_clients import DriverLines, scripted_agent
from scripted_thinker import SUNNY
from serving import Server
from speech import normalise, speak_pcm16

ROOT = Path(__file__).resolve().parents[2]
CLIENT_PYTHON = ROOT / ".venv-clients" / "bin" / "python"
DRIVER = ROOT / "tests" / "clients" / "agents_py_client.py"

_BY_TYPE: pydantic.TypeAdapter[Any] = pydantic.TypeAdapter(
    Annotated[RealtimeServerEvent, pydantic.Field(discriminator="type")])
_UNION = re.compile(r"union\[[^\]]*\]")  # pydantic's name for the union of every server event: long, and no help
_TAGS = re.compile(r"does not match any of the expected tags: [^\n]*")


def _short(text: str) -> str:
    return _TAGS.sub("is no event type the SDK knows", _UNION.sub("union[...]", text))


WEATHER = "What is the weather in Paris?"
ASK_STORY = "Tell me a story."
OVER = "Stop, thank you."


@pytest.fixture(scope="module")
def server() -> Iterator[Server]:
    with scripted_agent() as running:
        yield running


class Run(DriverLines):
    """The driver's JSON lines, by kind."""

    def __init__(self, lines: list[dict[str, Any]], stderr: str, returncode: int) -> None:
        super().__init__(lines)
        self.stderr = stderr
        self.returncode = returncode

    @property
    def server(self) -> list[dict[str, Any]]:
        return [line["event"] for line in self.of("server")]

    @property
    def sent(self) -> list[dict[str, Any]]:
        return [line["event"] for line in self.of("sent")]

    def server_of(self, kind: str) -> list[dict[str, Any]]:
        return [e for e in self.server if e["type"] == kind]

    def sent_of(self, kind: str) -> list[dict[str, Any]]:
        return [e for e in self.sent if e["type"] == kind]

    def session_of(self, kind: str) -> list[dict[str, Any]]:
        return [line for line in self.of("session") if line["type"] == kind]

    def phase(self, name: str) -> dict[str, Any] | None:
        """The driver's step ``name``, if it was reached."""
        return next((line for line in self.of("phase") if line["name"] == name and line["ok"]), None)


def _converse(server: Server, tmp_path: Path) -> Run:
    paths = []
    for name, text in (("weather", WEATHER), ("story", ASK_STORY), ("over", OVER)):
        path = tmp_path / f"{name}.pcm"
        path.write_bytes(speak_pcm16(text))
        paths += [f"--{name}", str(path)]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VIRTUAL_ENV", "PYTHON"))}
    command = [str(CLIENT_PYTHON), str(DRIVER), "--url", f"{server.ws_url}/v1/realtime?model=lyre", *paths]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=150, env=env, cwd=ROOT, check=False)
        stdout, stderr, returncode = done.stdout, done.stderr, done.returncode
    except subprocess.TimeoutExpired as exc:  # killed: what it printed so far still tells where it stuck
        stdout, stderr, returncode = _text(exc.stdout), _text(exc.stderr) + "\n(timed out)", -9
    lines = [json.loads(line) for line in stdout.splitlines() if line.startswith("{") and line.endswith("}")]
    return Run(lines, stderr, returncode)


def _text(output: str | bytes | None) -> str:
    return output.decode(errors="replace") if isinstance(output, bytes) else output or ""


def _why(event: dict[str, Any], failure: str) -> str:
    """check_event's failure, with pydantic's error for the event's own type (as the Agents SDK reads it,
    by its ``type``) in place of one for each of the union's 80-odd members."""
    if "the SDK rejects it" in failure:
        try:
            _BY_TYPE.validate_python(event)
        except pydantic.ValidationError as exc:
            return f"{event['type']}: the SDK rejects it: {_short(str(exc))}"[:900]
    return failure[:900]


def _response_transcript(done: dict[str, Any]) -> str:
    return "".join(part.get("transcript") or part.get("text") or ""
                   for item in done["response"]["output"] if item["type"] == "message"
                   for part in item.get("content", []))


def test_the_agents_sdk_on_its_defaults_talks_calls_a_tool_and_is_interrupted(server: Server, tmp_path: Path) -> None:
    run = _converse(server, tmp_path)
    problems = list(dict.fromkeys(_short(problem) for problem in _problems(run)))
    steps = ", ".join(f"{line['name']} {line['t']:.1f}s{'' if line['ok'] else ' MISSED'}" for line in run.of("phase"))
    assert not problems, "\n".join([*problems, f"(the driver's steps: {steps})"])


def _problems(run: Run) -> list[str]:
    """Where the conversation fell short of what OpenAI's server gives this client, one line each."""
    problems: list[str] = []

    def check(ok: object, problem: str) -> None:
        if not ok:
            problems.append(problem)

    # The driver ran to its end, and the session raised nothing.
    check(run.returncode == 0 and run.of("end"), f"the driver failed (rc {run.returncode}): {run.stderr[-3000:]}")
    for line in run.of("exception"):
        problems.append(f"the session raised {line['error']}\n{line.get('traceback', '')[-1500:]}")
    # No error reached the client, and the SDK complained of nothing. (The SDK's error events mirror the
    # server's error events, listed once; those of its own, such as an event its types reject, are listed.)
    for event in run.server_of("error"):
        problems.append(f"server error event: {json.dumps(event['error'])[:500]}")  # ids are null: repeats fold
    for line in run.session_of("error"):
        if not line["error"].startswith("RealtimeError("):
            problems.append(f"SDK error event: {_short(line['error'])[:900]}")
    for line in run.of("model"):
        if line["type"] != "error":
            problems.append(f"SDK model {line['type']}: {line['error'][:800]} ({line.get('context')})")
    for line in run.of("log"):
        problems.append(f"log {line['level']} {line['logger']}: {line['message'][:800]}")
    # Every server event is one the openai SDK's types read, with no field they do not name.
    rejected: dict[str, str] = {}
    for event in run.server:
        try:
            check_event(event)
        except AssertionError as exc:
            rejected.setdefault(event["type"], _why(event, str(exc)))
    problems += [f"strict types: {why}" for why in rejected.values()]
    missed = [line["name"] for line in run.of("phase") if not line["ok"]]
    check(not missed, f"steps not reached: {missed}")

    # The SDK's session.update was taken whole: its semantic_vad (with interrupt_response, which the SDK reads
    # to leave the cancel to the server), its tool, pcm at 24 kHz.
    kinds = [e["type"] for e in run.server]
    check(kinds[:1] == ["session.created"], f"first server event: {kinds[:1]}")
    updated = run.server_of("session.updated")
    check(updated, "no session.updated")
    if updated:
        session = updated[0]["session"]
        detection = session.get("audio", {}).get("input", {}).get("turn_detection") or {}
        check(detection.get("type") == "semantic_vad" and detection.get("interrupt_response") is True,
              f"session.updated turn_detection: {detection}")
        check([t.get("name") for t in session.get("tools", [])] == ["get_weather"],
              f"session.updated tools: {session.get('tools')}")
        check(session.get("audio", {}).get("output", {}).get("format") == {"type": "audio/pcm", "rate": 24000},
              f"session.updated output format: {session.get('audio', {}).get('output', {}).get('format')}")

    dones = {e["response"]["id"]: e for e in run.server_of("response.done")}

    # 1. The spoken turn: heard, transcribed, answered; the SDK put the user's item in its history.
    order = ["input_audio_buffer.speech_started", "input_audio_buffer.speech_stopped", "input_audio_buffer.committed",
             "conversation.item.input_audio_transcription.completed", "response.created"]
    check(all(k in kinds for k in order) and [kinds.index(k) for k in order] == sorted(kinds.index(k) for k in order),
          f"the spoken turn's events: {[k for k in kinds if k.startswith(('input_audio', 'conversation.item.i'))][:6]}")
    heard = run.server_of("conversation.item.input_audio_transcription.completed")
    check(heard and "weather" in normalise(heard[0]["transcript"]), f"heard: {[e['transcript'] for e in heard]}")
    user_items = [line["item"] for line in run.session_of("history_added") if line["item"].get("role") == "user"]
    check(user_items, "the SDK's history has no user item")

    # 2. The tool: the agent called it, the SDK ran it once and answered it, and the reply after it is SUNNY.
    tools = run.of("tool")
    check([t["arguments"] for t in tools] == [{"city": "Paris"}], f"tool runs: {[t['arguments'] for t in tools]}")
    outputs = [e["item"] for e in run.sent_of("conversation.item.create")
               if e["item"]["type"] == "function_call_output"]
    asked = run.phase("weather: reply")
    checking = dones.get(asked["response_id"]) if asked else None
    calls = [o for o in checking["response"]["output"] if o["type"] == "function_call"] if checking else []
    check([c.get("name") for c in calls] == ["get_weather"], f"the weather reply's calls: {calls}")
    if calls:
        check([o["call_id"] for o in outputs][:1] == [calls[0]["call_id"]],
              f"function_call_output sent for {[o['call_id'] for o in outputs]}, the call was {calls[0]['call_id']}")
    after = run.phase("after tool: response.done")
    sunny = dones.get(after["response_id"]) if after else None
    check(sunny and sunny["response"]["status"] == "completed" and _response_transcript(sunny) == SUNNY,
          f"the reply after the tool: {sunny and (sunny['response']['status'], _response_transcript(sunny))}")

    # 3. The interruption: the story's audio came, the user spoke over it, the SDK took the audio as
    # interrupted and truncated the item it was playing, which the server truncated; the story's response
    # ended cancelled, and the reply to the interruption began to speak.
    story = run.phase("story: reply")
    story_id = story["response_id"] if story else None
    story_items = {e["item_id"] for e in run.server_of("response.output_audio.delta") if e["response_id"] == story_id}
    check(story_items, "the story's response had no audio")
    interrupted = [line["item_id"] for line in run.session_of("audio_interrupted")]
    check(story_items & set(interrupted), f"audio_interrupted for {interrupted}, the story spoke {story_items}")
    truncates = [e for e in run.sent_of("conversation.item.truncate") if e["item_id"] in story_items]
    check(truncates, f"the SDK truncated no story item: {run.sent_of('conversation.item.truncate')}")
    truncated = [e for e in run.server_of("conversation.item.truncated") if e["item_id"] in story_items]
    check(truncated and truncates and truncated[0]["audio_end_ms"] == truncates[0]["audio_end_ms"],
          f"truncate {truncates[:1]} answered with {truncated[:1]}")
    story_done = dones.get(story_id or "")
    check(story_done and story_done["response"]["status"] == "cancelled",
          f"the story's response: {story_done and story_done['response']['status']}")
    over = run.phase("over: reply")
    check(over and any(e["response_id"] == over["response_id"] for e in run.server_of("response.output_audio.delta")),
          "the interruption's reply spoke no audio")
    # The SDK asks for the item it was playing back after each transcription and truncation: each is answered.
    retrieved = {e["item"]["id"] for e in run.server_of("conversation.item.retrieved")}
    unanswered = [e["item_id"] for e in run.sent_of("conversation.item.retrieve") if e["item_id"] not in retrieved]
    check(not unanswered, f"conversation.item.retrieve unanswered: {unanswered}")
    return problems
