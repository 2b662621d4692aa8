"""The voice agent's small parts, without a server: the sentence gate, what was heard, settings, a
speculative reply released or thrown away (with stand-ins for the models: the turn's events are called
directly), the conversation's trimming and a reply's tool calls."""

from __future__ import annotations

import asyncio
import json
from dataclasses import replace
from typing import Any

import numpy as np
import pytest

from lyre.agent import AgentSession
from lyre.agent.calls import MAX_CALLS
from lyre.agent.conversation import MAX_ITEMS, Conversation
from lyre.agent.conversation import heard_text as _heard_text
from lyre.agent.events import BETA, GA, AgentSettings, input_update
from lyre.agent.session_update import read_agent_update
from lyre.agent.gate import SentenceGate
from lyre.agent.reply import Reply, ReplySpec
from lyre.agent.speculation import same_words
from lyre.agent.think import ThinkError, ToolCallDelta, _pieces
from lyre.stt import RealtimeError, Transcript
from lyre.stt.utterances import Utterance


def test_the_gate_holds_text_until_the_first_sentences_are_written() -> None:
    gate = SentenceGate(2)
    assert gate.push("Sure. It opens at 9") == ""  # one sentence so far
    assert gate.push(" tonight. And") == "Sure. It opens at 9 tonight. And"
    # Once open, the gate lets everything through as it comes.
    opened = SentenceGate(2)
    assert [opened.push(p) for p in ("Yes! ", "It does. ", "Bye")] == ["", "Yes! It does. ", "Bye"]
    assert SentenceGate(2).push("No sentence end yet") == ""
    ended = SentenceGate(2)
    ended.push("Only one.")
    assert ended.open() == "Only one."  # the end of the reply (or its release) sends what is held
    assert ended.push(" More") == " More"
    assert SentenceGate(0).push("straight through") == "straight through"


def test_what_was_heard_is_cut_to_a_whole_word() -> None:
    text = "The pharmacy closes at nine tonight."
    assert _heard_text(text, 0, 2000) == ""
    assert _heard_text(text, 1000, 2000) == "The pharmacy"  # half way is inside "closes": not heard whole
    assert _heard_text(text, 2500, 2000) == text


def test_transcripts_compare_by_their_words() -> None:
    assert same_words("What time does it close?", "what time does it close")
    assert not same_words("What time does it close?", "What time does it open?")


def test_updates_read_both_shapes_and_name_bad_fields() -> None:
    ga = read_agent_update({"type": "session.update", "session": {
        "type": "realtime", "instructions": "Hi", "audio": {"output": {"voice": "leo"}},
        "lyre": {"speculative": False, "first_sentences": 3}}}, AgentSettings(), supports_tools=False).settings
    assert (ga.voice, ga.instructions, ga.speculative, ga.first_sentences, ga.names) == ("leo", "Hi", False, 3, GA)
    older = read_agent_update({"type": "session.update", "session": {"type": "realtime", "speculative": False}},
                              AgentSettings(), supports_tools=False).settings
    assert older.speculative is False  # lyre's own fields at the top, as older lyre clients send them
    beta = read_agent_update({"type": "session.update", "session": {"voice": "zoe", "modalities": ["audio"]}},
                             AgentSettings(), supports_tools=False).settings
    assert (beta.voice, beta.names) == ("zoe", BETA)
    assert input_update({"type": "session.update", "session": {"turn_detection": None, "voice": "x"}}) == {
        "type": "transcription_session.update", "session": {"turn_detection": None}}
    with pytest.raises(RealtimeError) as refused:
        read_agent_update({"type": "session.update", "session": {"type": "transcription"}}, AgentSettings(),
                          supports_tools=False)
    assert refused.value.param == "session.type"
    # A field in error is named and left as it was; the rest of the update applies.
    for session, param in (({"voice": 7, "modalities": ["audio"]}, "session.voice"),
                           ({"output_audio_format": "g722", "voice": "tara"}, "session.output_audio_format"),
                           ({"type": "realtime", "lyre": {"speculative": "yes"}}, "session.lyre.speculative"),
                           ({"type": "realtime", "output_modalities": ["video"]}, "session.output_modalities"),
                           ({"type": "realtime", "tool_choice": "sometimes"}, "session.tool_choice"),
                           ({"type": "realtime", "max_output_tokens": 0}, "session.max_output_tokens"),
                           ({"type": "realtime", "audio": {"output": {"speed": 2.0}}}, "session.audio.output.speed")):
        update = read_agent_update({"type": "session.update", "session": {**session, "instructions": "Be brief."}},
                                   AgentSettings(), supports_tools=False)
        assert [e.param for e in update.errors] == [param] and not update.refused
        assert update.settings.instructions == "Be brief."
    # What the session can live without is not an error: it goes on without it, and says so.
    tools = [{"type": "function", "name": "f", "parameters": {"type": "object", "properties": {}}}]
    update = read_agent_update({"type": "session.update", "session": {
        "type": "realtime", "instructions": "Be brief.", "tools": tools,
        "audio": {"input": {"noise_reduction": {"type": "near_field"},
                            "turn_detection": {"type": "server_vad", "idle_timeout_ms": 6000}},
                  "output": {"speed": 1.25}}}}, AgentSettings(), supports_tools=False)
    assert not update.errors
    assert sorted(r.param for r in update.refused) == ["session.audio.input.noise_reduction", "session.tools"]
    assert (update.settings.speed, update.settings.idle_timeout_ms) == (1.25, 6000)
    for detection in ({"type": "semantic_vad", "idle_timeout_ms": 6000}, {"idle_timeout_ms": 100}):
        wrong = read_agent_update({"type": "session.update", "session": {
            "type": "realtime", "audio": {"input": {"turn_detection": detection}}}}, AgentSettings(),
            supports_tools=False)
        assert [e.param for e in wrong.errors] == ["turn_detection.idle_timeout_ms"]
    assert update.settings.instructions == "Be brief." and update.settings.tools == tuple(tools)
    assert not read_agent_update({"type": "session.update", "session": {"type": "realtime", "tools": tools}},
                                 AgentSettings(), supports_tools=True).refused


class _Speech:
    """A speech stream that makes one chunk of silence per text pushed."""

    def __init__(self) -> None:
        self._texts: asyncio.Queue[str | None] = asyncio.Queue()
        self.closed = False
        self.cuts: list[object] = []  # never runs out of tokens
        self.frames = 0

    def push(self, text: str) -> None:
        self._texts.put_nowait(text)

    def end(self) -> None:
        self._texts.put_nowait(None)

    def __aiter__(self) -> _Speech:
        return self

    async def __anext__(self) -> np.ndarray:
        if await self._texts.get() is None:
            raise StopAsyncIteration
        return np.zeros(2400, np.int16)

    async def aclose(self) -> None:
        self.closed = True


class _TTS:
    max_tokens_limit = 1200

    def __init__(self) -> None:
        self.streams: list[_Speech] = []

    def open(self, *args: Any, **kwargs: Any) -> _Speech:
        self.streams.append(_Speech())
        return self.streams[-1]


class _Thinker:
    supports_tools = False

    def __init__(self) -> None:
        self.asked: list[str] = []

    async def reply(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]], options: Any = None) -> Any:
        self.asked.append(messages[-1]["content"])
        for piece in ("Sure. ", "Here it is. ", "Bye."):
            await asyncio.sleep(0)
            yield piece


def _turn(said_early: str, said_final: str) -> tuple[list[dict[str, Any]], _Thinker, AgentSession]:
    """A possible end heard as ``said_early``, then the confirmed end's transcript ``said_final``."""
    events: list[dict[str, Any]] = []
    thinker = _Thinker()

    async def run() -> AgentSession:
        session = AgentSession(object(), _TTS(), thinker, events.append)  # type: ignore[arg-type]
        session.settings = replace(session.settings, lyre_events=True)  # the response's lyre timing fields
        item = Utterance(start=0)
        early: asyncio.Future[Transcript] = asyncio.get_running_loop().create_future()
        early.set_result(Transcript(said_early, "en", 1.0, ()))
        session.paused(item, 16_000, early)  # type: ignore[arg-type]
        for _ in range(50):  # the speculative reply runs, held
            await asyncio.sleep(0)
        assert not [e for e in events if e["type"].startswith("response.")]  # nothing of it is seen
        session.transcribed(item, Transcript(said_final, "en", 1.0, ()))
        assert session.reply is not None
        await session.reply.done
        await session.close()
        return session

    return events, thinker, asyncio.run(run())


def test_the_same_words_release_the_held_reply() -> None:
    events, thinker, session = _turn("What time is it?", "what time is it")
    assert thinker.asked == ["What time is it?"] and session.wasted == 0
    done = [e for e in events if e["type"] == "response.done"]
    assert len(done) == 1 and done[0]["response"]["status"] == "completed"
    assert done[0]["response"]["lyre"]["speculative"] is True


def test_other_words_throw_the_held_reply_away_and_think_again() -> None:
    events, thinker, session = _turn("What time is it?", "What time is it in Paris?")
    assert thinker.asked == ["What time is it?", "What time is it in Paris?"] and session.wasted == 1
    created = [e for e in events if e["type"] == "response.created"]
    assert len(created) == 1  # only the second reply was ever sent
    done = [e for e in events if e["type"] == "response.done"]
    assert len(done) == 1 and done[0]["response"]["lyre"]["speculative"] is False
    assert all(stream.closed for stream in session._tts.streams)  # type: ignore[attr-defined]


def test_a_response_asked_for_right_after_a_commit_waits_for_its_transcript() -> None:
    events: list[dict[str, Any]] = []
    thinker = _Thinker()

    async def run() -> None:
        session = AgentSession(object(), _TTS(), thinker, events.append)  # type: ignore[arg-type]
        session.settings = replace(session.settings, lyre_events=True)  # the response's lyre timing fields
        item = Utterance(start=0)
        session._heard({"type": "input_audio_buffer.committed", "item_id": item.id, "previous_item_id": None})
        await session.receive(json.dumps({"type": "response.create"}))
        await session.receive(json.dumps({"type": "response.create"}))  # one at a time, waiting or not
        assert session.reply is None and not thinker.asked
        session.transcribed(item, Transcript("Where is my order?", "en", 1.0, ()))
        assert session.reply is not None
        await session.reply.done
        await session.close()

    asyncio.run(run())
    assert thinker.asked == ["Where is my order?"]
    assert [e["error"]["code"] for e in events if e["type"] == "error"] == ["conversation_already_has_active_response"]
    assert [e["response"]["status"] for e in events if e["type"] == "response.done"] == ["completed"]


def test_trimming_the_conversation_never_orphans_a_tool_output() -> None:
    conversation = Conversation()

    def check(turn: int) -> None:
        messages = conversation.messages("Be brief.")
        called = {call["id"] for m in messages for call in m.get("tool_calls") or []}
        answered = [m["tool_call_id"] for m in messages if m["role"] == "tool"]
        assert set(answered) <= called, f"turn {turn}: an output whose call was trimmed"
        assert len(conversation.items) <= MAX_ITEMS

    for turn in range(3 * MAX_ITEMS):  # the cut falls at every place of the turn in time
        conversation.add({"id": f"u{turn}", "type": "message", "role": "user", "text": "Weather?"})
        check(turn)
        for i in range(2):  # two calls from one reply, then both outputs
            conversation.add_call({"id": f"c{turn}_{i}", "type": "function_call", "call_id": f"call_{turn}_{i}",
                                   "name": "get_weather", "arguments": "{}"})
            check(turn)
        for i in range(2):
            conversation.add({"id": f"o{turn}_{i}", "type": "function_call_output", "call_id": f"call_{turn}_{i}",
                              "output": "sunny"})
            check(turn)


def test_truncating_an_assistant_item_without_audio_keeps_its_text() -> None:
    conversation = Conversation()
    conversation.add({"id": "item_a", "type": "message", "role": "assistant", "text": "Closes at nine."})
    conversation.truncate("item_a", 0, 0)
    assert conversation.items[0]["text"] == "Closes at nine."
    with pytest.raises(RealtimeError) as refused:
        conversation.truncate("item_a", 0, 500)
    assert refused.value.param == "audio_end_ms"


class _Scripted:
    """A think step that answers with the same pieces every time."""

    supports_tools = True

    def __init__(self, *pieces: str | ToolCallDelta) -> None:
        self.pieces = pieces

    async def reply(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]], options: Any = None) -> Any:
        for piece in self.pieces:
            await asyncio.sleep(0)
            yield piece


def _reply(thinker: _Scripted, tools: list[dict[str, Any]]) -> tuple[Reply, list[dict[str, Any]]]:
    events: list[dict[str, Any]] = []

    async def run() -> Reply:
        reply = Reply(ReplySpec(messages=[{"role": "user", "content": "Hi"}], voice="tara", tools=tools, names=GA),
                      thinker, _TTS(), events.append)  # type: ignore[arg-type]
        reply.start()
        async with asyncio.timeout(10):
            await reply.done
        return reply

    return asyncio.run(run()), events


@pytest.mark.parametrize("index", [MAX_CALLS, 100_000, 2**62, -1])
def test_a_tool_call_index_out_of_bounds_fails_the_reply_without_allocating(index: int) -> None:
    reply, events = _reply(_Scripted("Sure. ", ToolCallDelta(index, "call_x", "get_weather", "{}")),
                           [{"type": "function", "name": "get_weather"}])
    assert reply.status == "failed" and f"index {index}" in str(reply.error) and not reply.calls
    assert events[-1]["type"] == "response.done" and events[-1]["response"]["status"] == "failed"


def test_a_call_of_a_tool_that_was_not_declared_is_an_error_event_not_a_call() -> None:
    reply, events = _reply(_Scripted(ToolCallDelta(0, "call_a", "launch_rockets", "{}"),
                                     ToolCallDelta(1, "call_b", "get_weather", '{"city": '),
                                     ToolCallDelta(1, arguments='"Paris"}')),
                           [{"type": "function", "name": "get_weather"}])
    assert reply.status == "completed" and [call["name"] for call in reply.calls] == ["get_weather"]
    (error,) = [e["error"] for e in events if e["type"] == "error"]
    assert error["code"] == "unknown_tool" and "launch_rockets" in error["message"]
    deltas = [e for e in events if e["type"] == "response.function_call_arguments.delta"]
    assert "".join(e["delta"] for e in deltas) == '{"city": "Paris"}' == reply.calls[0]["arguments"]
    assert {e["output_index"] for e in deltas} == {1}  # its place in response.done's output, after the message
    # With no tools declared at all, any call is refused.
    reply, events = _reply(_Scripted(ToolCallDelta(0, "call_a", "get_weather", "{}")), [])
    assert not reply.calls and [e["error"]["code"] for e in events if e["type"] == "error"] == ["unknown_tool"]


@pytest.mark.parametrize("call", [{"index": "0", "function": {"name": "f"}}, {"index": True},
                                  {"index": 0, "function": {"name": 7}}, {"index": 0, "function": "f"},
                                  {"index": 0, "id": ["x"]}])
def test_a_malformed_tool_call_from_the_endpoint_is_a_think_error(call: dict[str, Any]) -> None:
    data = json.dumps({"choices": [{"index": 0, "delta": {"tool_calls": [call]}}]})
    with pytest.raises(ThinkError, match=r"tool[ _]call"):
        _pieces(data, "http://llm/v1")


class _SpokenSpeech(_Speech):
    """A speech stream that keeps its text and says it all as one segment, as lyre.tts's does."""

    def __init__(self) -> None:
        super().__init__()
        self.text, self.samples = "", 0

    def push(self, text: str) -> None:
        self.text += text
        super().push(text)

    async def __anext__(self) -> np.ndarray:
        chunk = await super().__anext__()
        self.samples += chunk.size
        return chunk

    def segments_so_far(self) -> list[Any]:
        from lyre.tts import SpokenSegment

        return [SpokenSegment(self.text, 0, self.samples)]


class _SpokenTTS(_TTS):
    def open(self, *args: Any, **kwargs: Any) -> _Speech:
        self.streams.append(_SpokenSpeech())
        return self.streams[-1]


class _NeverAligns:
    """An aligner whose answer never comes (a queue that never drains), to show nothing waits on it."""

    def __init__(self) -> None:
        self.asked = 0

    async def align(self, audio: np.ndarray, words: list[str], language: str | None, session: object) -> Any:
        self.asked += 1
        await asyncio.Event().wait()


def test_a_truncation_is_answered_at_once_though_its_words_never_come() -> None:
    events: list[dict[str, Any]] = []
    aligner = _NeverAligns()

    async def run() -> None:
        session = AgentSession(object(), _SpokenTTS(), _Thinker(), events.append,  # type: ignore[arg-type]
                               aligner=aligner)
        await session.receive(json.dumps({"type": "response.create"}))
        assert session.reply is not None
        await session.reply.done
        item = session.reply.item_id
        half = int(session.reply.audio_ms / 2)
        await session.receive(json.dumps({"type": "conversation.item.truncate", "item_id": item,
                                          "content_index": 0, "audio_end_ms": half}))
        truncated = [e for e in events if e["type"] == "conversation.item.truncated"]
        assert [e["audio_end_ms"] for e in truncated] == [half]  # sent before the aligner was even asked
        for _ in range(20):
            await asyncio.sleep(0)
        assert aligner.asked == 1
        held = session.conversation.find(item)
        assert held is not None and held["text"] == _heard_text("Sure. Here it is. Bye.", half, held["audio_ms"])
        await session.close()

    asyncio.run(run())
    assert not [e for e in events if e["type"] in ("error", "lyre.conversation.item.heard")]


def test_a_cut_inside_a_segment_still_being_made_places_its_words_at_a_speaking_rate() -> None:
    """Words are not aligned into the part of a segment's audio made so far (that would squeeze them all in and
    call the whole sentence heard): the segment still coming out is cut at a natural speaking rate."""
    from lyre.agent.heard import heard_words
    from lyre.tts.spoken import SpokenSegment

    rate = 24000
    done = SpokenSegment("Sure,", 0, rate // 2)
    making = SpokenSegment("I can help with that, whenever you like.", rate // 2, rate, whole=False)
    pcm = [np.zeros(rate, dtype=np.int16)]
    text, found = asyncio.run(heard_words([done, making], pcm, rate, 900, None, "s"))  # type: ignore[arg-type]
    assert found == []
    # 0.4 s into a 40-character segment: about 5.6 characters at 14 a second, to a whole word.
    assert text == "Sure, I can"


def test_a_reply_ended_by_the_sessions_close_arms_no_idle_prompt() -> None:
    """With idle_timeout_ms set, the reply a closing session cancels still ends (response.done): that must not
    start the idle timer, or a prompt would start a reply after the session is gone."""
    async def run() -> AgentSession:
        session = AgentSession(object(), _TTS(), _Thinker(), lambda event: None)  # type: ignore[arg-type]
        session.settings = replace(session.settings, idle_timeout_ms=5000)
        session.conversation.add({"id": "u1", "type": "message", "role": "user", "text": "Hello?"})
        session.respond()
        for _ in range(5):
            await asyncio.sleep(0)
        await session.close()
        for _ in range(20):
            await asyncio.sleep(0)
        return session

    session = asyncio.run(run())
    assert session.reply is not None and session.reply.over
    assert session._idle is None


def test_what_was_heard_of_a_text_without_spaces_is_cut_to_a_whole_word() -> None:
    """Mandarin has no spaces to cut at: the cut falls between its words (jieba's), not at nothing."""
    text = "我们明天早上去公园散步。"
    half = _heard_text(text, 1000, 2000)
    assert half and text.startswith(half) and len(half) < len(text)
    assert _heard_text(text, 0, 2000) == ""
    assert _heard_text(text, 2500, 2000) == text
