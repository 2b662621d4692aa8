"""The Orpheus checkpoints lyre knows by name: found from a folder, their voices, languages and emotive tags."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lyre.orpheus import EMOTIVE_TAGS, VOICES
from lyre.tts import load_voices
from lyre.tts.checkpoints import CHECKPOINTS, ENGLISH, identify, primary_language
from lyre.tts.voices import LanguageMismatch, Voices
from lyre.tts.text import normalize

GERMAN = "canopylabs/3b-de-ft-research_release"


def _folder(root: Path, *parts: str, config: dict | None = None) -> Path:
    folder = root.joinpath(*parts)
    folder.mkdir(parents=True)
    if config is not None:
        (folder / "config.json").write_text(json.dumps(config))
    return folder


def test_the_table_holds_the_seven_languages_each_voice_in_one() -> None:
    languages = {language.code: language for c in CHECKPOINTS for language in c.languages}
    assert set(languages) == {"en", "fr", "de", "ko", "hi", "zh", "es", "it"}
    voices = [v for c in CHECKPOINTS for v in c.voices]
    assert len(voices) == len(set(voices))
    assert languages["de"].voices == ("jana", "thomas", "max") and "<whimper>" in languages["fr"].tags
    spanish_italian = next(c for c in CHECKPOINTS if c.name == "3b-es_it-ft-research_release")
    assert spanish_italian.language_of("giulia") == "it" and spanish_italian.language_of("javi") == "es"
    assert "<gemito>" in spanish_italian.tags_for("it") and "<gemito>" not in spanish_italian.tags_for("es")


@pytest.mark.parametrize("parts, config", [
    (("models--canopylabs--3b-de-ft-research_release", "snapshots", "0123abcd"), None),  # the hub cache
    (("3b-de-ft-research_release",), None),  # a download kept under its name
    (("3b-de-ft-research_release-bf16",), None),  # a converted copy
    (("weights",), {"_name_or_path": GERMAN}),  # its config names it
])
def test_a_folder_is_known_by_its_hub_cache_path_its_name_or_its_config(
        tmp_path: Path, parts: tuple[str, ...], config: dict | None) -> None:
    checkpoint = identify(_folder(tmp_path, *parts, config=config))
    assert checkpoint is not None and checkpoint.hub_id == GERMAN


def test_an_unknown_folder_is_no_checkpoint_and_speaks_the_english_voices(tmp_path: Path) -> None:
    folder = _folder(tmp_path, "3b-de-ft-research_releasex", config={"_name_or_path": "meta-llama/Llama-3.2-3B"})
    assert identify(folder) is None
    voices = load_voices(folder)
    assert voices.names == VOICES and voices.language_of("tara") == "en" and voices.checkpoint == ENGLISH.hub_id
    assert voices.tags["en"] == EMOTIVE_TAGS


def test_a_known_checkpoint_brings_its_voices_languages_and_aliases(tmp_path: Path) -> None:
    voices = load_voices(_folder(tmp_path, "3b-de-ft-research_release"))
    assert voices.names == ("jana", "thomas", "max") and voices.checkpoint == GERMAN
    assert voices.language_of("alloy") == "de" and voices.resolve("alloy") in voices.names
    listing = {v["id"]: v for v in voices.listing()}
    assert listing["thomas"] == {"id": "thomas", "name": "thomas", "language": "de"}
    assert listing["alloy"]["language"] == "de" and "alias_of" in listing["alloy"]


def test_voices_json_wins_and_keeps_the_languages_of_the_voices_the_checkpoint_has(tmp_path: Path) -> None:
    folder = _folder(tmp_path, "3b-fr-ft-research_release")
    (folder / "voices.json").write_text(json.dumps({"voices": ["amelie", "zoé"], "languages": {"zoé": "fr-CA"}}))
    voices = load_voices(folder)
    assert voices.names == ("amelie", "zoé") and voices.default == "amelie"
    assert voices.language_of("amelie") == "fr" and voices.language_of("zoé") == "fr"
    assert "<whimper>" in voices.tags["fr"]


def test_voices_json_may_give_languages_to_a_model_no_table_knows(tmp_path: Path) -> None:
    folder = _folder(tmp_path, "mixed")
    (folder / "voices.json").write_text(json.dumps({"voices": ["jana", "长乐"], "languages": {"jana": "de",
                                                                                          "长乐": "zh"}}))
    voices = load_voices(folder)
    assert voices.spoken_languages() == ("de", "zh") and voices.voice_for("zh-CN") == "长乐"
    assert voices.checkpoint is None and voices.tag_warnings("jana", "<anything> <laugh>") == []  # tags unknown
    (folder / "voices.json").write_text(json.dumps({"voices": ["jana"], "languages": {"max": "de"}}))
    with pytest.raises(ValueError, match="'languages' names 'max'"):
        load_voices(folder)


def test_a_voice_and_a_language_that_disagree_are_named_both() -> None:
    voices = Voices.with_aliases(("jana", "pierre"), languages={"jana": "de", "pierre": "fr"})
    with pytest.raises(LanguageMismatch, match=r"'jana' speaks German \(de\), but language is 'fr'.*pierre"):
        voices.check_language("jana", "fr")
    voices.check_language("jana", "de-AT")  # the primary subtag counts
    voices.check_language("jana", None)
    voices.check_language("somebody-else", "fr")  # a voice of unknown language is not checked
    with pytest.raises(LanguageMismatch, match="no voice in Korean"):
        voices.check_language("pierre", "ko")


def test_tags_the_voice_was_not_trained_on_are_reported_others_not(tmp_path: Path) -> None:
    voices = load_voices(_folder(tmp_path, "3b-zh-ft-research_release"))
    warned = voices.tag_warnings("长乐", "你好 <laugh> <b>粗体</b> <咳嗽>")
    assert len(warned) == 1 and warned[0].startswith("<laugh>: canopylabs/3b-zh-ft-research_release was not")
    # The tags it was trained on reach the model: the reading keeps every known checkpoint's, spaced ones too.
    assert normalize("你好 <咳嗽> 그래 <작은 웃음> <B>x</B> <Resoplido>") == "你好 <咳嗽> 그래 <작은 웃음> x <resoplido>"
    english = load_voices(_folder(tmp_path, "english"))
    assert english.tag_warnings("tara", "Ha <LAUGH> <sigh/>") == []
    assert english.tag_warnings("tara", "Oh <whimper>") != []


def test_primary_language_reads_a_tag() -> None:
    assert [primary_language(t) for t in ("de-AT", "ZH_cn", "fr", "", None)] == ["de", "zh", "fr", None, None]
