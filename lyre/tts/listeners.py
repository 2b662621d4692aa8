"""The listeners of a pipeline's live streams, for admission: has one run dry lately, and would one more stream
fit the measured rates.

A new stream is refused (`Listeners.refuse`) when

- a live listener ran dry within `RECENT_S` (lyre.tts.clock models each one): the streams already running
  cannot keep up, and one more would only make every one of them stutter; or
- the measured rates say the streams, with one more, need more than the device has: each stream needs
  ``rate / FRAME_SECONDS`` frames a second, each decoded once (the codec's recent cost per frame once warm:
  each call shape's first, which builds its kernels, left out; lyre.codec), and the engine must run
  ``TOKENS_PER_SECOND * rate`` steps a second (a step advances every stream by one token) at its measured
  step time; where the engine and the codec share the device (a GPU; a CPU whose cores they share), the two
  shares add, and their sum must stay under one; where each has cores of its own (lyre.common.threads), each
  share must. A server with no other open stream always admits one.

The server admits this way by default (`lyre serve --no-admit-on-rates` admits up to ``--max-streams``
whatever the listeners say); ``Retry-After: 1`` tells a refused client when to try again.
"""

from __future__ import annotations

import time
import weakref

from lyre.orpheus import FRAME_SECONDS, TOKENS_PER_SECOND
from lyre.tts.clock import PlaybackClock

__all__ = ["RECENT_S", "Listeners"]

RECENT_S = 2.0  # an underrun this recent means the streams running now do not keep up


class Listeners:
    """The playback clocks of the streamed (played as they come) streams open now, the one being admitted
    included. Held weakly: a stream refused before it ever ran (and never closed) leaves with its clock."""

    def __init__(self) -> None:
        self._clocks: weakref.WeakSet[PlaybackClock] = weakref.WeakSet()

    def add(self, clock: PlaybackClock) -> None:
        self._clocks.add(clock)

    def discard(self, clock: PlaybackClock) -> None:
        self._clocks.discard(clock)

    def __len__(self) -> int:
        return len(self._clocks)

    def starving(self, now: float | None = None) -> int:
        """Live listeners that ran dry within the last `RECENT_S`."""
        now = time.monotonic() if now is None else now
        return sum(c.last_gap_at is not None and now - c.last_gap_at < RECENT_S for c in self._clocks)

    def load(self, streams: int, rate: float, step_s: float, decode_s: float, apart: bool = False) -> float:
        """The share of the device ``streams`` streams need at ``rate`` times real time, at the measured engine
        step time ``step_s`` and codec cost ``decode_s`` per frame (1: all of it); ``apart``: the engine and the
        codec run on cores of their own, so the larger of their shares."""
        codec = streams * rate / FRAME_SECONDS * decode_s
        engine = TOKENS_PER_SECOND * rate * step_s if streams else 0.0
        return max(codec, engine) if apart else codec + engine

    def refuse(self, rate: float, step_s: float, decode_s: float, apart: bool = False) -> str | None:
        """Why the newest stream (already added) should be refused now, or None to admit it."""
        if len(self) <= 1:
            return None
        if starving := self.starving():
            return f"{starving} of its {len(self) - 1} streams ran dry in the last {RECENT_S:g} s"
        need = self.load(len(self), rate, step_s, decode_s, apart)
        if need > 1.0:
            return (f"one more stream would need {100 * need:.0f}% of the device at the measured rates "
                    f"(engine step {1000 * step_s:.1f} ms, codec {1000 * decode_s:.1f} ms a frame)")
        return None
