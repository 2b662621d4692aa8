"""Utterances whose word boundaries are known to the sample, for forced alignment.

Each word is spoken alone by espeak-ng, cut to its voiced part, and the words
are joined with seeded gaps of 70-300 ms, so every word's true start and end
is where its voiced part was placed.

    utterance = known_utterance("I paid 40 dollars <laugh> for it.", seed=1)
    utterance.audio, utterance.text, utterance.words  # [(word as written, start s, end s)]
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from speech import speak

__all__ = ["ALIGN_SENTENCES", "KnownUtterance", "known_utterance"]

RATE = 16_000
EDGE_S = 0.25  # silence before the first word and after the last

# What the aligner meets: plain words, numbers, an abbreviation, punctuation, an emotion tag.
ALIGN_SENTENCES = (
    "I would like to book a table for dinner tomorrow evening.",
    "Please cancel my appointment with the dentist.",
    "Your order of 3 items comes to 42 dollars.",
    "Dr. Smith will see you at 10 tomorrow <laugh> if that suits you.",
    "Thank you very much for your help!",
    "Could you send the receipt to my email address?",
    "The meeting moved to Friday, so I need a later flight.",
)


@dataclass(frozen=True)
class KnownUtterance:
    text: str
    audio: np.ndarray  # float32, 16 kHz mono
    words: list[tuple[str, float, float]]  # each spoken word as written, its true start and end in seconds


def _voiced(audio: np.ndarray) -> np.ndarray:
    """``audio`` cut to its 10 ms blocks within 40 dB of its loudest."""
    block = RATE // 100
    n = audio.size // block
    level = 10 * np.log10(np.mean(audio[: n * block].reshape(n, block) ** 2, axis=1) + 1e-12)
    loud = np.flatnonzero(level > level.max() - 40)
    return audio[loud[0] * block : (loud[-1] + 1) * block]


def known_utterance(text: str, seed: int = 0) -> KnownUtterance:
    rng = np.random.default_rng(seed)
    pieces = [np.zeros(int(EDGE_S * RATE), np.float32)]
    words = []
    at = EDGE_S
    for word in text.split():
        if word.startswith("<"):  # a tag: not spoken, a pause where it stands
            pieces.append(np.zeros(int(0.2 * RATE), np.float32))
            at += 0.2
            continue
        voiced = _voiced(speak(word.strip(".,!?")))
        words.append((word, at, at + voiced.size / RATE))
        gap = np.zeros(int(rng.uniform(0.07, 0.3) * RATE), np.float32)
        pieces += [voiced, gap]
        at += (voiced.size + gap.size) / RATE
    pieces.append(np.zeros(int(EDGE_S * RATE), np.float32))
    return KnownUtterance(text, np.concatenate(pieces).astype(np.float32), words)
