"""Voices and their aliases: OpenAI's voice names resolve to the model's own voices."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from lyre.orpheus import VOICES
from lyre.tts import OPENAI_VOICES, Voices, load_voices, parse_alias


def test_every_openai_voice_is_an_alias_of_an_english_voice_and_every_voice_is_used() -> None:
    voices = load_voices(Path("/nonexistent-folder-without-voices-json"))
    assert voices.names == VOICES
    assert set(voices.aliases) == set(OPENAI_VOICES)
    assert set(voices.aliases.values()) == set(VOICES)
    for name in OPENAI_VOICES:
        assert voices.resolve(name) in VOICES
    assert voices.resolve("alloy") == "tara"
    assert voices.resolve("tara") == "tara" and voices.resolve(None) is None


def test_a_model_with_other_voices_gets_the_openai_names_round_robin(tmp_path: Path) -> None:
    (tmp_path / "voices.json").write_text(json.dumps(["pierre", "amelie"]))
    voices = load_voices(tmp_path)
    assert voices.names == ("pierre", "amelie") and voices.default == "pierre"
    resolved = [voices.resolve(name) for name in OPENAI_VOICES]
    assert resolved[:4] == ["pierre", "amelie", "pierre", "amelie"]
    assert resolved.count("pierre") == 7 and resolved.count("amelie") == 6


def test_voices_json_aliases_override_the_defaults_and_the_command_line_overrides_both(tmp_path: Path) -> None:
    (tmp_path / "voices.json").write_text(json.dumps({"voices": ["pierre", "amelie"],
                                                      "aliases": {"nova": "amelie", "narrator": "pierre"}}))
    voices = load_voices(tmp_path)
    assert voices.resolve("nova") == "amelie" and voices.resolve("narrator") == "pierre"
    voices = load_voices(tmp_path, {"nova": "pierre"})
    assert voices.resolve("nova") == "pierre" and voices.resolve("narrator") == "pierre"


def test_an_alias_to_a_voice_the_model_lacks_is_refused_naming_both(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"'alloy' points at 'bogus'.*tara"):
        load_voices(tmp_path, {"alloy": "bogus"})
    (tmp_path / "voices.json").write_text(json.dumps({"voices": ["pierre"], "aliases": {"nova": "tara"}}))
    with pytest.raises(ValueError, match=r"'nova' points at 'tara'"):
        load_voices(tmp_path)


def test_a_real_voice_always_wins_over_an_alias_of_the_same_name(tmp_path: Path,
                                                                 caplog: pytest.LogCaptureFixture) -> None:
    (tmp_path / "voices.json").write_text(json.dumps(["nova", "onyx", "pierre"]))
    voices = load_voices(tmp_path)
    assert voices.resolve("nova") == "nova" and voices.resolve("onyx") == "onyx"
    assert "nova" not in voices.aliases and voices.resolve("alloy") in voices.names
    with caplog.at_level(logging.WARNING, logger="lyre.tts"):
        voices = load_voices(tmp_path, {"nova": "pierre"})
    assert voices.resolve("nova") == "nova"
    assert "nova" in caplog.text and "always wins" in caplog.text


@pytest.mark.parametrize("content", [
    '{"voices": "tara"}', '{"voices": []}', '{"aliases": ["alloy"]}', '{"aliases": {"alloy": 3}}',
    '{"speakers": ["a"]}', "[1, 2]", "{not json",
])
def test_a_bad_voices_json_is_refused_naming_the_file(tmp_path: Path, content: str) -> None:
    (tmp_path / "voices.json").write_text(content)
    with pytest.raises(ValueError, match="voices.json"):
        load_voices(tmp_path)


def test_unknown_names_are_refused_naming_voices_and_aliases() -> None:
    voices = Voices.with_aliases(VOICES)
    with pytest.raises(ValueError, match=r"unknown voice 'nobody'; this model has: tara.*alloy"):
        voices.resolve("nobody")


def test_the_listing_shows_each_alias_with_its_voice() -> None:
    listing = Voices.with_aliases(("a", "b"), {"x": "b"}).listing()
    assert listing[:2] == [{"id": "a", "name": "a"}, {"id": "b", "name": "b"}]
    assert {"id": "x", "name": "x", "alias_of": "b"} in listing
    assert len(listing) == 2 + len(OPENAI_VOICES) + 1


@pytest.mark.parametrize("text", ["alloy", "=tara", "alloy=", ""])
def test_alias_flags_must_be_name_equals_voice(text: str) -> None:
    with pytest.raises(ValueError, match="NAME=VOICE"):
        parse_alias(text)
    assert parse_alias(" alloy = leah ") == ("alloy", "leah")
