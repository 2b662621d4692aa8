"""What silence looks like to the model: the audio-token frames SNAC gives for digital silence.

Used to count how many frames a generated (or training) utterance opens with
before anything is said: the measure of the leading-silence recipe.
"""

from __future__ import annotations

import numpy as np

from lyre import orpheus
from lyre.train.prepare import Encoder

__all__ = ["leading_silent_frames", "silence_frames"]


def silence_frames(encoder: Encoder, seconds: float = 2.0) -> set[tuple[int, ...]]:
    """Every frame, as 7 audio tokens, of ``seconds`` of zeros encoded (the edges' frames included)."""
    zeros = np.zeros(round(seconds * orpheus.SAMPLE_RATE), np.float32)
    return {tuple(orpheus.audio_token(k, c) for k, c in enumerate(frame)) for frame in encoder.encode(zeros)}


def leading_silent_frames(tokens: list[int], silence: set[tuple[int, ...]]) -> int:
    """How many whole frames at the start of ``tokens`` (audio tokens) are silence frames."""
    n = 0
    for start in range(0, len(tokens) - orpheus.FRAME_TOKENS + 1, orpheus.FRAME_TOKENS):
        if tuple(tokens[start:start + orpheus.FRAME_TOKENS]) not in silence:
            break
        n += 1
    return n
