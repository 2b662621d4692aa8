"""LiveKit Agents' OpenAI realtime plugin (``livekit.plugins.openai.realtime.RealtimeModel``, livekit-agents and
livekit-plugins-openai 1.8.9) as the client of lyre's ``/v1/realtime`` agent, on the plugin's own defaults.

The plugin runs in its own virtual environment (.venv-clients, tests/clients/requirements.txt), in
tests/clients/livekit_client.py, driven as LiveKit's AgentSession drives it but without a room: a greeting by
``generate_reply``, a spoken question answered with a tool call, the tool's output sent back and answered, a
story interrupted and truncated, an item deleted from the history. The server is a real ``lyre serve`` that
thinks with the scripted chat endpoint (tests/scripted_thinker.py): ``REPLY`` to a greeting, ``CHECKING`` and
``get_weather({"city": "Paris"})`` to the weather, ``SUNNY`` to the tool's output, ``STORY`` to a story.

The driver prints what it saw as JSON lines; each test here holds one thing the plugin needs of the server to
what OpenAI's GA Realtime server does, and every raw server event to the openai SDK's types, strictly.
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from realtime_types import check_event
from realtime_clients import DriverLines, scripted_agent
from scripted_thinker import CHECKING, REPLY, STORY, SUNNY
from speech import normalise, speak_pcm16

ROOT = Path(__file__).resolve().parents[2]
CLIENTS = ROOT / ".venv-clients" / "bin" / "python"
DRIVER = ROOT / "tests" / "clients" / "livekit_client.py"
WEATHER = "What is the weather like today?"  # short: about 2 s of speech


class Run(DriverLines):
    """What the driver printed, by kind."""

    def __init__(self, lines: list[dict[str, Any]], stderr: str, server_log: str) -> None:
        super().__init__(lines)
        self.stderr = stderr
        self.server_log = server_log

    def server(self, type_: str | None = None) -> list[dict[str, Any]]:
        return [line["event"] for line in self.of("server") if type_ is None or line["event"]["type"] == type_]

    def client(self, type_: str) -> list[dict[str, Any]]:
        return [line["event"] for line in self.of("client") if line["event"]["type"] == type_]

    def step(self, name: str) -> dict[str, Any]:
        steps = [line for line in self.of("step") if line["name"] == name]
        assert steps, f"the driver never reported step {name!r}:\n{self.tail()}"
        return {**steps[0]["result"], "calls": steps[0]["calls"]}

    def tail(self) -> str:
        return "\n".join(json.dumps(line)[:300] for line in self.lines[-15:]) + "\n" + self.stderr[-2000:]


@pytest.fixture(scope="module")
def run() -> Iterator[Run]:
    with tempfile.NamedTemporaryFile(suffix=".pcm") as weather:
        weather.write(speak_pcm16(WEATHER))
        weather.flush()
        with scripted_agent() as server:
            env = {k: v for k, v in os.environ.items() if k not in ("OPENAI_API_KEY", "OPENAI_BASE_URL")}
            driver = subprocess.Popen([str(CLIENTS), str(DRIVER), f"{server.url}/v1", weather.name],
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
            try:
                stdout, stderr = driver.communicate(timeout=240)  # each step bounds itself well within this
            except subprocess.TimeoutExpired:
                driver.kill()
                stdout, stderr = driver.communicate()
            lines = []
            for line in stdout.splitlines():
                try:
                    lines.append(json.loads(line))
                except ValueError:
                    continue
            result = Run(lines, stderr, server.output())
    assert driver.returncode == 0, f"the driver exited with {driver.returncode}:\n{result.tail()}"
    assert result.of("done"), f"the driver did not finish:\n{result.tail()}"
    yield result


def test_every_server_event_is_one_the_openai_sdk_reads(run: Run) -> None:
    """Every raw event the plugin received, to the openai SDK's types with no field they lack (the plugin
    asked for no lyre extension, so no lyre.* event either); each kind of failure named once."""
    events = run.server()
    assert events[0]["type"] == "session.created"
    failures: dict[str, str] = {}
    for event in events:
        try:
            check_event(event)
        except AssertionError as exc:
            first = str(exc).splitlines()[0]
            failures.setdefault(first[:160], str(exc)[:600])
    assert not failures, "\n\n".join(failures.values())


def test_no_error_event_and_no_plugin_warning(run: Run) -> None:
    assert not run.server("error"), [e["error"] for e in run.server("error")]
    assert not run.of("error"), run.of("error")
    assert not run.of("log"), [(line["level"], line["logger"], line["message"], line["extra"]) for line in run.of("log")]


def test_the_default_session_update_is_taken_whole(run: Run) -> None:
    """The plugin's first session.update (semantic_vad, voice marin, gpt-4o-mini-transcribe, max_output_tokens
    inf, ...) then its instructions and its tools, each answered by a session.updated that has it."""
    updates = run.client("session.update")
    updated = run.server("session.updated")
    assert len(updates) == 3 and len(updated) == 3, (len(updates), [e["type"] for e in run.server()][:12])
    first = updated[0]["session"]
    assert first["audio"]["input"]["turn_detection"]["type"] == "semantic_vad"
    assert first["audio"]["input"]["format"] == {"type": "audio/pcm", "rate": 24000}
    assert first["output_modalities"] == ["audio"]
    assert "Answer in one short sentence." in updated[1]["session"]["instructions"]
    assert [tool["name"] for tool in updated[2]["session"]["tools"]] == ["get_weather"]


def test_generate_reply_gets_its_response(run: Run) -> None:
    """generate_reply's future settles at the response.created whose response.metadata carries the
    client_event_id of its response.create, and the generation's text and audio streams end."""
    greet = run.step("greet")
    sent = run.client("response.create")[0]
    created = run.server("response.created")
    echoed = [e["response"].get("metadata") for e in created]
    assert {"client_event_id": sent["event_id"]} in echoed, (sent, echoed)
    assert greet["ok"], greet
    assert greet["user_initiated"]
    [message] = greet["messages"]
    assert message["text"].strip() == REPLY and message["audio_ms"] > 0, message
    assert message["modalities"] == ["audio", "text"]


def test_a_spoken_question_is_answered_with_a_tool_call(run: Run) -> None:
    spoken = run.step("spoken")
    assert spoken["ok"] and spoken["speech_started"] >= 1, spoken
    assert any("weather" in normalise(t["transcript"]) for t in spoken["transcripts"]), spoken["transcripts"]
    assert not spoken["user_initiated"]  # the server's turn detection made it
    assert [m["text"].strip() for m in spoken["messages"]] == [CHECKING], spoken["messages"]
    [call] = spoken["calls"]
    assert call["name"] == "get_weather" and json.loads(call["arguments"]) == {"city": "Paris"}, call


def test_the_tool_output_goes_back_and_is_answered(run: Run) -> None:
    """The output as a conversation.item.create after the call (previous_item_id the call's id, the item's id
    the plugin's own), confirmed by conversation.item.added with that id, then answered by generate_reply."""
    reply = run.step("tool_reply")
    [call] = run.step("spoken")["calls"]
    creates = [e for e in run.client("conversation.item.create") if e["item"]["type"] == "function_call_output"]
    assert creates, "the plugin sent no function_call_output"
    sent = creates[0]["item"]
    # the plugin puts it after the last item of its history: the call, when the server's previous_item_ids
    # built that history in order
    assert creates[0]["previous_item_id"] == call["id"], (creates[0], call)
    added = [e for e in run.server("conversation.item.added") if e["item"].get("id") == sent["id"]]
    assert added and added[0]["item"]["call_id"] == sent["call_id"], (sent, added)
    assert added[0]["previous_item_id"] == creates[0]["previous_item_id"]
    assert reply["output_added"] and reply["ok"], reply
    assert [m["text"].strip() for m in reply["messages"]] == [SUNNY], reply["messages"]
    assert not reply["calls"], reply["calls"]


def test_a_story_is_interrupted_and_truncated(run: Run) -> None:
    story = run.step("story")
    assert story["user_message_added"], story  # conversation.item.create of a user input_text message
    assert story["ok"], story
    [message] = story["messages"]
    assert message["text"] and STORY.startswith(message["text"].strip()[:20]), message
    done = [e for e in run.server("response.done") if e["response"]["id"] == story["response_id"]]
    assert done and done[0]["response"]["status"] == "cancelled", [d["response"].get("status") for d in done]
    truncated = run.server("conversation.item.truncated")
    assert truncated and truncated[0]["item_id"] == story["interrupted"]["message_id"], truncated
    assert truncated[0]["audio_end_ms"] == story["interrupted"]["audio_end_ms"]


def test_the_history_is_the_conversation_in_order(run: Run) -> None:
    """The plugin mirrors the conversation from conversation.item.added's previous_item_id and edits it with
    conversation.item.create/delete: its history is every item in the order it was added, less the deleted."""
    forget = run.step("forget")
    deleted = {e["item_id"] for e in run.server("conversation.item.deleted")}
    assert forget["ok"] and forget["deleted"] in deleted, forget
    added = [e["item"]["id"] for e in run.server("conversation.item.added")]
    history = run.of("history")[0]["items"]
    assert [e.get("previous_item_id") for e in run.server("conversation.item.added")][1:].count(None) == 0, \
        [(e["item"]["id"], e.get("previous_item_id")) for e in run.server("conversation.item.added")]
    assert [item["id"] for item in history] == [i for i in added if i not in deleted], (history, added)
    kinds = [(item["type"], item["role"]) for item in history]
    assert ("function_call", None) in kinds and ("function_call_output", None) in kinds
    assert kinds.index(("function_call", None)) + 1 == kinds.index(("function_call_output", None)), kinds
