"""Client events a conversation session must survive: a reply cancelled before it starts, a truncate of an item
the client made, a handler that fails, and a model that calls tools it was not given or at an index far past
any reply's; and a client that stops reading a reply.

Through a real ``lyre serve --stt --llm-url`` (demo TTS, Whisper base) whose endpoint is a scripted
OpenAI-compatible front in this process (no chat model to load), driven over loopback by a plain WebSocket
client; the failures lyre cannot be made to have from outside (a bug in a handler, a full speech-to-text
queue), with the session's stand-ins of tests/test_agent_parts.py.
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import pytest
from fastapi import FastAPI, Request
from fastapi.responses import StreamingResponse
from polling import eventually
from serving import Server, running_server, serving_in_thread
from stalled_reader import StalledReader
from test_agent import SHORT, Talk
from test_agent_parts import _Thinker, _TTS
from websockets.asyncio.client import ClientConnection, connect

from lyre.agent import AgentSession
from lyre.agent.conversation import Conversation
from lyre.stt import TranscriberBusy, written_words

TOOLS = [{"type": "function", "name": "get_weather", "description": "The weather in a city.",
          "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}]
STORY = "One day a fox found a well. It looked down, saw the moon, and jumped in after it."
FAR = 5_000  # a tool-call index far past any reply's calls, small enough that lyre before the bound survives it
WRITE_TIMEOUT_S = 2  # lyre serve --write-timeout


def _chunk(delta: dict[str, Any]) -> str:
    return "data: " + json.dumps({"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": delta}]}) + "\n\n"


def _call(index: int, name: str, arguments: str) -> dict[str, Any]:
    return {"tool_calls": [{"index": index, "id": f"call_{index}", "type": "function",
                            "function": {"name": name, "arguments": arguments}}]}


class _Front:
    """An OpenAI-compatible chat endpoint with scripted answers; it keeps every request's messages."""

    def __init__(self) -> None:
        self.asked: list[list[dict[str, Any]]] = []
        self.app = FastAPI()
        self.app.post("/v1/chat/completions")(self._completions)

    async def _completions(self, request: Request) -> StreamingResponse:
        body = await request.json()
        self.asked.append(body["messages"])
        said = str(body["messages"][-1].get("content"))
        if "two tools" in said:  # one the session declared, one it did not
            chunks = [_chunk({"content": "Let me look. "}), _chunk(_call(0, "launch_rockets", "{}")),
                      _chunk(_call(1, "get_weather", '{"city": "Paris"}'))]
        elif "story" in said:
            chunks = [_chunk({"content": STORY})]
        elif "far call" in said:
            chunks = [_chunk(_call(FAR, "get_weather", '{"city": "Paris"}'))]
        else:
            chunks = [_chunk({"content": "Hello there. "})]

        # As an endpoint asked for stream_options.include_usage ends its stream.
        usage = "data: " + json.dumps({"object": "chat.completion.chunk", "choices": [], "usage": {
            "prompt_tokens": 11 * len(body["messages"]), "completion_tokens": 7, "total_tokens": 0}}) + "\n\n"

        async def answer() -> AsyncIterator[str]:
            for chunk in [*chunks, usage, "data: [DONE]\n\n"]:
                yield chunk

        return StreamingResponse(answer(), media_type="text/event-stream")


@pytest.fixture(scope="module")
def front() -> _Front:
    return _Front()


@pytest.fixture(scope="module")
def agent(front: _Front) -> Iterator[Server]:
    with serving_in_thread(front.app) as port:
        with running_server("--stt", "--llm-url", f"http://127.0.0.1:{port}/v1", "--no-smart-turn",
                            "--write-timeout", str(WRITE_TIMEOUT_S)) as running:
            yield running


def _say(text: str, role: str = "user") -> dict[str, Any]:
    part = "output_text" if role == "assistant" else "input_text"
    return {"type": "conversation.item.create",
            "item": {"type": "message", "role": role, "content": [{"type": part, "text": text}]}}


def _burst(ws: ClientConnection, *events: dict[str, Any]) -> None:
    """Several client events in one write: the server reads them all before its loop runs anything else."""
    for event in events:
        ws.protocol.send_text(json.dumps(event).encode())
    ws.transport.write(b"".join(ws.protocol.data_to_send()))


async def _open(agent: Server, **session: Any) -> Talk:
    ws = await connect(f"{agent.ws_url}/v1/realtime", max_size=None)
    talk = Talk(ws, lyre="lyre" in session)
    await talk.send({"type": "session.update", "session": {
        "type": "realtime", "max_speech_tokens": SHORT, "speculative": False,
        "audio": {"input": {"turn_detection": None}}, **session}})
    await talk.until("session.updated")
    return talk


def test_a_reply_cancelled_before_it_starts_ends_and_the_next_is_answered(agent: Server) -> None:
    async def run() -> Talk:
        talk = await _open(agent)
        async with talk.ws:
            await talk.send(_say("Say hello."))
            _burst(talk.ws, {"type": "response.create"}, {"type": "response.cancel"})
            await talk.until("response.done", timeout=30)
            await talk.send({"type": "response.create"})  # turn detection is off: only this can answer
            await talk.until("response.done", timeout=60, count=2)
            return talk

    talk = asyncio.run(run())
    first, second = (e["response"] for e in talk.of("response.done"))
    assert first["status"] == "cancelled" and second["status"] == "completed"
    assert not talk.of("error")
    # The cancelled reply opened as every reply does, so a client can pair its events.
    assert [e["response"]["id"] for e in talk.of("response.created")] == [first["id"], second["id"]]


def test_truncating_an_assistant_item_the_client_made_keeps_the_socket(agent: Server, front: _Front) -> None:
    async def run() -> Talk:
        talk = await _open(agent)
        async with talk.ws:
            await talk.send(_say("The pharmacy closes at nine.", role="assistant"))
            made = (await talk.until("conversation.item.done"))["item"]["id"]
            await talk.send({"type": "conversation.item.truncate", "item_id": made, "content_index": 0,
                             "audio_end_ms": 0})
            await talk.until("conversation.item.truncated")
            bad = [{"type": "conversation.item.truncate", "item_id": made, "content_index": 0, "audio_end_ms": 800},
                   {"type": "conversation.item.truncate", "item_id": made, "content_index": 0, "audio_end_ms": "0"},
                   {"type": "conversation.item.truncate", "item_id": made, "content_index": 1, "audio_end_ms": 0},
                   {"type": "conversation.item.truncate", "audio_end_ms": 0}]
            for i, event in enumerate(bad, start=1):
                await talk.send({**event, "event_id": f"bad_{i}"})
                await talk.until("error", count=i)
            await talk.send(_say("When does it close?"))
            await talk.send({"type": "response.create"})
            await talk.until("response.done")
            return talk

    talk = asyncio.run(run())
    (truncated,) = talk.of("conversation.item.truncated")
    assert truncated["audio_end_ms"] == 0
    errors = [e["error"] for e in talk.of("error")]
    assert [e["event_id"] for e in errors] == ["bad_1", "bad_2", "bad_3", "bad_4"]
    assert [e["param"] for e in errors] == ["audio_end_ms", "audio_end_ms", "content_index", "item_id"]
    assert talk.of("response.done")[0]["response"]["status"] == "completed"
    # A text item has no audio to cut: the model still reads all of it.
    assert {"role": "assistant", "content": "The pharmacy closes at nine."} in front.asked[-1]


def test_truncating_a_spoken_reply_answers_at_once_and_then_keeps_the_words_that_ended_before_the_cut(
        agent: Server, front: _Front) -> None:
    """``conversation.item.truncated`` does not wait for the words to be placed (an alignment may take long,
    or never come); ``lyre.conversation.item.heard`` follows with them. The demo model speaks noise, so where
    the aligner puts each word means nothing; what must hold: the words come ordered inside the audio, the
    history keeps whole words up to the cut and exactly the playing segment's words that end by then, and the
    next think step reads that."""
    async def run() -> tuple[Talk, int]:
        talk = await _open(agent, lyre={"events": True})  # lyre.conversation.item.heard is lyre's own event
        async with talk.ws:
            await talk.send(_say("Tell me a story."))
            await talk.send({"type": "response.create"})
            done = (await talk.until("response.done", timeout=60))["response"]
            samples = sum(len(base64.b64decode(e["delta"])) // 2 for e in talk.of("response.output_audio.delta"))
            cut = int(1000 * samples / 24_000 * 0.6)
            await talk.send({"type": "conversation.item.truncate", "item_id": done["output"][0]["id"],
                             "content_index": 0, "audio_end_ms": cut})
            await talk.until("lyre.conversation.item.heard")
            await talk.send(_say("Go on."))
            await talk.send({"type": "response.create"})
            await talk.until("response.done", count=2, timeout=60)
            return talk, cut

    talk, cut = asyncio.run(run())
    assert not talk.of("error")
    (truncated,) = talk.of("conversation.item.truncated")
    (placed,) = talk.of("lyre.conversation.item.heard")
    assert talk.events.index(truncated) < talk.events.index(placed)
    assert truncated["audio_end_ms"] == placed["audio_end_ms"] == cut
    assert placed["item_id"] == truncated["item_id"]
    heard, words = placed["transcript"], placed["words"]
    assert words and all(0 <= w["start_ms"] < w["end_ms"] for w in words)
    assert all(a["end_ms"] <= b["start_ms"] for a, b in zip(words, words[1:]))
    kept = written_words(heard)
    assert kept == written_words(STORY)[:len(kept)]  # whole words, from the start, in order
    ended = [w["text"] for w in words if w["end_ms"] <= cut]
    assert kept[len(kept) - len(ended):] == ended and len(kept) < len(written_words(STORY))
    assert {"role": "assistant", "content": heard} in front.asked[-1]


def test_a_tool_the_session_did_not_declare_is_an_error_not_a_call(agent: Server) -> None:
    async def run() -> Talk:
        talk = await _open(agent, tools=TOOLS)
        async with talk.ws:
            await talk.send(_say("Use two tools."))
            await talk.send({"type": "response.create"})
            await talk.until("response.done")
            return talk

    talk = asyncio.run(run())
    done = talk.of("response.done")[0]["response"]
    assert done["status"] == "completed"
    calls = [item for item in done["output"] if item["type"] == "function_call"]
    assert [call["name"] for call in calls] == ["get_weather"]
    (error,) = [e["error"] for e in talk.of("error")]
    assert error["code"] == "unknown_tool" and "launch_rockets" in error["message"]
    # Every event of the call it kept names one output index: its place in response.done's output.
    indices = {e["output_index"] for e in talk.events if e.get("item_id") == calls[0]["id"]}
    assert indices == {done["output"].index(calls[0])}


def test_a_tool_call_index_far_past_any_replys_fails_the_reply_and_the_session_goes_on(agent: Server) -> None:
    async def run() -> Talk:
        talk = await _open(agent, tools=TOOLS)
        async with talk.ws:
            await talk.send(_say("Make a far call."))
            await talk.send({"type": "response.create"})
            await talk.until("response.done")
            await talk.send(_say("Say hello."))
            await talk.send({"type": "response.create"})
            await talk.until("response.done", count=2)
            return talk

    talk = asyncio.run(run())
    failed, ok = (e["response"] for e in talk.of("response.done"))
    assert failed["status"] == "failed" and str(FAR) in failed["status_details"]["error"]["message"]
    assert not [item for item in failed["output"] if item["type"] == "function_call"]
    assert [e["error"]["code"] for e in talk.of("error")] == ["response_failed"]
    assert ok["status"] == "completed"


def test_a_client_that_stops_reading_a_reply_is_cut_and_its_session_freed(agent: Server) -> None:
    """A client that asks for a long spoken reply and reads none of it: once a send has waited the write timeout
    the socket is cut, closed with 1008 naming the stall, the reply's slots and the session freed, and counted."""
    before = _stalled(agent)
    reader = StalledReader(f"{agent.ws_url}/v1/realtime")
    try:
        reader.send({"type": "session.update", "session": {  # at a quarter speed: four times the audio a second
            "type": "realtime", "max_speech_tokens": 700, "speculative": False,
            "audio": {"input": {"turn_detection": None}, "output": {"speed": 0.25}}}})
        reader.send(_say("Tell me a story."))
        reader.send({"type": "response.create"})
        assert eventually(lambda: _stalled(agent) == before + 1, timeout=60)
        code, reason = reader.to_the_end()  # the connection ends once what was on its way is read
    finally:
        reader.close()
    assert eventually(lambda: agent.metric("lyre_realtime_sessions") == 0, timeout=10)
    assert agent.metric("lyre_active_streams") == 0
    # The close frame waits behind what the reader never took, for a while; it may have given up.
    assert (code, reason) in ((1008, f"the listener took nothing for {WRITE_TIMEOUT_S} s"), (None, "")), (code, reason)


def _stalled(agent: Server) -> float:
    """Realtime sockets cut for a listener that took nothing."""
    for line in httpx.get(agent.url + "/metrics", timeout=10).text.splitlines():
        if line.startswith('lyre_stalled_listeners_total{api="realtime"}'):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def test_a_handler_that_fails_is_an_error_for_its_event_and_is_logged(monkeypatch: pytest.MonkeyPatch,
                                                                      caplog: pytest.LogCaptureFixture) -> None:
    def broken(self: Conversation, *args: object) -> None:
        raise KeyError("full_text")  # what truncating a client's assistant item raised before it was fixed

    monkeypatch.setattr(Conversation, "truncate", broken)
    events: list[dict[str, Any]] = []

    async def run() -> None:
        session = AgentSession(object(), _TTS(), _Thinker(), events.append)  # type: ignore[arg-type]
        await session.receive(json.dumps({"type": "conversation.item.truncate", "event_id": "mine",
                                          "item_id": "item_x", "content_index": 0, "audio_end_ms": 0}))
        await session.receive(json.dumps(_say("Still there?")))  # the session goes on
        await session.close()

    with caplog.at_level(logging.ERROR, logger="lyre.agent"):
        asyncio.run(run())
    (error,) = [e["error"] for e in events if e["type"] == "error"]
    assert error["type"] == "server_error" and error["event_id"] == "mine"
    assert "conversation.item.truncate" in error["message"] and "KeyError" in error["message"]
    assert events[-1]["type"] == "conversation.item.done"
    assert any(record.exc_info for record in caplog.records)  # a bug in lyre: its traceback is in the log


def test_a_reply_cancelled_before_its_task_ran_frees_the_session() -> None:
    """The same as over the socket, without relying on how the server reads: nothing runs between the two."""
    events: list[dict[str, Any]] = []
    thinker = _Thinker()

    async def run() -> None:
        session = AgentSession(object(), _TTS(), thinker, events.append)  # type: ignore[arg-type]
        await session.receive(json.dumps({"type": "response.create"}))
        await session.receive(json.dumps({"type": "response.cancel"}))
        first = session.reply
        assert first is not None
        async with asyncio.timeout(5):
            await first.done
        await session.receive(json.dumps({"type": "response.create"}))
        assert session.reply is not first and session.reply is not None
        async with asyncio.timeout(5):
            await session.reply.done
        await session.close()

    asyncio.run(run())
    assert [e["response"]["status"] for e in events if e["type"] == "response.done"] == ["cancelled", "completed"]
    assert not [e for e in events if e["type"] == "error"]
    assert len(thinker.asked) == 1  # the cancelled reply never thought


class _BusyEar:
    """A transcriber whose queue is always full."""

    async def transcribe(self, *args: Any, **kwargs: Any) -> Any:
        raise TranscriberBusy("the speech-to-text queue is full (64 jobs)")


def test_an_audio_item_that_cannot_be_transcribed_is_an_error_naming_the_part() -> None:
    events: list[dict[str, Any]] = []
    audio = base64.b64encode(bytes(4800)).decode()

    def item(*parts: dict[str, Any]) -> str:
        return json.dumps({"type": "conversation.item.create", "item": {
            "type": "message", "role": "user", "content": [{"type": "input_text", "text": "Listen:"}, *parts]}})

    async def run() -> None:
        session = AgentSession(_BusyEar(), _TTS(), _Thinker(), events.append)  # type: ignore[arg-type]
        await session.receive(item({"type": "input_audio", "audio": audio}))
        await session.receive(item({"type": "input_audio", "audio": "not base64!"}))
        await session.close()

    asyncio.run(run())
    busy, garbled = [e["error"] for e in events if e["type"] == "error"]
    assert (busy["code"], busy["param"], busy["type"]) == ("transcription_failed", "item.content[1].audio",
                                                           "server_error")
    assert (garbled["code"], garbled["param"]) == ("invalid_audio", "item.content[1].audio")
    assert not [e for e in events if e["type"] == "conversation.item.done"]  # neither item joined


def test_response_create_in_full_and_the_conversation_as_a_list_the_client_edits(agent: Server,
                                                                                 front: _Front) -> None:
    """An out-of-band written response on its own input beside the conversation, a spoken one with per-response
    instructions and metadata, items placed by previous_item_id, retrieved and deleted; usage counted."""
    async def run() -> Talk:
        talk = await _open(agent)
        async with talk.ws:
            await talk.send({**_say("Say hello."), "item": {**_say("Say hello.")["item"], "id": "u1"}})
            await talk.send({**_say("Be kind.", "system"), "previous_item_id": "root"})
            await talk.until("conversation.item.done", count=2)
            await talk.send({"type": "response.create", "response": {
                "conversation": "none", "output_modalities": ["text"], "instructions": "Classify the request.",
                "metadata": {"topic": "classify"}, "input": [{"type": "item_reference", "id": "u1"}]}})
            await talk.until("response.done")
            asked_out_of_band = front.asked[-1]
            await talk.send({"type": "response.create", "response": {
                "instructions": "Greet the user.", "metadata": {"client_event_id": "greet_1"}}})
            spoken = (await talk.until("response.done", count=2))["response"]
            await talk.send({"type": "conversation.item.retrieve", "item_id": spoken["output"][0]["id"]})
            await talk.until("conversation.item.retrieved")
            await talk.send({"type": "conversation.item.delete", "item_id": "u1"})
            await talk.until("conversation.item.deleted")
            await talk.send({"type": "conversation.item.retrieve", "item_id": "u1", "event_id": "evt_gone"})
            await talk.until("error")
            await talk.send({"type": "response.create"})
            await talk.until("response.done", count=3)
            talk.asked = [asked_out_of_band, *front.asked[-2:]]  # type: ignore[attr-defined]
            return talk

    talk = asyncio.run(run())
    asked_out_of_band, asked_spoken, asked_after_delete = talk.asked  # type: ignore[attr-defined]
    added = talk.of("conversation.item.added")
    assert [(a["item"]["id"], a["previous_item_id"]) for a in added[:2]][0] == ("u1", None)
    system = added[1]["item"]
    assert system["role"] == "system" and added[1]["previous_item_id"] is None  # "root": first
    # Out of band: its own input, its own instructions, written, and nothing of it in the conversation.
    oob_created, spoken_created = (e["response"] for e in talk.of("response.created")[:2])
    oob, spoken, last = (e["response"] for e in talk.of("response.done"))
    assert oob_created["metadata"] == oob["metadata"] == {"topic": "classify"} and oob["conversation_id"] is None
    assert asked_out_of_band == [{"role": "system", "content": "Classify the request."},
                                 {"role": "user", "content": "Say hello."}]
    written = "".join(e["delta"] for e in talk.of("response.output_text.delta"))
    assert written == "Hello there. " == talk.of("response.output_text.done")[0]["text"]
    assert oob["output"][0]["content"] == [{"type": "output_text", "text": written}]
    assert not [a for a in added if a["item"]["id"] == oob["output"][0]["id"]]
    assert oob["usage"]["input_tokens"] == 22 and oob["usage"]["output_token_details"] == {
        "text_tokens": 7, "audio_tokens": 0}
    # In the conversation: the greeting's instructions, its metadata back, its item after the last one.
    assert spoken_created["metadata"] == spoken["metadata"] == {"client_event_id": "greet_1"}
    assert asked_spoken[0] == {"role": "system", "content": "Greet the user."}
    assert [m["content"] for m in asked_spoken[1:]] == ["Be kind.", "Say hello."]
    (placed,) = [a for a in added if a["item"]["id"] == spoken["output"][0]["id"]]
    assert placed["previous_item_id"] == "u1"
    assert spoken["usage"]["output_token_details"]["audio_tokens"] > 0
    assert spoken["usage"]["output_tokens"] == 7 + spoken["usage"]["output_token_details"]["audio_tokens"]
    (retrieved,) = talk.of("conversation.item.retrieved")
    assert retrieved["item"]["content"][0]["type"] == "output_audio"
    assert retrieved["item"]["content"][0]["transcript"] == "Hello there. "
    # Deleted: gone from what the think step reads, and a retrieve of it names it.
    assert talk.of("conversation.item.deleted")[0]["item_id"] == "u1"
    (error,) = talk.of("error")
    assert error["error"]["code"] == "item_retrieve_invalid_item_id" and error["error"]["event_id"] == "evt_gone"
    assert [m["content"] for m in asked_after_delete[1:]] == ["Be kind.", "Hello there. "]
    assert last["status"] == "completed"


def test_telephone_audio_out_is_g711_at_8_khz_and_at_the_speed_asked(agent: Server) -> None:
    """A session that asks for G.711 out gets each reply's audio as A-law at 8 kHz (a byte a sample), the
    session and the response saying so; at speed 1.25 it plays in 1/1.25 of the time (its made audio, time-
    stretched with its pitch kept), and the response's audio seconds are as played."""
    async def run() -> Talk:
        talk = await _open(agent, lyre={"events": True}, audio={
            "input": {"turn_detection": None}, "output": {"format": {"type": "audio/pcma"}, "speed": 1.25}})
        async with talk.ws:
            await talk.send(_say("Say hello."))
            await talk.send({"type": "response.create"})
            await talk.until("response.done")
            return talk

    talk = asyncio.run(run())
    assert not talk.of("error")
    output = talk.of("session.updated")[-1]["session"]["audio"]["output"]
    assert output["format"] == {"type": "audio/pcma"} and output["speed"] == 1.25
    done = talk.of("response.done")[0]["response"]
    assert done["audio"]["output"]["format"] == {"type": "audio/pcma"}
    alaw = b"".join(base64.b64decode(e["delta"]) for e in talk.of("response.output_audio.delta"))
    seconds = done["lyre"]["audio_seconds"]  # as played
    made = done["usage"]["output_token_details"]["audio_tokens"] / 7 * 2048 / 24_000  # frames made, before trim
    assert 0.3 < seconds <= made / 1.25 + 0.01
    assert abs(len(alaw) - 8_000 * seconds) <= 0.01 * 8_000 * seconds + 32
