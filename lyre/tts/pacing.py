"""How a segment's frames meet the codec: each frame decoded once, as it comes; the first chunk held until it
covers what comes after it.

The codec keeps each stream's state (lyre.codec.streaming), so a frame costs one frame's decode whenever it is
decoded, and the audio is the same however the frames are handed in. Two choices are left, and one rule makes
each, from the measured rates (`Rates`: a frame's playback at the listener's rate, this stream's generation per
frame, the codec's cost per frame and queue wait, all kept up to date while serving):

- **The first chunk** is held back until its audio covers making and decoding the next frame at the slow end:
  ``g + (1 + spread) decode(1) + margin`` seconds of playback (g: generation per frame; decode(n): the queue wait
  plus n frames' cost, times the streams sharing the codec's calls where a call's time grows with them, as on a
  CPU). Frames go on being decoded while it is held, so holding costs only the frames it waits for. The codec's
  lookahead (4,757 samples, 2.3 frames) lets the first audio out with the third frame: 58 ms of it, then 85 ms a
  frame; so where the next frame needs more than 58 ms less the margin, the first chunk waits for the fourth
  frame (143 ms of audio), as one stream on the 2-core CPU of docs/benchmarks.md does (about 30 ms a frame to
  make, 20 to decode).
- **Frames a call**: one at a time while the listener's buffer is short; once it holds more than ``gather_s``,
  up to ``gather_frames`` gather into one call (fewer, fuller calls) for as long as the buffer stays above it.
  A stream nobody plays as it comes (a whole file) always gathers and sends audio as it is decoded.

A segment's last frames come out at its end, when the codec's lookahead is flushed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from lyre.orpheus import SAMPLES_PER_FRAME

__all__ = ["Pacer", "PacingPolicy", "Rates"]


@dataclass(frozen=True)
class PacingPolicy:
    """How a stream trades first-audio latency against codec calls."""

    gather_frames: int = 4  # frames handed to the codec in one call, at most, once the listener is ahead
    gather_s: float = 0.5  # the listener's buffer above which frames gather
    margin_s: float = 0.03  # buffer kept beyond what comes next, for the clocks' jitter
    # The next frame is planned as if its decode took (1 + spread) times its measured cost, so that one slower
    # than usual still comes before the listener runs dry.
    spread: float = 0.5
    # The first chunk's frames of audio at most: where the rule asks for more (a device far too slow for the
    # listener's rate), no first chunk would spare the listener its gaps, and a longer one only delays them.
    first_most: int = 8

    def __post_init__(self) -> None:
        if self.gather_frames < 1:
            raise ValueError(f"gather_frames must be >= 1, got {self.gather_frames}")
        for name in ("gather_s", "margin_s", "spread"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)}")
        if self.first_most < 1:
            raise ValueError(f"first_most must be >= 1 frame, got {self.first_most}")


@dataclass(frozen=True)
class Rates:
    """What a stream paces itself by, measured while serving (all wall seconds)."""

    play_s: float  # one frame's playback at the listener's rate
    generate_s: float  # the engine's time to make one frame of this stream
    decode_s: float  # the codec's cost per frame on this device, times the streams sharing its calls
    wait_s: float = 0.0  # a decode's wait in the codec's queue before its call starts

    def decode(self, frames: int) -> float:
        """Seconds from handing ``frames`` frames to the codec to their audio."""
        return self.wait_s + frames * self.decode_s


class Pacer:
    """One stream's pacing (`PacingPolicy`); `Rates` None: nobody plays it as it comes."""

    def __init__(self, policy: PacingPolicy = PacingPolicy()) -> None:
        self.policy = policy

    def first_samples(self, rates: Rates | None) -> int:
        """Samples the first chunk holds at least (0: send audio as it is decoded)."""
        if rates is None or rates.play_s <= 0:
            return 0
        p = self.policy
        need_s = rates.generate_s + (1.0 + p.spread) * rates.decode(1) + p.margin_s
        samples = math.ceil(need_s / rates.play_s * SAMPLES_PER_FRAME)
        return min(samples, p.first_most * SAMPLES_PER_FRAME)

    def frames_wanted(self, ahead_s: float, rates: Rates | None) -> int:
        """Frames to wait for before the next decode."""
        return self.policy.gather_frames if self.patience(ahead_s, rates) is not None or rates is None else 1

    def patience(self, ahead_s: float, rates: Rates | None) -> float | None:
        """Seconds the stream may wait for `frames_wanted` frames before it decodes what it has (the listener's
        buffer falls to ``gather_s``); None: it waits for them however long (nobody plays it as it comes), or
        does not gather."""
        if rates is None or ahead_s <= self.policy.gather_s:
            return None
        return ahead_s - self.policy.gather_s

    def held_frames(self, lookahead: int) -> int:
        """Frames a stream may hold undecoded or unheard before any of them can play: a gathered call's and
        the codec's lookahead, and the one being made."""
        return self.policy.gather_frames + math.ceil(lookahead / SAMPLES_PER_FRAME) + 1
