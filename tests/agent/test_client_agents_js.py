"""OpenAI's Agents SDK for JavaScript (``@openai/agents-realtime``, pinned in tests/clients/js) as a real client of
the voice agent: a RealtimeSession over its WebSocket transport, on the SDK's own defaults (semantic VAD, its
session.update with a zod tool), talking to a real ``lyre serve --stt --llm-url`` whose think step is the
scripted endpoint (tests/scripted_thinker.py).

tests/clients/js/agents_js_client.mjs holds the conversation, spoken at real time through session.sendAudio:
a question about the weather (the SDK runs its own get_weather and the reply to its output follows), a request
for a story, and a sentence spoken over the story's reply. It prints what it saw as JSON lines; the tests here
read one run of it (module-scoped: a minute of real-time speech, held once). scripts/test.sh installs the SDK
(``npm ci`` in tests/clients/js).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from realtime_types import check_event
from realtime_clients import DriverLines, scripted_agent
from scripted_thinker import CHECKING, REPLY, STORY, SUNNY
from serving import Server
from speech import speak_pcm16

JS = Path(__file__).resolve().parents[1] / "clients" / "js"
DRIVER = JS / "agents_js_client.mjs"
TURNS = ("What is the weather like in Paris today?", "Please tell me a story.", "That is enough for now thank you.")
_RUN_S = 120  # the driver's own phase limits add up to about 60 s of conversation at most


@pytest.fixture(scope="module")
def server() -> Iterator[Server]:
    with scripted_agent() as running:
        yield running


class Run(DriverLines):
    """What the driver printed, by kind."""

    def __init__(self, lines: list[dict[str, Any]], stderr: str, server_log: str) -> None:
        super().__init__(lines)
        self.stderr = stderr
        self.server_log = server_log

    @property
    def events(self) -> list[dict[str, Any]]:
        return [line["event"] for line in self.of("server")]

    def sent(self, type_: str) -> list[dict[str, Any]]:
        return [line["event"] for line in self.of("client") if line.get("event", {}).get("type") == type_]

    def index(self, kind: str, **fields: Any) -> int:
        """The first line of ``kind`` with these fields, as an index into ``lines``; -1 if none."""
        return next((i for i, line in enumerate(self.lines)
                     if line["kind"] == kind and all(line.get(k) == v for k, v in fields.items())), -1)

    def said_in(self, response: dict[str, Any]) -> str:
        """The transcripts of the audio a response.done's output holds."""
        return " ".join(part.get("transcript") or part.get("text") or ""
                        for item in response.get("output") or [] if item.get("type") == "message"
                        for part in item.get("content") or [])

    def trail(self) -> str:
        """The run in short, for a failure message: every line but the audio."""
        kept = [line for line in self.lines if line.get("event", {}).get("type") != "response.output_audio.delta"]
        text = "\n".join(json.dumps(line)[:400] for line in kept)
        return (f"{text[-12000:]}\n--- driver stderr ---\n{self.stderr[-3000:]}"
                f"\n--- server ---\n{self.server_log[-3000:]}")


@pytest.fixture(scope="module")
def run(server: Server) -> Run:
    node = shutil.which("node")
    assert node is not None, "the JS Agents SDK test needs Node.js (20 or later) on PATH"
    assert (JS / "node_modules" / "@openai" / "agents-realtime").is_dir(), (
        "the JS Agents SDK is not installed: run scripts/test.sh, or `npm ci` in tests/clients/js")
    with tempfile.TemporaryDirectory(prefix="lyre-agents-js-") as folder:
        paths = []
        for i, text in enumerate(TURNS):
            path = os.path.join(folder, f"turn{i}.pcm")
            with open(path, "wb") as f:
                f.write(speak_pcm16(text))
            paths.append(path)
        done = subprocess.run([node, str(DRIVER), f"{server.ws_url}/v1/realtime?model=lyre", *paths],
                              capture_output=True, text=True, timeout=_RUN_S, cwd=JS)
    lines = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    result = Run(lines, done.stderr, server.output())
    assert done.returncode == 0 and result.of("done"), f"the driver failed ({done.returncode}):\n{result.trail()}"
    return result


def test_every_server_event_is_a_ga_event(run: Run) -> None:
    """Each raw event the transport saw is one the openai SDK's types read, with no field they do not name."""
    assert run.events, run.trail()
    for event in run.events:
        check_event(event)


def test_the_sdk_parses_every_event_and_reports_nothing(run: Run) -> None:
    """No event of a type the SDK knows fails its zod schema (it would drop it in silence), nothing reaches the
    session as an `error`, the SDK logs no error or warning, and nothing in it throws."""
    problems = run.of("parse_failure") + run.of("error") + run.of("log") + run.of("crash")
    assert not problems, "\n".join(json.dumps(p)[:1500] for p in problems) + "\n\n" + run.trail()
    assert not [e for e in run.events if e["type"] == "error"], run.trail()


def test_the_sdk_session_update_is_taken_whole(run: Run) -> None:
    """The SDK's first session.update (semantic VAD, pcm at 24 kHz, a transcription model, its tool) is taken
    whole: the session.updated after it has the tool and semantic VAD, and the audio formats it asked for."""
    update = run.sent("session.update")[0]["session"]
    assert update["audio"]["input"]["turn_detection"] == {"type": "semantic_vad"}
    assert [tool["name"] for tool in update["tools"]] == ["get_weather"]
    updated = [e["session"] for e in run.events if e["type"] == "session.updated"]
    assert updated, run.trail()
    taken = next((s for s in updated if [t.get("name") for t in s.get("tools") or []] == ["get_weather"]), None)
    assert taken is not None, f"no session.updated has the SDK's tool: {updated}"
    assert taken["audio"]["input"]["turn_detection"]["type"] == "semantic_vad", taken
    assert taken["audio"]["input"]["format"] == {"type": "audio/pcm", "rate": 24000}, taken
    assert taken["audio"]["output"]["format"] == {"type": "audio/pcm", "rate": 24000}, taken
    assert taken["output_modalities"] == ["audio"], taken
    assert run.of("timeout") == [] or run.of("timeout")[0]["phase"] != "connect", run.trail()


def test_a_spoken_turn_is_heard_and_answered_with_speech(run: Run) -> None:
    """The first spoken turn: VAD events, a committed user item whose transcript the SDK fetches back
    (conversation.item.retrieve), and a response with audio."""
    types = [e["type"] for e in run.events]
    for expected in ("input_audio_buffer.speech_started", "input_audio_buffer.speech_stopped",
                     "input_audio_buffer.committed", "conversation.item.input_audio_transcription.completed",
                     "response.created", "response.output_audio.delta", "response.done"):
        assert expected in types, f"no {expected}:\n{run.trail()}"
    heard = next(e for e in run.events if e["type"] == "conversation.item.input_audio_transcription.completed")
    assert "weather" in heard["transcript"].lower(), heard
    # The SDK asks for the transcribed item back; the server answers with it.
    asked = [e["item_id"] for e in run.sent("conversation.item.retrieve")]
    assert heard["item_id"] in asked, run.trail()
    retrieved = [e for e in run.events if e["type"] == "conversation.item.retrieved"
                 and e["item"]["id"] == heard["item_id"]]
    assert retrieved, f"no conversation.item.retrieved for {heard['item_id']}:\n{run.trail()}"
    assert retrieved[0]["item"]["content"][0]["type"] == "input_audio"
    assert "weather" in (retrieved[0]["item"]["content"][0].get("transcript") or "").lower(), retrieved[0]


def test_the_sdk_runs_its_tool_and_the_reply_to_its_output_follows(run: Run) -> None:
    """The reply to the weather question says CHECKING and calls get_weather; the SDK runs it (its own zod
    tool) once, sends the output and asks for a response, and that response says SUNNY."""
    ran = run.of("tool")
    assert [t["arguments"] for t in ran] == [{"city": "Paris"}], run.trail()
    call = next((e for e in run.events if e["type"] == "response.output_item.done"
                 and e["item"].get("type") == "function_call"), None)
    assert call is not None and call["item"]["name"] == "get_weather", run.trail()
    assert call["item"]["status"] == "completed" and json.loads(call["item"]["arguments"]) == {"city": "Paris"}
    outputs = [o["item"] for o in run.sent("conversation.item.create") if o["item"]["type"] == "function_call_output"]
    assert [o["call_id"] for o in outputs] == [call["item"]["call_id"]], run.trail()
    dones = [e["response"] for e in run.events if e["type"] == "response.done"]
    calling = next(r for r in dones if any(i.get("type") == "function_call" for i in r.get("output") or []))
    assert calling["status"] == "completed" and CHECKING in run.said_in(calling), calling
    # The response the SDK asked for (its response.create goes once the calling one is done) comes, and is SUNNY.
    assert run.sent("response.create"), run.trail()
    after = dones[dones.index(calling) + 1:]
    assert after and after[0]["status"] == "completed" and SUNNY in run.said_in(after[0]), run.trail()


def test_talking_over_a_reply_interrupts_it(run: Run) -> None:
    """Speech over the story's reply: the server hears it (speech_started), the SDK stops its audio and
    truncates the reply at what it played (conversation.item.truncate; a response.cancel too unless the
    session says the server cancels by itself), the reply ends cancelled, the truncated item comes back
    retrieved, and the new turn is answered."""
    story = [e for e in run.events if e["type"] == "response.output_audio_transcript.delta"
             and e["delta"].startswith(STORY.split()[0])]
    assert story, "the story was never told:\n" + run.trail()
    barge = run.index("phase", name="say barge")
    assert barge >= 0, run.trail()
    window = run.lines[barge:]
    later = [line["event"] for line in window if line["kind"] == "server"]
    sent = [line["event"] for line in window if line["kind"] == "client"]
    assert "input_audio_buffer.speech_started" in [e["type"] for e in later], run.trail()
    assert any(line["kind"] == "session" and line["what"] == "audio_interrupted" for line in window), run.trail()
    truncate = [e for e in sent if e["type"] == "conversation.item.truncate"]
    assert [e["item_id"] for e in truncate] == [story[0]["item_id"]], run.trail()
    updated = [e["session"] for e in run.events if e["type"] == "session.updated"]
    if not updated[-1]["audio"]["input"]["turn_detection"].get("interrupt_response"):
        assert [e for e in sent if e["type"] == "response.cancel"], run.trail()
    truncated = [e for e in later if e["type"] == "conversation.item.truncated"]
    assert [(t["item_id"], t["content_index"], t["audio_end_ms"]) for t in truncated] == \
        [(story[0]["item_id"], 0, truncate[0]["audio_end_ms"])], run.trail()
    assert story[0]["item_id"] in [e["item_id"] for e in sent if e["type"] == "conversation.item.retrieve"]
    assert any(e["type"] == "conversation.item.retrieved" and e["item"]["id"] == story[0]["item_id"]
               for e in later), run.trail()
    # A reply still being made when the user spoke is cancelled (one made in full before is only truncated).
    made = [line["event"] for line in run.lines[:barge] if line["kind"] == "server"
            and line["event"]["type"] == "response.done" and line["event"]["response"]["id"] == story[0]["response_id"]]
    if not made:
        dones = [e["response"] for e in later if e["type"] == "response.done"]
        assert dones and dones[0]["id"] == story[0]["response_id"] and dones[0]["status"] == "cancelled", run.trail()
    # The sentence said over it is answered.
    answers = [e for e in later if e["type"] == "response.created" and e["response"]["id"] != story[0]["response_id"]]
    assert answers, run.trail()
    answer = "".join(e["delta"] for e in later if e["type"] == "response.output_audio_transcript.delta"
                     and e["response_id"] == answers[-1]["response"]["id"])
    assert REPLY in answer, run.trail()


def test_the_sdk_history_is_the_conversation_in_order(run: Run) -> None:
    """The SDK places each item after the one its conversation.item.added names as previous_item_id (null: at
    the front): its history is the conversation in order, each turn with what was said in it."""
    history = run.of("history")[0]["history"]

    def said(item: dict[str, Any]) -> str:
        if item["type"] == "function_call":
            return f"call {item['name']} -> {item.get('output')}"
        return item["role"] + ": " + " ".join(part.get("transcript") or part.get("text") or ""
                                              for part in item["content"])

    told = [said(item) for item in history]
    kinds = [item.get("role") or item["type"] for item in history]
    assert kinds[:7] == ["user", "assistant", "function_call", "assistant", "user", "assistant", "user"], \
        "\n".join(told)
    assert "weather" in told[0].lower() and CHECKING in told[1] and SUNNY in told[3], told
    assert told[2] == "call get_weather -> It is sunny in Paris.", told
    assert "story" in told[4].lower() and STORY.split()[0] in told[5], told
