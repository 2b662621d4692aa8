"""A listener's playback clock: how far the audio sent is ahead of what has been played, and every time the
listener ran dry.

The server models the listener of every stream as the client's bench does (lyre.bench.playback): it starts
playing when the first chunk leaves, at ``rate`` times real time, and plays each chunk after the one before;
when a chunk leaves after everything sent before it has played, the listener has stalled (an *underrun*) for
the time between, and plays on from that chunk. A stall shorter than `UNDERRUN_MIN_S` is clock jitter.
"""

from __future__ import annotations

import time

from lyre import orpheus

__all__ = ["UNDERRUN_MIN_S", "PlaybackClock"]

UNDERRUN_MIN_S = 0.001  # the bench's threshold too, so the two counts compare


class PlaybackClock:
    """Playback starts with the first chunk and runs at ``rate`` times real time.

    ``rate`` is 1 for real listeners. Experiments on hardware too slow for
    real time scale it up or down (a listener who plays at a quarter of real
    time needs a quarter of the tokens per second), and the server's
    deadlines scale with it. ``gaps`` holds each underrun's length (s), in order.
    """

    def __init__(self, rate: float = 1.0) -> None:
        if not rate > 0:
            raise ValueError(f"playback rate must be > 0, got {rate}")
        self.rate = rate
        self.started_at: float | None = None  # time.monotonic() of the first chunk
        self.gaps: list[float] = []  # each underrun's stall, seconds
        self.last_gap_at: float | None = None  # when the latest underrun ended (its chunk left)
        self._dry_at: float | None = None  # when everything sent so far will have played

    @property
    def started(self) -> bool:
        return self.started_at is not None

    @property
    def underruns(self) -> int:
        return len(self.gaps)

    def start(self, at: float | None = None) -> float:
        self.started_at = time.monotonic() if at is None else at
        self._dry_at = self.started_at
        return self.started_at

    def send(self, samples: int, at: float | None = None) -> float | None:
        """A chunk of ``samples`` leaves at ``at`` (default now): the stall it ends, if the listener had run dry
        (None: it had not, or playback has not started)."""
        gap = None
        if self._dry_at is not None:
            at = time.monotonic() if at is None else at
            if at - self._dry_at >= UNDERRUN_MIN_S:
                gap = at - self._dry_at
                self.gaps.append(gap)
                self.last_gap_at = at
            self._dry_at = max(self._dry_at, at) + samples / orpheus.SAMPLE_RATE / self.rate
        return gap

    def runs_dry_at(self) -> float | None:
        """When the listener will have played everything sent (None before playback starts)."""
        return self._dry_at

    def ahead(self, now: float | None = None) -> float:
        """Wall seconds of sent audio not played yet (0 before playback starts; negative: run dry)."""
        dry = self.runs_dry_at()
        return 0.0 if dry is None else dry - (time.monotonic() if now is None else now)

    def seconds_per_token(self) -> float:
        """Wall seconds of playback one audio token buys at this rate: the engine's pace."""
        return 1.0 / (orpheus.TOKENS_PER_SECOND * self.rate)
