"""Voices from a reference clip: a few seconds of someone speaking, and what they said, spoken in at once.

A reference voice is the clip SNAC-encoded once (frames of 7 codes, repeated
frames dropped as Orpheus's training data was) and its transcript. Every
request in that voice opens its prompt with the pair (`orpheus.reference_ids`),
and the model carries on in the voice; the engine's prefix cache keeps the
pair's KV blocks, so after the first request only the text is prefilled.

`ReferenceVoices` (lyre.tts.reference_store) holds them. A voice that comes
from elsewhere (a file, another server of the fleet) passes `check_reference`,
as an upload does.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

from lyre import orpheus
from lyre.tts.clips import ClipRejected, ClipTooLong, SilenceCut, TrimmedClip, load_clip, trim_clip

__all__ = ["MAX_FILE_SECONDS", "MAX_SECONDS", "MIN_SECONDS", "SILENCE_MARGIN_S", "ReferenceRejected",
           "ReferenceVoice", "check_name", "check_reference", "check_text", "default_voices_dir", "parse_json",
           "read_reference_clip"]


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
    from lyre.models.demo import cache_root

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


def check_reference(voice: ReferenceVoice) -> None:
    """ReferenceRejected unless ``voice`` (from a file, or from another server of the fleet) is one an upload
    could have made: speech between `MIN_SECONDS` and `MAX_SECONDS`, no more frames than that holds, its text
    as `check_text` leaves it."""
    if not math.isfinite(voice.seconds):
        raise ReferenceRejected(f"file: {voice.seconds} s of speech is not a duration", "file")
    _check_seconds(voice.seconds)
    most = math.ceil(voice.seconds * orpheus.SAMPLE_RATE / orpheus.SAMPLES_PER_FRAME) + 1  # seconds are rounded
    if len(voice.frames) > most:
        raise ReferenceRejected(f"file: {len(voice.frames)} frames is more than {voice.seconds:g} s of speech "
                                f"holds (at most {most})", "file")
    if check_text(voice.text, voice.seconds) != voice.text:
        raise ReferenceRejected("text: the transcript has space around it", "text")


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
        if not isinstance(self.text, str) or not self.text.strip():
            raise ValueError(f"reference voice {self.name!r}: text must be a string, not empty")

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

    def record(self) -> dict[str, Any]:
        """The voice as a JSON object (`from_record` reads it back)."""
        return {"name": self.name, "text": self.text, "seconds": self.seconds, "transcribed": self.transcribed,
                "frames": self.frames}

    def to_json(self) -> str:
        return json.dumps(self.record())

    @classmethod
    def from_record(cls, data: Any) -> ReferenceVoice:
        """ValueError (naming the problem) for anything that is not a whole voice; other keys are ignored."""
        try:
            return cls(name=data["name"], text=data["text"], seconds=float(data["seconds"]),
                       transcribed=bool(data.get("transcribed", False)),
                       frames=tuple(tuple(f) for f in data["frames"]))
        except (KeyError, TypeError, AttributeError) as exc:
            raise ValueError(f"not a reference voice ({type(exc).__name__}: {exc})") from None

    @classmethod
    def from_json(cls, text: str | bytes) -> ReferenceVoice:
        """`from_record` of JSON text."""
        return cls.from_record(parse_json(text))


def parse_json(text: str | bytes) -> Any:
    """``json.loads``, its every failure (nesting too deep included) a ValueError."""
    try:
        return json.loads(text)
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as exc:
        raise ValueError(f"not JSON ({type(exc).__name__}: {exc})") from None
