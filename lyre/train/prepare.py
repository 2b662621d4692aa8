"""A dataset made ready to train on: every clip checked, cut, SNAC-encoded and laid out as Orpheus reads it.

One training sequence per clip, exactly the serving prompt followed by what
the model should answer (DESIGN.md section 2):

    START_OF_HUMAN BOS "voice: text" EOT END_OF_HUMAN START_OF_AI START_OF_SPEECH
    audio tokens (7 per frame) END_OF_SPEECH END_OF_AI

The loss is taken on the audio tokens and the two end tokens only. The result
is cached in one JSON file keyed by everything it depends on, so a second run
on the same data skips decoding and encoding.
"""

from __future__ import annotations

import hashlib
import json
import math
import statistics
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Protocol

import numpy as np

from lyre import orpheus
from lyre.common.files import write_atomic
from lyre.tts.clips import ClipRejected, SilenceCut, load_clip, trim_clip
from lyre.train.dataset import Entry, Listing, Skipped

__all__ = ["Clip", "DataConfig", "Encoder", "NoUsableClip", "PreparedDataset", "prepare_dataset", "training_ids"]

_CACHE_VERSION = 1
END_TOKENS = (orpheus.END_OF_SPEECH, orpheus.END_OF_AI)


class Encoder(Protocol):
    def encode(self, pcm: np.ndarray) -> list[tuple[int, ...]]: ...


class NoUsableClip(ValueError):
    """Every clip of the dataset was skipped: there is nothing to train on."""


@dataclass(frozen=True)
class DataConfig:
    """What makes a clip usable and how it is cut. ``voice`` is the speaker name the prompts carry."""

    voice: str
    silence: SilenceCut = SilenceCut()
    min_seconds: float = 0.5
    max_seq_len: int = 2048  # the longest sequence, prompt and audio together (serve's default KV length)

    def __post_init__(self) -> None:
        if not self.voice.strip() or ":" in self.voice:
            raise ValueError(f"the voice name must be non-empty and hold no ':' (it opens the prompt), "
                             f"got {self.voice!r}")
        if not 0 <= self.min_seconds < math.inf:
            raise ValueError(f"min_seconds must be finite and >= 0, got {self.min_seconds}")
        if self.max_seq_len < 32:
            raise ValueError(f"max_seq_len must be at least 32, got {self.max_seq_len}")


@dataclass(frozen=True)
class Clip:
    """One training sequence, and what was cut from its clip to make it."""

    id: str
    ids: list[int]  # the whole sequence
    prompt_len: int  # ids[:prompt_len] is the prompt; the loss is on the rest
    seconds: float  # audio kept, after the cut
    lead_cut_s: float
    tail_cut_s: float

    @property
    def audio_tokens(self) -> list[int]:
        return self.ids[self.prompt_len:-len(END_TOKENS)]


@dataclass(frozen=True)
class PreparedDataset:
    source: str
    clips: list[Clip]
    skipped: list[Skipped]
    key: str  # what the cache was keyed by: equal keys, equal datasets
    cached: bool = False  # read from the cache rather than encoded now

    def summary(self) -> dict:
        """Counts and durations, as `lyre_voice.json` records them."""
        cuts = [c.lead_cut_s for c in self.clips]
        return {"source": self.source, "clips": len(self.clips), "skipped": len(self.skipped),
                "minutes": round(sum(c.seconds for c in self.clips) / 60, 3),
                "leading_silence_cut_s": round(sum(cuts), 3),
                "trailing_silence_cut_s": round(sum(c.tail_cut_s for c in self.clips), 3)}

    def report(self) -> str:
        """What a person reads before training starts: used, skipped and why, minutes, silence cut."""
        s = self.summary()
        mean = 1000 * statistics.fmean(c.lead_cut_s for c in self.clips) if self.clips else 0.0
        lines = [f"dataset {self.source}: {s['clips']} clips used, {s['skipped']} skipped"
                 f"{' (prepared data read from the cache)' if self.cached else ''}",
                 f"  {s['minutes']:.2f} min of audio; leading silence cut {s['leading_silence_cut_s']:.2f} s "
                 f"(mean {mean:.0f} ms a clip), trailing {s['trailing_silence_cut_s']:.2f} s"]
        lines += [f"  skipped {k.id}: {k.reason}" for k in self.skipped]
        return "\n".join(lines)


def training_ids(prompt: list[int], frames: list[tuple[int, ...]]) -> list[int]:
    """The prompt, the frames' audio tokens, then the end tokens."""
    audio = [orpheus.audio_token(k, code) for frame in frames for k, code in enumerate(frame)]
    return [*prompt, *audio, *END_TOKENS]


def _dataset_key(listing: Listing, config: DataConfig, identity: str) -> str:
    files = []
    for e in listing.entries:
        stat = e.audio.stat() if e.audio.is_file() else None
        files.append([e.id, e.text, str(e.audio), stat and stat.st_size, stat and stat.st_mtime_ns])
    spec = {"version": _CACHE_VERSION, "files": files, "skipped": [asdict(s) for s in listing.skipped],
            "config": asdict(config), "identity": identity}
    return hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()[:16]


def _prepare_entry(entry: Entry, config: DataConfig, tokenizer: orpheus.TextTokenizer,
                   encoder: Callable[[], Encoder]) -> Clip | str:
    """One listed clip as a training sequence, or the reason it cannot be one."""
    text, audio = entry.text, entry.audio
    if not text:
        return "missing transcript"
    try:
        prompt = orpheus.prompt_ids(tokenizer, text, config.voice)
    except ValueError as exc:  # text that tokenises to control tokens
        return f"bad transcript: {exc}"
    if not audio.is_file():
        return f"no audio file at {audio}"
    try:
        trimmed = trim_clip(load_clip(audio), config.silence)
    except ClipRejected as exc:
        return str(exc)
    if trimmed.seconds < config.min_seconds:
        return f"too short: {trimmed.seconds:.2f} s after the silence cut (at least {config.min_seconds:g} s)"
    frames = math.ceil(len(trimmed.pcm) / orpheus.SAMPLES_PER_FRAME)
    length = len(prompt) + orpheus.FRAME_TOKENS * frames + len(END_TOKENS)
    if length > config.max_seq_len:
        return (f"too long: {trimmed.seconds:.1f} s is {length} tokens with its prompt, above the "
                f"context of {config.max_seq_len} (--max-seq-len)")
    ids = training_ids(prompt, encoder().encode(trimmed.pcm))
    return Clip(entry.id, ids, len(prompt), trimmed.seconds, trimmed.lead_cut_s, trimmed.tail_cut_s)


def prepare_dataset(listing: Listing, config: DataConfig, tokenizer: orpheus.TextTokenizer,
                    encoder: Callable[[], Encoder], identity: str, cache_dir: Path | None = None) -> PreparedDataset:
    """Check, cut and encode every clip of ``listing``, or read the result from ``cache_dir``.

    ``encoder`` is called only when something must be encoded (the codec
    loads only then); ``identity`` names the codec and tokenizer, so a cache
    made with others is not used. NoUsableClip when every clip is skipped.
    """
    key = _dataset_key(listing, config, identity)
    cache = cache_dir / f"dataset-{key}.json" if cache_dir is not None else None
    if cache is not None and cache.is_file():
        data = json.loads(cache.read_text())
        prepared = PreparedDataset(str(listing.source), [Clip(**c) for c in data["clips"]],
                                   [Skipped(**s) for s in data["skipped"]], key, cached=True)
    else:
        clips, skipped = [], list(listing.skipped)
        for entry in listing.entries:
            made = _prepare_entry(entry, config, tokenizer, encoder)
            if isinstance(made, str):
                skipped.append(Skipped(entry.id, made))
            else:
                clips.append(made)
        prepared = PreparedDataset(str(listing.source), clips, skipped, key)
        if cache is not None and clips:
            write_atomic(cache, json.dumps({"clips": [asdict(c) for c in clips],
                                             "skipped": [asdict(s) for s in skipped]}))
    if not prepared.clips:
        reasons = "; ".join(f"{s.id}: {s.reason}" for s in prepared.skipped[:10]) or "it lists no clips"
        raise NoUsableClip(f"no usable clip in {listing.source}, nothing to train on ({reasons})")
    return prepared
