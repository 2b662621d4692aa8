"""A model's voices, and the other names clients may call them by.

Agent frameworks' OpenAI services only let their users pick OpenAI's own
voice names (``alloy``, ``nova``, ...), so every such name is an alias of one
of the model's voices. The default table spreads them over the English
finetune's speakers by the character of each OpenAI voice; for a model with
other speakers it spreads them round-robin in the order the model lists its
voices. ``voices.json`` beside the weights and ``--voice-alias NAME=VOICE``
override single entries. A real voice name always wins over an alias of the
same name.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from lyre import orpheus

__all__ = ["OPENAI_VOICES", "VOICES_FILE", "VoiceNameTaken", "Voices", "default_aliases", "load_voices",
           "parse_alias"]

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

    def __post_init__(self) -> None:
        if not self.names:
            raise ValueError("a model needs at least one voice")
        for alias, voice in self.aliases.items():
            if voice not in self.names:
                raise ValueError(f"voice alias {alias!r} points at {voice!r}, which this model does not have; "
                                 f"its voices are: {', '.join(self.names)}")
            if alias in self.names:
                raise ValueError(f"voice alias {alias!r} is also one of the model's voices")

    @classmethod
    def with_aliases(cls, names: tuple[str, ...], *tables: Mapping[str, str], reference_voices: bool = False,
                     ) -> Voices:
        """The default aliases for ``names``, overridden by each table in turn; an alias named like
        a real voice is dropped (the voice wins), with a warning when a table asked for it."""
        merged = default_aliases(names)
        for table in tables:
            merged.update(table)
        for alias in [a for a in merged if a in names]:
            if any(alias in table for table in tables):
                log.warning("voice alias %r ignored: the model has a voice of that name, which always wins", alias)
            del merged[alias]
        return cls(names, merged, reference_voices)

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

    def listing(self) -> list[dict[str, str]]:
        """What ``GET /v1/audio/voices`` shows: the voices, then each alias with what it resolves to."""
        return ([{"id": v, "name": v} for v in self.names]
                + [{"id": a, "name": a, "alias_of": v} for a, v in sorted(self.aliases.items())])


def load_voices(folder: Path, overrides: Mapping[str, str] | None = None) -> Voices:
    """The model's voices and aliases.

    ``voices.json`` beside the weights is a JSON list of voice names, or an
    object ``{"voices": [...], "aliases": {"alloy": "pierre", ...},
    "reference_voices": true}`` (the last: the model can take a voice from a
    reference clip); without it, the English finetune's voices. ``overrides`` (``--voice-alias``) win
    over the file's aliases, which win over the defaults.
    """
    names: tuple[str, ...] = orpheus.VOICES
    file_aliases: dict[str, str] = {}
    references = False
    path = folder / VOICES_FILE
    if path.exists():
        try:
            data = json.loads(path.read_text())
        except json.JSONDecodeError as exc:
            raise ValueError(f"{path}: not valid JSON ({exc})") from exc
        if isinstance(data, dict):
            unknown = set(data) - {"voices", "aliases", "reference_voices"}
            if unknown:
                raise ValueError(f"{path}: unknown keys {sorted(unknown)}; expected 'voices', 'aliases' and "
                                 "'reference_voices'")
            voices, aliases = data.get("voices", list(orpheus.VOICES)), data.get("aliases", {})
            references = data.get("reference_voices", False)
            if not isinstance(references, bool):
                raise ValueError(f"{path}: 'reference_voices' must be true or false")
        else:
            voices, aliases = data, {}
        if not isinstance(voices, list) or not voices or not all(isinstance(v, str) and v.strip() for v in voices):
            raise ValueError(f"{path}: expected a non-empty JSON list of voice names")
        if not isinstance(aliases, dict) or not all(isinstance(k, str) and k.strip() and isinstance(v, str)
                                                    for k, v in aliases.items()):
            raise ValueError(f"{path}: 'aliases' must be an object of alias name -> voice name")
        names, file_aliases = tuple(voices), aliases
    return Voices.with_aliases(names, file_aliases, dict(overrides or {}), reference_voices=references)
