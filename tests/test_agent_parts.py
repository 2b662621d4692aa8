"""The voice agent's small parts, without a server: the sentence gate, what was heard, settings."""

from __future__ import annotations

import pytest

from lyre.agent.events import BETA, GA, AgentSettings, input_update, read_agent_update
from lyre.agent.reply import _SentenceGate
from lyre.agent.session import _heard_text, _same_words
from lyre.stt import RealtimeError


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
    assert ended.end() == "Only one."  # the end of the reply sends what is held
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
