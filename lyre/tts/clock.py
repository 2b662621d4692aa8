"""A listener's playback clock: how far the audio sent is ahead of what has been played."""

from __future__ import annotations

import time

from lyre import orpheus

__all__ = ["PlaybackClock"]


class PlaybackClock:
    """Playback starts with the first chunk and runs at ``rate`` times real time.

    ``rate`` is 1 for real listeners. Experiments on hardware too slow for
    real time scale it down (a listener who plays at a quarter of real time
    needs a quarter of the tokens per second), and the server's deadlines
    scale with it.
    """

    def __init__(self, rate: float = 1.0) -> None:
        if not rate > 0:
            raise ValueError(f"playback rate must be > 0, got {rate}")
        self.rate = rate
        self.started_at: float | None = None  # time.monotonic() of the first chunk
        self.sent_s = 0.0  # audio seconds sent

    @property
    def started(self) -> bool:
        return self.started_at is not None

    def start(self, at: float | None = None) -> float:
        self.started_at = time.monotonic() if at is None else at
        return self.started_at

    def send(self, samples: int) -> None:
        self.sent_s += samples / orpheus.SAMPLE_RATE

    def runs_dry_at(self) -> float | None:
        """When the listener will have played everything sent (None before playback starts)."""
        return None if self.started_at is None else self.started_at + self.sent_s / self.rate

    def ahead(self, now: float | None = None) -> float:
        """Wall seconds of sent audio not played yet (0 before playback starts; negative: run dry)."""
        dry = self.runs_dry_at()
        return 0.0 if dry is None else dry - (time.monotonic() if now is None else now)

    def seconds_per_token(self) -> float:
        """Wall seconds of playback one audio token buys at this rate: the engine's pace."""
        return 1.0 / (orpheus.TOKENS_PER_SECOND * self.rate)
