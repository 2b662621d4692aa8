"""Whisper's encoder window: 10 ms feature frames, its whole 30 s window, and a final pass's first window fitted
to the audio it holds (what the fitted model encodes, and what the passes ask of it)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from lyre.stt.audio import SAMPLE_RATE

__all__ = ["FULL_WINDOW", "FULL_WINDOW_FRAMES", "SAMPLES_PER_FRAME", "FinalWindow", "fitted_frames"]

SAMPLES_PER_FRAME = SAMPLE_RATE // 100  # a 10 ms feature frame
FULL_WINDOW_FRAMES = 3000  # Whisper's whole window: 30 s
_WINDOW_BUCKET_FRAMES = 100


@dataclass(frozen=True)
class FinalWindow:
    """What a final pass's first window encodes: the audio and ``pad_s`` of silence after it, rounded up to
    a second (at most Whisper's 30 s), or Whisper's whole 30 s window when ``pad_s`` is None.

    The encoder's cost grows with the window, so a fitted window is cheaper for short audio; but Whisper
    was trained on 30 s windows, and benchmarks/stt.py --final-windows measures what a fitted one costs in
    word error rate.
    """

    pad_s: float | None = None

    def __post_init__(self) -> None:
        if self.pad_s is not None and not 0.0 <= self.pad_s <= 30.0:
            raise ValueError(f"pad_s must be between 0 and 30 seconds (or None: the full window), got {self.pad_s}")

    def frames(self, samples: int) -> int:
        """Feature frames (10 ms each) of the first window for ``samples`` of audio at 16 kHz."""
        if self.pad_s is None:
            return FULL_WINDOW_FRAMES
        return fitted_frames(samples, round(self.pad_s * 100))

    def __str__(self) -> str:
        return "30 s" if self.pad_s is None else f"audio + {self.pad_s:g} s"


FULL_WINDOW = FinalWindow()


def fitted_frames(samples: int, pad_frames: int) -> int:
    """``samples`` of audio and ``pad_frames`` of silence in feature frames, rounded up to a second, at most 30 s.

    Rounded so that utterances of about the same length share an input shape."""
    frames = math.ceil(samples / SAMPLES_PER_FRAME) + pad_frames
    return min(FULL_WINDOW_FRAMES, math.ceil(frames / _WINDOW_BUCKET_FRAMES) * _WINDOW_BUCKET_FRAMES)
