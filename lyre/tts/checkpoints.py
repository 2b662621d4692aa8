"""The Orpheus checkpoints lyre knows by name: their voices, each voice's language, the emotive tags it was
trained on.

Canopy Labs' English finetune and its multilingual research finetunes share one token format, so lyre
serves them all; what differs is whom they can speak as and which tags they understand. A model folder is
known as one of these when its hub id, or its folder's name, says so (`identify`); a ``voices.json``
beside the weights still names the voices (lyre.tts.voices).

    checkpoint = identify(folder)          # None: not one of these
    checkpoint.language_of("jana")         # "de"
    checkpoint.tags_for("de")              # ("<chuckle>", "<cough>", ...)

The names come from Canopy Labs' release of the models (April 2025). The Hindi finetune's tags were not
published ("coming soon"): it is trained on none.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

from lyre import orpheus

__all__ = ["CHECKPOINTS", "ENGLISH", "Checkpoint", "Language", "identify", "language_name", "primary_language"]


@dataclass(frozen=True)
class Language:
    """One language a checkpoint speaks: its ISO 639-1 code (Whisper's), its voices and emotive tags."""

    code: str
    voices: tuple[str, ...]
    tags: tuple[str, ...]  # each as written in the text, ``<laugh>``

    def __post_init__(self) -> None:
        if not self.voices:
            raise ValueError(f"language {self.code!r} needs at least one voice")
        if any(not (t.startswith("<") and t.endswith(">")) for t in self.tags):
            raise ValueError(f"language {self.code!r}: every tag is written <tag>, got {self.tags}")


@dataclass(frozen=True)
class Checkpoint:
    """A finetune on the hub: its id and the languages it speaks (the first voice of the first is its default)."""

    hub_id: str
    languages: tuple[Language, ...]

    def __post_init__(self) -> None:
        voices = [v for language in self.languages for v in language.voices]
        if len(set(voices)) != len(voices):
            raise ValueError(f"{self.hub_id}: a voice is listed in two languages")

    @property
    def name(self) -> str:
        """The hub id's repository name, which a downloaded copy's folder usually keeps."""
        return self.hub_id.rsplit("/", 1)[-1]

    @property
    def voices(self) -> tuple[str, ...]:
        return tuple(v for language in self.languages for v in language.voices)

    def language_of(self, voice: str) -> str | None:
        return next((language.code for language in self.languages if voice in language.voices), None)

    def tags_for(self, language: str) -> tuple[str, ...] | None:
        """The tags the checkpoint was trained on in ``language`` (None: it does not speak it)."""
        return next((entry.tags for entry in self.languages if entry.code == language), None)


def _tags(*names: str) -> tuple[str, ...]:
    return tuple(f"<{name}>" for name in names)


ENGLISH = Checkpoint("canopylabs/orpheus-3b-0.1-ft", (Language("en", orpheus.VOICES, orpheus.EMOTIVE_TAGS),))

CHECKPOINTS = (
    ENGLISH,
    Checkpoint("canopylabs/3b-fr-ft-research_release", (Language(
        "fr", ("pierre", "amelie", "marie"),
        _tags("chuckle", "cough", "gasp", "groan", "laugh", "sigh", "sniffle", "whimper", "yawn")),)),
    Checkpoint("canopylabs/3b-de-ft-research_release", (Language(
        "de", ("jana", "thomas", "max"),
        _tags("chuckle", "cough", "gasp", "groan", "laugh", "sigh", "sniffle", "yawn")),)),
    Checkpoint("canopylabs/3b-ko-ft-research_release", (Language(
        "ko", ("유나", "준서"),
        _tags("한숨", "헐", "헛기침", "훌쩍", "하품", "낄낄", "신음", "작은 웃음", "기침", "으르렁")),)),
    Checkpoint("canopylabs/3b-hi-ft-research_release", (Language("hi", ("ऋतिका",), ()),)),
    Checkpoint("canopylabs/3b-zh-ft-research_release", (Language(
        "zh", ("长乐", "白芷"), _tags("嬉笑", "轻笑", "呻吟", "大笑", "咳嗽", "抽鼻子", "咳")),)),
    Checkpoint("canopylabs/3b-es_it-ft-research_release", (
        Language("es", ("javi", "sergio", "maria"),
                 _tags("groan", "chuckle", "gasp", "resoplido", "laugh", "yawn", "cough")),
        Language("it", ("pietro", "giulia", "carlo"),
                 _tags("sigh", "laugh", "cough", "sniffle", "groan", "yawn", "gemito", "gasp")))),
)

# Every emotive tag a known checkpoint was trained on, in any language: the text keeps these (lyre.tts.text).
ALL_TAGS = tuple(dict.fromkeys(tag for c in CHECKPOINTS for language in c.languages for tag in language.tags))

# What "Reply in ..." calls each language the checkpoints speak; another is named by its code.
_NAMES = {"en": "English", "fr": "French", "de": "German", "ko": "Korean", "hi": "Hindi", "zh": "Chinese (Mandarin)",
          "es": "Spanish", "it": "Italian"}
assert {language.code for c in CHECKPOINTS for language in c.languages} <= set(_NAMES)

# A Hugging Face cache keeps a hub id's snapshots under models--OWNER--NAME/snapshots/COMMIT.
_CACHE_FOLDER = re.compile(r"models--(?P<owner>[^/]+?)--(?P<name>[^/]+)")


def primary_language(tag: str | None) -> str | None:
    """A language tag's primary subtag, lowercased (``de-AT`` -> ``de``); None stays None."""
    return tag.split("-", 1)[0].split("_", 1)[0].strip().lower() or None if tag else None


def language_name(code: str) -> str:
    """``de`` -> ``German``, for the languages the checkpoints speak; any other code as itself."""
    return _NAMES.get(code, code)


def identify(folder: Path) -> Checkpoint | None:
    """The known checkpoint ``folder`` holds: named by its config's ``_name_or_path``, the hub cache folder it
    sits in, or its own name. A name matches a checkpoint's hub id, or its repository name alone or followed
    by ``-`` and more (a converted copy: ``3b-de-ft-research_release-bf16``)."""
    for name in _names_of(folder):
        for checkpoint in CHECKPOINTS:
            if name == checkpoint.hub_id or _same_repository(name.rsplit("/", 1)[-1], checkpoint.name):
                return checkpoint
    return None


def _same_repository(name: str, repository: str) -> bool:
    return name == repository or name.startswith(repository + "-")


def _names_of(folder: Path) -> list[str]:
    """What ``folder`` says it is, most explicit first."""
    names = []
    try:
        config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        config = None
    if isinstance(config, dict) and isinstance(config.get("_name_or_path"), str):
        names.append(config["_name_or_path"].rstrip("/"))
    resolved = folder.expanduser().resolve(strict=False)
    for part in resolved.parts:
        if (cached := _CACHE_FOLDER.fullmatch(part)) is not None:
            names.append(f"{cached['owner']}/{cached['name']}")
    names.append(resolved.name)
    return names
