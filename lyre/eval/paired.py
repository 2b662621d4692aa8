"""Paired differences with a bootstrap confidence interval: is B's quality A's, within what the sample can say?

The same prompts and seeds go to both sides, so utterance i of A and utterance i of B form a pair. A
resample draws utterance indices with replacement (the same indices on both sides, which keeps the pairing)
and recomputes the statistic; the 2.5th and 97.5th percentiles of the resampled statistics are the 95%
interval (the percentile bootstrap). Seeded: the same inputs give the same interval.

- WER: the difference of corpus WERs, B - A, each resample's errors over its words on each side;
- similarity: the mean of per-utterance differences, B - A.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

__all__ = ["RESAMPLES", "Difference", "similarity_difference", "wer_difference"]

RESAMPLES = 10_000
_LEVEL = 0.95


@dataclass(frozen=True)
class Difference:
    """B - A, and its 95% interval."""

    difference: float
    low: float
    high: float
    pairs: int
    resamples: int
    seed: int

    def as_json(self) -> dict[str, object]:
        return {"difference": self.difference, "ci95": [self.low, self.high], "pairs": self.pairs,
                "resamples": self.resamples, "seed": self.seed, "method": "paired percentile bootstrap"}


def _draws(pairs: int, resamples: int, seed: int) -> np.ndarray:
    if pairs < 1:
        raise ValueError("a paired difference needs at least one pair")
    if resamples < 1:
        raise ValueError(f"resamples must be at least 1, got {resamples}")
    return np.random.default_rng(seed).integers(0, pairs, size=(resamples, pairs), dtype=np.int32)  # (resamples, pairs)


def _interval(point: float, resampled: np.ndarray, pairs: int, resamples: int, seed: int) -> Difference:
    tail = 100 * (1 - _LEVEL) / 2
    low, high = np.percentile(resampled, [tail, 100 - tail])
    return Difference(point, float(low), float(high), pairs, resamples, seed)


def wer_difference(errors_a: Sequence[int], errors_b: Sequence[int], words: Sequence[int],
                   resamples: int = RESAMPLES, seed: int = 0) -> Difference:
    """Corpus WER of B minus A over the same utterances (``words`` each, as both said the same text)."""
    if not len(errors_a) == len(errors_b) == len(words):
        raise ValueError(f"pairs differ in length: {len(errors_a)}, {len(errors_b)}, {len(words)}")
    a, b, n = (np.asarray(x, dtype=np.float64) for x in (errors_a, errors_b, words))
    draws = _draws(len(n), resamples, seed)
    resampled = (b[draws].sum(axis=1) - a[draws].sum(axis=1)) / n[draws].sum(axis=1)
    return _interval(float((b.sum() - a.sum()) / n.sum()), resampled, len(n), resamples, seed)


def similarity_difference(a: Sequence[float], b: Sequence[float], resamples: int = RESAMPLES,
                          seed: int = 0) -> Difference:
    """The mean per-utterance similarity of B minus A."""
    if len(a) != len(b):
        raise ValueError(f"pairs differ in length: {len(a)} and {len(b)}")
    delta = np.asarray(b, dtype=np.float64) - np.asarray(a, dtype=np.float64)
    resampled = delta[_draws(len(delta), resamples, seed)].mean(axis=1)
    return _interval(float(delta.mean()), resampled, len(delta), resamples, seed)
