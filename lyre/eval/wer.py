"""Word error rate as the 2026 comparisons score it: Whisper's English normaliser on both sides, then words.

Both the text that was asked for and the transcript pass through OpenAI Whisper's English text normaliser
(the ``whisper-normalizer`` package holds it unchanged): lower case, no punctuation, numbers as digits
("eleven" and "11" both "11"), British spellings American, contractions spelled out. What remains
is compared word by word (jiwer). So a transcript that hears every word scores 0 whether Whisper wrote "ten"
or "10".

- An utterance's WER is its (substitutions + deletions + insertions) over its reference words.
- The corpus WER is every utterance's errors over every utterance's words (long utterances weigh more).
- Utterances above 50% WER are the ones that went wrong (noise, a skipped sentence, a loop); the corpus WER
  without them shows how well the rest was said, and their count how often that happened.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass

import jiwer

__all__ = ["OVER", "WerSummary", "Words", "normalise", "score", "summarise"]

OVER = 0.5  # an utterance above this WER counts as gone wrong


@functools.cache
def _normaliser() -> object:
    from whisper_normalizer.english import EnglishTextNormalizer  # reads its spelling table once

    return EnglishTextNormalizer()


def normalise(text: str) -> str:
    """``text`` as Whisper's English normaliser writes it: the form both sides are compared in."""
    return " ".join(_normaliser()(text).split())  # type: ignore[operator]


@dataclass(frozen=True)
class Words:
    """One utterance's comparison: its reference and transcript normalised, and the errors between them."""

    reference: str
    hypothesis: str
    errors: int  # substitutions + deletions + insertions
    words: int  # in the reference

    @property
    def wer(self) -> float:
        return self.errors / self.words


def score(reference: str, transcript: str) -> Words:
    """``transcript`` against ``reference``, both normalised; a reference with no words is refused."""
    ref, hyp = normalise(reference), normalise(transcript)
    if not ref:
        raise ValueError(f"the text {reference!r} has no words to score once normalised")
    out = jiwer.process_words(ref, hyp)
    return Words(ref, hyp, out.substitutions + out.deletions + out.insertions, len(ref.split()))


@dataclass(frozen=True)
class WerSummary:
    corpus_wer: float | None  # None: no utterances
    wer_excluding_over_50: float | None  # None: every utterance was over 50%
    over_50: int
    utterances: int


def _corpus(scored: Sequence[Words]) -> float | None:
    words = sum(s.words for s in scored)
    return sum(s.errors for s in scored) / words if words else None


def summarise(scored: Sequence[Words]) -> WerSummary:
    """The corpus WER, the same without the utterances above 50%, and how many those were."""
    kept = [s for s in scored if s.wer <= OVER]
    return WerSummary(_corpus(scored), _corpus(kept), len(scored) - len(kept), len(scored))
