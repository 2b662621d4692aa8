"""Scoring clips: each one's transcript against its text, and its voice against its speaker's reference."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from lyre.eval.clips import Clip, from_file
from lyre.eval.judges import Judge
from lyre.eval.speakers import Embedding, cosine
from lyre.eval.wer import WerSummary, Words, score, summarise

__all__ = ["References", "Row", "Scored", "Utterance", "score_clips"]


@dataclass(frozen=True)
class Utterance:
    """What a clip should be: its text, who should say it, and the seed it was made with (None: given audio)."""

    text: str
    speaker: str
    seed: int | None = None


@dataclass(frozen=True)
class Row:
    name: str
    utterance: Utterance
    seconds: float  # of audio
    transcript: str
    words: Words
    similarity: float | None  # to its speaker's reference; None: no reference, or too little speech

    def as_json(self) -> dict[str, object]:
        u, w = self.utterance, self.words
        return {"name": self.name, "speaker": u.speaker, "text": u.text, "seed": u.seed, "audio_s": self.seconds,
                "transcript": self.transcript, "reference_normalised": w.reference,
                "transcript_normalised": w.hypothesis, "errors": w.errors, "words": w.words, "wer": w.wer,
                "similarity": self.similarity}


@dataclass(frozen=True)
class Scored:
    """One server's (or folder's) clips, scored."""

    label: str
    judge: str
    rows: tuple[Row, ...]
    wer: WerSummary = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "wer", summarise([row.words for row in self.rows]))

    def similarity(self) -> dict[str, float]:
        """The mean similarity per speaker with a reference."""
        by_speaker: dict[str, list[float]] = {}
        for row in self.rows:
            if row.similarity is not None:
                by_speaker.setdefault(row.utterance.speaker, []).append(row.similarity)
        return {speaker: statistics.fmean(values) for speaker, values in sorted(by_speaker.items())}


class References:
    """Each speaker's reference clip, embedded once."""

    def __init__(self, embedding: Embedding, clips: Sequence[tuple[str, Path]]) -> None:
        self.embedding = embedding
        self.paths = {speaker: path for speaker, path in clips}
        self._vectors: dict[str, np.ndarray] = {}
        for speaker, path in clips:
            where = f"--reference {speaker}={path}"
            try:
                clip = from_file(path)
            except ValueError as exc:
                raise ValueError(f"{where}: {exc}") from None
            vector = embedding.embed(clip.audio)
            if vector is None:
                raise ValueError(f"{where}: holds too little speech ({clip.seconds:.2f} s of audio) to know a voice by")
            self._vectors[speaker] = vector

    def similarity(self, speaker: str, clip: Clip) -> float | None:
        """``clip``'s voice against ``speaker``'s reference; None without one, or when it holds too little speech."""
        reference = self._vectors.get(speaker)
        if reference is None:
            return None
        vector = self.embedding.embed(clip.audio)
        return None if vector is None else cosine(vector, reference)


async def score_clips(label: str, clips: Sequence[Clip], utterances: Sequence[Utterance], judge: Judge,
                      references: References | None) -> Scored:
    """Each clip transcribed by ``judge`` and scored against its utterance (and its speaker's reference)."""
    rows = []
    for clip, utterance in zip(clips, utterances, strict=True):
        transcript = await judge.transcribe(clip) if clip.audio.size else ""  # no audio: nothing was said
        similarity = references.similarity(utterance.speaker, clip) if references is not None else None
        rows.append(Row(clip.name, utterance, clip.seconds, transcript, score(utterance.text, transcript),
                        similarity))
    return Scored(label, judge.name, tuple(rows))
