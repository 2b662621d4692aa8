"""Voices from a reference clip: a few seconds of someone speaking, and what they said, spoken in at once.

A reference voice is the clip SNAC-encoded once (frames of 7 codes, repeated
frames dropped as Orpheus's training data was) and its transcript. Every
request in that voice opens its prompt with the pair (`orpheus.reference_ids`),
and the model carries on in the voice; the engine's prefix cache keeps the
pair's KV blocks, so after the first request only the text is prefilled.

`ReferenceVoices` holds them: in memory, and each as one JSON file in a
folder so they survive a restart. A file is written whole or not at all.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

from lyre import orpheus
from lyre.files import write_atomic
from lyre.tts.clips import ClipRejected, ClipTooLong, SilenceCut, TrimmedClip, load_clip, trim_clip

__all__ = ["MAX_FILE_SECONDS", "MAX_SECONDS", "MIN_SECONDS", "SILENCE_MARGIN_S", "ReferenceRejected", "ReferenceVoice",
           "ReferenceVoices", "check_name", "check_text", "default_voices_dir", "read_reference_clip"]

log = logging.getLogger("lyre.tts")

MIN_SECONDS = 3.0  # of speech after the silence cut: less does not carry a voice
# Of speech after the cut: more costs every request's prompt without a better likeness. 15 s (about 1,230 audio
# tokens) and its text fit the default --max-seq-len of 2048 beside the prompt and about 5 s of reply.
MAX_SECONDS = 15.0
SILENCE_MARGIN_S = 10.0  # silence around the speech a clip may hold, cut before the clip is measured
MAX_FILE_SECONDS = MAX_SECONDS + SILENCE_MARGIN_S  # audio decoded from a clip at most; past it, it is refused
# Fast speech is about 20 characters a second; text much denser than this cannot be what the clip says.
MAX_CHARS_PER_SECOND = 30.0
MAX_TEXT_CHARS = 1000
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")


def default_voices_dir(codec: str) -> Path:
    """Where a server keeps its reference voices unless told: the lyre cache's, one folder per codec (a
    voice is codes of the codec that encoded it: the demo's random codec's are noise to the real one)."""
    from lyre.demo_model import cache_root

    return cache_root() / "voices" / (re.sub(r"[^A-Za-z0-9_.-]+", "--", codec).strip("-.") or "codec")


class ReferenceRejected(ValueError):
    """A reference voice that cannot be made; ``param`` names the part of the request at fault."""

    def __init__(self, message: str, param: str) -> None:
        super().__init__(message)
        self.param = param


def check_name(name: str) -> str:
    """``name`` when it can name a voice (letters, digits, ``_ . -``, at most 64), else ReferenceRejected."""
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise ReferenceRejected(f"name: {name!r} cannot name a voice: use 1-64 letters, digits, '_', '.' or '-', "
                                "starting with a letter or digit", "name")
    return name


def read_reference_clip(data: bytes) -> TrimmedClip:
    """An uploaded clip as 24 kHz mono with the silence around the speech cut, between `MIN_SECONDS` and
    `MAX_SECONDS` long; ReferenceRejected (param ``file``) naming what is wrong with it. No more than
    `MAX_FILE_SECONDS` of it is ever decoded."""
    try:
        clip = trim_clip(load_clip(data, MAX_FILE_SECONDS), SilenceCut())
    except ClipTooLong:
        raise ReferenceRejected(f"file: more than {MAX_FILE_SECONDS:g} s of audio; a reference may be at most "
                                f"{MAX_SECONDS:g} s of speech, with up to {SILENCE_MARGIN_S:g} s of silence around "
                                "it (cut it to one or two sentences)", "file") from None
    except ClipRejected as exc:
        raise ReferenceRejected(f"file: {exc}", "file") from None
    _check_seconds(clip.seconds)
    return clip


def _check_seconds(seconds: float) -> None:
    if seconds < MIN_SECONDS:
        raise ReferenceRejected(f"file: {seconds:.2f} s of speech once the silence around it is cut; a "
                                f"reference needs at least {MIN_SECONDS:g} s", "file")
    if seconds > MAX_SECONDS:
        raise ReferenceRejected(f"file: {seconds:.1f} s of speech once the silence around it is cut; a "
                                f"reference may be at most {MAX_SECONDS:g} s (cut it to one or two sentences)",
                                "file")


def check_text(text: str, seconds: float) -> str:
    """The reference's transcript, stripped; ReferenceRejected (param ``text``) when it is empty or far more
    than ``seconds`` of speech could say."""
    text = text.strip() if isinstance(text, str) else ""
    if not text:
        raise ReferenceRejected("text: the reference's transcript must not be empty", "text")
    most = min(MAX_TEXT_CHARS, round(MAX_CHARS_PER_SECOND * seconds) + 20)
    if len(text) > most:
        raise ReferenceRejected(f"text: {len(text)} characters is more than {seconds:.1f} s of speech can say "
                                f"(at most {most}); give what the clip says", "text")
    return text


@dataclass(frozen=True)
class ReferenceVoice:
    """A voice made from a clip: its name, what the clip says, and the clip as SNAC frames."""

    name: str
    text: str
    frames: tuple[tuple[int, ...], ...]  # 7 codes each, repeated frames dropped
    seconds: float  # the clip's speech, after the silence cut
    transcribed: bool = False  # the text is a transcript the server made, not the uploader's

    def __post_init__(self) -> None:
        check_name(self.name)
        if not self.frames or any(len(f) != orpheus.FRAME_TOKENS or not all(
                isinstance(c, int) and 0 <= c < orpheus.CODEBOOK_SIZE for c in f) for f in self.frames):
            raise ValueError(f"reference voice {self.name!r}: frames must be a non-empty list of "
                             f"{orpheus.FRAME_TOKENS} codes in [0, {orpheus.CODEBOOK_SIZE}) each")
        if not self.text.strip():
            raise ValueError(f"reference voice {self.name!r}: text must not be empty")

    @cached_property
    def digest(self) -> str:
        """A short hash of what the voice is (text and frames): the same voice everywhere has the same one."""
        h = hashlib.sha256(self.text.encode())
        h.update(json.dumps(self.frames).encode())
        return h.hexdigest()[:16]

    def prefix_ids(self, tokenizer: orpheus.TextTokenizer) -> list[int]:
        """The prompt's opening turn: this voice saying its text."""
        return orpheus.reference_ids(tokenizer, self.text, self.frames)

    def describe(self) -> dict[str, Any]:
        """As ``GET /v1/audio/voices`` lists it."""
        return {"id": self.name, "name": self.name, "kind": "reference", "duration_s": round(self.seconds, 3),
                "text": self.text, "transcribed": self.transcribed, "frames": len(self.frames),
                "digest": self.digest}

    def to_json(self) -> str:
        return json.dumps({"name": self.name, "text": self.text, "seconds": self.seconds,
                           "transcribed": self.transcribed, "frames": self.frames})

    @classmethod
    def from_json(cls, text: str | bytes) -> ReferenceVoice:
        """ValueError (naming the problem) for anything that is not a whole voice."""
        try:
            data = json.loads(text)
            return cls(name=data["name"], text=data["text"], seconds=float(data["seconds"]),
                       transcribed=bool(data.get("transcribed", False)),
                       frames=tuple(tuple(f) for f in data["frames"]))
        except (KeyError, TypeError, json.JSONDecodeError) as exc:
            raise ValueError(f"not a reference voice ({type(exc).__name__}: {exc})") from None


class ReferenceVoices:
    """The reference voices a pipeline speaks: in memory, and in ``folder`` (None: memory only).

    ``taken(name)`` says whether a name already belongs to another kind of
    voice (the model's, an alias, an adapter): such a name is refused.
    """

    def __init__(self, folder: Path | None, taken: Callable[[str], bool] = lambda name: False) -> None:
        self.folder = folder
        self._taken = taken
        self._voices: dict[str, ReferenceVoice] = {}
        self._files: set[str] = set()  # the voices kept on disk here (the rest came from the fleet)
        self._prefixes: dict[str, tuple[str, list[int]]] = {}  # name -> (digest, prompt prefix ids)
        self._adding = threading.Lock()  # two uploads of one name: the second is refused, not written over
        if folder is not None:
            folder.mkdir(parents=True, exist_ok=True)
            for path in sorted(folder.glob("*.json")):
                try:
                    voice = ReferenceVoice.from_json(path.read_bytes())
                except (OSError, ValueError) as exc:
                    log.warning("reference voice file %s skipped: %s", path, exc)
                    continue
                if path.stem != voice.name or taken(voice.name):
                    log.warning("reference voice file %s skipped: its name %r is %s", path, voice.name,
                                "another voice's" if taken(voice.name) else "not its file's")
                    continue
                self._voices[voice.name] = voice
                self._files.add(voice.name)

    def __contains__(self, name: object) -> bool:
        return name in self._voices

    def __iter__(self) -> Iterator[ReferenceVoice]:
        return iter(sorted(self._voices.values(), key=lambda v: v.name))

    def __len__(self) -> int:
        return len(self._voices)

    def get(self, name: str) -> ReferenceVoice:
        return self._voices[name]

    def check_new(self, name: str) -> None:
        """ReferenceRejected (param ``name``) unless ``name`` is free for a new reference voice."""
        check_name(name)
        if self._taken(name):
            raise ReferenceRejected(f"name: {name!r} is already a voice of this server (a model voice, an alias "
                                    "or a cloned voice's adapter)", "name")
        if name in self._voices:
            raise ReferenceRejected(f"name: reference voice {name!r} exists; delete it first to replace it", "name")

    def add(self, voice: ReferenceVoice) -> None:
        """Keep ``voice`` (its file first, written whole, then in memory); ReferenceRejected if its name is taken.
        Blocking (the file is synced to disk): call it from a worker thread."""
        with self._adding:
            self.check_new(voice.name)
            if self.folder is not None:
                write_atomic(self.folder / f"{voice.name}.json", voice.to_json())
                self._files.add(voice.name)
            self._voices[voice.name] = voice

    def saved_at(self, name: str) -> float | None:
        """When this server wrote ``name``'s file (seconds since the epoch); None when it keeps none."""
        if name not in self._files or self.folder is None:
            return None
        try:
            return (self.folder / f"{name}.json").stat().st_mtime
        except OSError:
            return None

    def remove(self, name: str) -> ReferenceVoice:
        """Forget ``name`` (KeyError if there is none), its file too."""
        voice = self._voices.pop(name)
        self._prefixes.pop(name, None)
        if name in self._files:
            self._files.discard(name)
            (self.folder / f"{name}.json").unlink(missing_ok=True)  # type: ignore[operator]
        return voice

    def on_disk(self) -> list[str]:
        """The voices this server keeps in its folder (uploaded here), not those it holds for the fleet."""
        return sorted(self._files)

    def put(self, voice: ReferenceVoice) -> bool:
        """Hold ``voice`` as another server of the fleet made it (memory only; it replaces one of the same
        name). False, and nothing kept, when its name belongs to another kind of voice here."""
        if self._taken(voice.name):
            return False
        if voice.name in self._files and self._voices[voice.name].digest != voice.digest:
            self.remove(voice.name)  # the fleet's version wins over the one this server kept
        self._voices[voice.name] = voice
        return True

    def drop(self, name: str) -> None:
        """Forget ``name`` from memory (the fleet deleted it); its file too, if this server had one."""
        if name in self._voices:
            self.remove(name)

    def prefix(self, voice: ReferenceVoice, tokenizer: orpheus.TextTokenizer) -> list[int]:
        """``voice.prefix_ids``, built once per voice."""
        cached = self._prefixes.get(voice.name)
        if cached is None or cached[0] != voice.digest:
            cached = (voice.digest, voice.prefix_ids(tokenizer))
            self._prefixes[voice.name] = cached
        return cached[1]
