"""A model's voices, and the other names clients may call them by.

Agent frameworks' OpenAI services only let their users pick OpenAI's own
voice names (``alloy``, ``nova``, ...), so every such name is an alias of one
of the model's voices. The default table spreads them over the English
finetune's speakers by the character of each OpenAI voice; for a model with
other speakers it spreads them round-robin in the order the model lists its
voices. ``voices.json`` beside the weights and ``--voice-alias NAME=VOICE``
override single entries. A real voice name always wins over an alias of the
same name.

A model known by name (lyre.tts.checkpoints: the English finetune and Canopy
Labs' multilingual ones) brings its voices, each voice's language and the
emotive tags it was trained on, with no ``voices.json``; one beside the
weights still names the voices.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from lyre import orpheus
from lyre.tts.checkpoints import CHECKPOINTS, ENGLISH, identify, language_name, primary_language
from lyre.tts.text import clean

__all__ = ["OPENAI_VOICES", "VOICES_FILE", "LanguageMismatch", "VoiceNameTaken", "Voices", "default_aliases",
           "load_voices", "parse_alias"]

log = logging.getLogger("lyre.tts")

# A finetune with voices of its own lists them here, beside its weights.
VOICES_FILE = "voices.json"

# OpenAI's speech voices, as its SDK and the agent frameworks' OpenAI services know them.
OPENAI_VOICES = ("alloy", "ash", "ballad", "cedar", "coral", "echo", "fable", "marin", "nova", "onyx", "sage",
                 "shimmer", "verse")

# For the English finetune: OpenAI's lighter, female-presenting voices to Orpheus's female speakers,
# the deeper, male-presenting ones to its male speakers, every speaker used at least once.
_ENGLISH_ALIASES = {
    "alloy": "tara", "coral": "leah", "nova": "jess", "sage": "mia", "shimmer": "zoe", "marin": "tara",
    "ash": "leo", "ballad": "dan", "cedar": "zac", "echo": "leo", "fable": "dan", "onyx": "zac", "verse": "leo",
}
assert set(_ENGLISH_ALIASES) == set(OPENAI_VOICES) and set(_ENGLISH_ALIASES.values()) == set(orpheus.VOICES)

# Every emotive tag some Orpheus checkpoint knows (``laugh/`` is SSML's way to write one); other <...> are markup.
_ANY_TAG = re.compile(r"<\s*([^<>/]{1,24}?)\s*/?\s*>")
_KNOWN_TAGS = frozenset(t.lower() for c in CHECKPOINTS for language in c.languages for t in language.tags)
_VOICES_FILE_KEYS = ("voices", "aliases", "reference_voices", "languages")


class LanguageMismatch(ValueError):
    """A request's voice speaks another language than the request's; the message names both."""

    param = "language"


class VoiceNameTaken(ValueError):
    """A new voice (a reference voice, an adapter) under a name another voice holds; the message names it.

    A voice's name is one namespace across the model's voices and their aliases, cloned voices (adapters) and
    reference voices: a request names a voice, and the name must mean one voice.
    """

    param = "name"

    @classmethod
    def held(cls, name: str, holder: str) -> VoiceNameTaken:
        """The refusal of ``name``, which ``holder`` (such as "a reference voice") holds on this server."""
        return cls(f"name: {name!r} is already {holder} on this server; a voice's name names one voice")


def default_aliases(names: tuple[str, ...]) -> dict[str, str]:
    """OpenAI's voice names mapped onto ``names``: the English table when every voice it
    uses is there, else round-robin over ``names`` in order."""
    if set(_ENGLISH_ALIASES.values()) <= set(names):
        return dict(_ENGLISH_ALIASES)
    return {alias: names[i % len(names)] for i, alias in enumerate(OPENAI_VOICES)}


def parse_alias(text: str) -> tuple[str, str]:
    """``NAME=VOICE`` -> (NAME, VOICE); ValueError naming the problem."""
    name, sep, voice = text.partition("=")
    name, voice = name.strip(), voice.strip()
    if not sep or not name or not voice:
        raise ValueError(f"voice alias {text!r}: expected NAME=VOICE, for example alloy=tara")
    return name, voice


@dataclass(frozen=True)
class Voices:
    """The model's voices (the first is the default) and aliases onto them."""

    names: tuple[str, ...]
    aliases: Mapping[str, str] = field(default_factory=dict)
    # The model continues a voice from a reference clip in its prompt (voices.json's "reference_voices").
    reference_voices: bool = False
    languages: Mapping[str, str] = field(default_factory=dict)  # voice -> ISO 639-1 code, where known
    # language -> the emotive tags the model was trained on in it, where known (the model's checkpoint's)
    tags: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    checkpoint: str | None = None  # the hub id of the known checkpoint the model is, if it is one

    def __post_init__(self) -> None:
        if not self.names:
            raise ValueError("a model needs at least one voice")
        if unknown := sorted(set(self.languages) - set(self.names)):
            raise ValueError(f"a language is given for {unknown[0]!r}, which is not one of the model's voices")
        for alias, voice in self.aliases.items():
            if voice not in self.names:
                raise ValueError(f"voice alias {alias!r} points at {voice!r}, which this model does not have; "
                                 f"its voices are: {', '.join(self.names)}")
            if alias in self.names:
                raise ValueError(f"voice alias {alias!r} is also one of the model's voices")

    @classmethod
    def with_aliases(cls, names: tuple[str, ...], *tables: Mapping[str, str], reference_voices: bool = False,
                     languages: Mapping[str, str] | None = None, tags: Mapping[str, tuple[str, ...]] | None = None,
                     checkpoint: str | None = None) -> Voices:
        """The default aliases for ``names``, overridden by each table in turn; an alias named like
        a real voice is dropped (the voice wins), with a warning when a table asked for it."""
        merged = default_aliases(names)
        for table in tables:
            merged.update(table)
        for alias in [a for a in merged if a in names]:
            if any(alias in table for table in tables):
                log.warning("voice alias %r ignored: the model has a voice of that name, which always wins", alias)
            del merged[alias]
        return cls(names, merged, reference_voices, dict(languages or {}), dict(tags or {}), checkpoint)

    @property
    def default(self) -> str:
        return self.names[0]

    def __contains__(self, name: object) -> bool:
        return name in self.names or name in self.aliases

    def __iter__(self) -> Iterator[str]:
        return iter(self.names)

    def __len__(self) -> int:
        return len(self.names)

    def holder(self, name: str) -> str | None:
        """What of the model's ``name`` is (one of its voices, or an alias of one), or None."""
        if name in self.names:
            return "one of the model's voices"
        if name in self.aliases:
            return f"an alias of the model's voice {self.aliases[name]!r}"
        return None

    def resolve(self, name: str | None) -> str | None:
        """The model voice ``name`` means (None stays None: no voice in the prompt).

        Raises ValueError naming the voices and aliases on offer."""
        if name is None or name in self.names:
            return name
        if isinstance(name, str) and name in self.aliases:
            return self.aliases[name]
        raise ValueError(f"unknown voice {name!r}; this model has: {', '.join(self.names)} "
                         f"(and OpenAI-style aliases: {', '.join(sorted(self.aliases))})")

    def language_of(self, name: str | None) -> str | None:
        """The language the voice (or alias) ``name`` speaks, where known."""
        voice = self.aliases.get(name, name) if name is not None else None
        return self.languages.get(voice) if voice is not None else None

    def voice_for(self, language: str | None) -> str | None:
        """The model's first voice that speaks ``language`` (a tag; its primary subtag counts), or None."""
        code = primary_language(language)
        return next((v for v in self.names if code is not None and self.languages.get(v) == code), None)

    def spoken_languages(self) -> tuple[str, ...]:
        """The languages the model's voices speak, where known, in the order of its voices."""
        return tuple(dict.fromkeys(self.languages[v] for v in self.names if v in self.languages))

    def check_language(self, voice: str | None, language: str | None) -> None:
        """Nothing if ``voice`` may speak ``language`` (either unknown counts as agreeing), else
        LanguageMismatch naming both, and the model's voices of ``language`` if it has any."""
        spoken, asked = self.language_of(voice), primary_language(language)
        if spoken is None or asked is None or spoken == asked:
            return
        others = [v for v in self.names if self.languages.get(v) == asked]
        offer = (f"; its voices in {language_name(asked)} are: {', '.join(others)}" if others
                 else f"; this model has no voice in {language_name(asked)}")
        raise LanguageMismatch(f"voice {voice!r} speaks {language_name(spoken)} ({spoken}), but language is "
                               f"{language!r}{offer}")

    def tag_warnings(self, voice: str | None, text: str) -> list[str]:
        """What of ``text``'s emotive tags the model was not trained on in ``voice``'s language, or lyre's
        text reading drops; nothing where the voice's language or its tags are not known."""
        language = self.language_of(voice)
        trained = self.tags.get(language) if language is not None else None
        if trained is None:
            return []
        warnings = []
        for name in dict.fromkeys(m.group(1).lower() for m in _ANY_TAG.finditer(text)):
            tag = f"<{name}>"
            if tag not in _KNOWN_TAGS:
                continue  # markup, not an emotive tag: the reading drops it as before
            model = self.checkpoint or "this model"
            if tag not in trained:
                listed = ", ".join(trained) if trained else "none"
                warnings.append(f"{tag}: {model} was not trained on it in {language_name(language)} (its tags: "
                                f"{listed})")
            elif clean(tag).strip() != tag:  # the reading decides which tags reach the model
                warnings.append(f"{tag}: {model} was trained on it, but lyre's text reading does not pass it to "
                                "the model yet (it keeps the English finetune's tags only)")
        return warnings

    def listing(self) -> list[dict[str, str]]:
        """What ``GET /v1/audio/voices`` shows: the voices, then each alias with what it resolves to; each
        with its ``language`` where known."""
        def shown(entry: dict[str, str], voice: str) -> dict[str, str]:
            return {**entry, "language": self.languages[voice]} if voice in self.languages else entry

        return ([shown({"id": v, "name": v}, v) for v in self.names]
                + [shown({"id": a, "name": a, "alias_of": v}, v) for a, v in sorted(self.aliases.items())])


def load_voices(folder: Path, overrides: Mapping[str, str] | None = None) -> Voices:
    """The model's voices and aliases.

    ``voices.json`` beside the weights is a JSON list of voice names, or an
    object ``{"voices": [...], "aliases": {"alloy": "pierre", ...},
    "reference_voices": true, "languages": {"pierre": "fr", ...}}`` (the model
    can take a voice from a reference clip; each voice's language). Without
    it, the voices of the known checkpoint the folder holds
    (lyre.tts.checkpoints), else the English finetune's. A voice a known
    checkpoint has keeps its language and tags. ``overrides``
    (``--voice-alias``) win over the file's aliases, which win over the
    defaults.
    """
    known = identify(folder)
    checkpoint = known or ENGLISH
    names: tuple[str, ...] = checkpoint.voices
    file_aliases: dict[str, str] = {}
    file_languages: dict[str, str] = {}
    references = False
    path = folder / VOICES_FILE
    if path.exists():
        names, file_aliases, references, file_languages = _read_voices_file(path)
        checkpoint = known  # the English finetune is only assumed where nothing names the voices
    languages = {v: code for v in names if checkpoint is not None and (code := checkpoint.language_of(v))}
    languages.update(file_languages)
    tags = {} if checkpoint is None else {code: checkpoint.tags_for(code) for code in set(languages.values())
                                          if checkpoint.tags_for(code) is not None}
    return Voices.with_aliases(names, file_aliases, dict(overrides or {}), reference_voices=references,
                               languages=languages, tags=tags,
                               checkpoint=checkpoint.hub_id if checkpoint is not None else None)


def _read_voices_file(path: Path) -> tuple[tuple[str, ...], dict[str, str], bool, dict[str, str]]:
    """``voices.json``: (voices, aliases, reference_voices, languages); ValueError naming what is wrong."""
    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path}: not valid JSON ({exc})") from exc
    languages: object = {}
    if isinstance(data, dict):
        unknown = set(data) - set(_VOICES_FILE_KEYS)
        if unknown:
            expected = ", ".join(map(repr, _VOICES_FILE_KEYS))
            raise ValueError(f"{path}: unknown keys {sorted(unknown)}; expected {expected}")
        voices, aliases = data.get("voices", list(orpheus.VOICES)), data.get("aliases", {})
        references, languages = data.get("reference_voices", False), data.get("languages", {})
        if not isinstance(references, bool):
            raise ValueError(f"{path}: 'reference_voices' must be true or false")
    else:
        voices, aliases, references = data, {}, False
    if not isinstance(voices, list) or not voices or not all(isinstance(v, str) and v.strip() for v in voices):
        raise ValueError(f"{path}: expected a non-empty JSON list of voice names")
    if not isinstance(aliases, dict) or not all(isinstance(k, str) and k.strip() and isinstance(v, str)
                                                for k, v in aliases.items()):
        raise ValueError(f"{path}: 'aliases' must be an object of alias name -> voice name")
    if not isinstance(languages, dict) or not all(isinstance(v, str) and primary_language(v)
                                                  for v in languages.values()):
        raise ValueError(f"{path}: 'languages' must be an object of voice name -> language code (such as 'de')")
    if unknown_voice := next((v for v in languages if v not in voices), None):
        raise ValueError(f"{path}: 'languages' names {unknown_voice!r}, which is not one of its voices")
    return (tuple(voices), aliases, references,
            {v: primary_language(code) for v, code in languages.items()})  # type: ignore[misc]
