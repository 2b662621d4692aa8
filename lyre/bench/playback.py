"""What a listener hears of one streamed request: when sound starts, and every time the audio runs dry.

Pure functions over a chunk timeline (`lyre.bench.metrics.Chunk`: arrival in s since the request was sent,
audio s it carried) and the stream's leading silence, so each figure can be checked by hand.

- The *audible* time to first audio is the arrival of the chunk that holds the first audible sample: a
  stream that opens with silence is heard later than its first byte. A sample is audible at or above
  `AUDIBLE_DBFS` (-40 dBFS: 1% of full scale, 328 of 32767 in s16), the level below which the leading
  silence of a speech model's output sits (its noise floor is near -60 dBFS).
- The listener starts playing at that sample, the moment it arrives, at real time (or ``playback_rate``
  times it), and stalls whenever the next audio has not come when the audio before it has played: an
  *underrun*, as long as the stall. A stall under `UNDERRUN_MIN_S` is the clock's jitter, not a gap.
- C50, C100 and C200: the share of requests whose worst underrun is at most 50, 100 and 200 ms (a
  request that failed counts as neither); zero-underrun: the share with none at all.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

__all__ = ["AUDIBLE_DBFS", "AUDIBLE_S16", "C_BOUNDS_S", "UNDERRUN_MIN_S", "Playback", "first_audible", "play"]

AUDIBLE_DBFS = -40.0
AUDIBLE_S16 = round(32767 * 10 ** (AUDIBLE_DBFS / 20))  # 328
UNDERRUN_MIN_S = 0.001
C_BOUNDS_S = (0.05, 0.1, 0.2)

Chunk = tuple[float, float]


def first_audible(pcm: bytes | np.ndarray) -> int | None:
    """The index of the first audible sample of s16le mono PCM, or None when it holds none."""
    samples = np.frombuffer(pcm, dtype="<i2") if isinstance(pcm, bytes) else pcm
    loud = np.flatnonzero(np.abs(samples.astype(np.int32)) >= AUDIBLE_S16)
    return int(loud[0]) if loud.size else None


@dataclass(frozen=True)
class Playback:
    """One request as a listener heard it; times in seconds since the request was sent."""

    audible_at_s: float | None  # the audible time to first audio (None: nothing audible ever came)
    underruns: int  # stalls of at least UNDERRUN_MIN_S
    worst_underrun_s: float  # the longest stall (0: none)
    stalled_s: float  # all stalls together


def play(chunks: Sequence[Chunk], leading_silence_s: float | None, playback_rate: float = 1.0) -> Playback:
    """How a listener starting at the first audible sample (``leading_silence_s`` of audio in; None: the
    stream held no audible sample) hears the stream, at ``playback_rate`` times real time."""
    if leading_silence_s is None or not chunks:
        return Playback(None, 0, 0.0, 0.0)
    start = 0.0  # the audio offset at which each chunk begins
    first = None
    for i, (_, seconds) in enumerate(chunks):
        if start + seconds > leading_silence_s or i == len(chunks) - 1:
            first = i
            break
        start += seconds
    assert first is not None
    clock, position = chunks[first][0], leading_silence_s  # playing starts as that chunk arrives
    offset = start + chunks[first][1]
    underruns, worst, stalled = 0, 0.0, 0.0
    for arrival, seconds in chunks[first + 1:]:
        reach = clock + (offset - position) / playback_rate  # when the listener runs out of what came before
        gap = arrival - reach
        if gap >= UNDERRUN_MIN_S:
            underruns += 1
            worst = max(worst, gap)
            stalled += gap
        clock, position = max(reach, arrival), offset
        offset += seconds
    return Playback(chunks[first][0], underruns, worst, stalled)
