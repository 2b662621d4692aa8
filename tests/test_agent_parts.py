"""The voice agent's small parts, without a server: the sentence gate, what was heard, settings, and a
speculative reply released or thrown away (with stand-ins for the models: the turn's events are called
directly)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import numpy as np
import pytest

from lyre.agent import AgentSession
from lyre.agent.events import BETA, GA, AgentSettings, input_update, read_agent_update
from lyre.agent.reply import _SentenceGate
from lyre.agent.conversation import heard_text as _heard_text
from lyre.agent.session import _same_words
from lyre.stt import RealtimeError, Transcript
from lyre.stt.utterances import Utterance


def test_the_gate_holds_text_until_the_first_sentences_are_written() -> None:
    gate = _SentenceGate(2)
    assert gate.push("Sure. It opens at 9") == ""  # one sentence so far
    assert gate.push(" tonight. And") == "Sure. It opens at 9 tonight. And"
    # Once open, the gate lets everything through as it comes.
    opened = _SentenceGate(2)
    assert [opened.push(p) for p in ("Yes! ", "It does. ", "Bye")] == ["", "Yes! It does. ", "Bye"]
    assert _SentenceGate(2).push("No sentence end yet") == ""
    ended = _SentenceGate(2)
    ended.push("Only one.")
    assert ended.open() == "Only one."  # the end of the reply (or its release) sends what is held
    assert ended.push(" More") == " More"
    assert _SentenceGate(0).push("straight through") == "straight through"


def test_what_was_heard_is_cut_to_a_whole_word() -> None:
    text = "The pharmacy closes at nine tonight."
    assert _heard_text(text, 0, 2000) == ""
    assert _heard_text(text, 1000, 2000) == "The pharmacy"  # half way is inside "closes": not heard whole
    assert _heard_text(text, 2500, 2000) == text


def test_transcripts_compare_by_their_words() -> None:
    assert _same_words("What time does it close?", "what time does it close")
    assert not _same_words("What time does it close?", "What time does it open?")


def test_updates_read_both_shapes_and_name_bad_fields() -> None:
    ga = read_agent_update({"type": "session.update", "session": {
        "type": "realtime", "instructions": "Hi", "audio": {"output": {"voice": "leo"}},
        "speculative": False, "first_sentences": 3}}, AgentSettings(), supports_tools=False)
    assert (ga.voice, ga.instructions, ga.speculative, ga.first_sentences, ga.names) == ("leo", "Hi", False, 3, GA)
    beta = read_agent_update({"type": "session.update", "session": {"voice": "zoe", "modalities": ["audio"]}},
                             AgentSettings(), supports_tools=False)
    assert (beta.voice, beta.names) == ("zoe", BETA)
    assert input_update({"type": "session.update", "session": {"turn_detection": None, "voice": "x"}}) == {
        "type": "transcription_session.update", "session": {"turn_detection": None}}
    for session, param in (({"type": "transcription"}, "session.type"),
                           ({"voice": 7, "modalities": []}, "session.voice"),
                           ({"output_audio_format": "g711_ulaw", "voice": "tara"}, "session.output_audio_format"),
                           ({"tools": [{"type": "function", "name": "f"}]}, "session.tools"),
                           ({"speculative": "yes"}, "session.speculative")):
        with pytest.raises(RealtimeError) as refused:
            read_agent_update({"type": "session.update", "session": session}, AgentSettings(), supports_tools=False)
        assert refused.value.param == param


class _Speech:
    """A speech stream that makes one chunk of silence per text pushed."""

    def __init__(self) -> None:
        self._texts: asyncio.Queue[str | None] = asyncio.Queue()
        self.closed = False

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

    async def reply(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> Any:
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
