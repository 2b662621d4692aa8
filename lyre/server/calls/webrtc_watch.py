"""Whether a WebRTC caller is still there (lyre.server.calls.webrtc_call), judged from when its audio packets
came: a peer gone without a goodbye, or one whose network drops for a moment, is only silence on UDP.
Plain Python: the call ticks it with the clock, the connection's state and its last packet's time.

    watch = MediaWatch(started=time.monotonic())
    change = watch.tick(now, connected, heard_at)   # every _WATCH_S: None, or a Change
    watch.paused                                    # the caller's audio has stopped, for now

- not connected within CONNECT_TIMEOUT_S of the answer: gone;
- connected, and no packet for MEDIA_TIMEOUT_S: paused. The call stops its reply then, as at a barge-in,
  so the engine slots are free while nobody listens; a packet again (a Wi-Fi roam, a handover over)
  and it resumes;
- no packet for GONE_AFTER_S, or none at all within GONE_AFTER_S of connecting: gone.

A tick that comes late (the event loop was held up, and packets may still wait unread) judges nothing.
"""

from __future__ import annotations

from enum import Enum

__all__ = ["CONNECT_TIMEOUT_S", "GONE_AFTER_S", "MEDIA_TIMEOUT_S", "Change", "MediaWatch"]

CONNECT_TIMEOUT_S = 20.0  # an answered offer whose connection never comes up
MEDIA_TIMEOUT_S = 0.6  # no packet this long: the caller cannot be heard, nor hear, for now
# No packet this long: the caller is gone. Roams and handovers lose a second or two; a browser keeps
# sending through silence (Opus DTX's keep-alive comes every 400 ms), so a longer gap is a peer gone.
GONE_AFTER_S = 5.0
_LATE_S = 0.3  # a tick this long after the one before comes late


class Change(Enum):
    """What a tick found changed."""

    PAUSED = "paused"  # the caller's audio just stopped
    RESUMED = "resumed"  # it came back
    GONE = "gone"  # hang up: MediaWatch.reason says why


class MediaWatch:
    """One call's watch; see the module docstring."""

    def __init__(self, started: float) -> None:
        """``started``: time.monotonic() when the offer was answered."""
        self.started = started
        self.paused = False
        self.reason = ""  # why the caller is gone
        self._connected_at: float | None = None
        self._last_tick = started

    def tick(self, now: float, connected: bool, heard_at: float | None) -> Change | None:
        """``heard_at``: time.monotonic() of the caller's last packet, None before the first."""
        late, self._last_tick = now - self._last_tick > _LATE_S, now
        if not connected and self._connected_at is None:
            if now - self.started > CONNECT_TIMEOUT_S:
                self.reason = f"not connected within {CONNECT_TIMEOUT_S:g} s"
                return Change.GONE
            return None
        if self._connected_at is None:
            self._connected_at = now
        if late:
            return None
        silent = now - (heard_at or self._connected_at)
        if silent > GONE_AFTER_S:
            self.reason = (f"no audio from the caller for {GONE_AFTER_S:g} s" if heard_at is not None
                           else f"no audio from the caller within {GONE_AFTER_S:g} s of connecting")
            return Change.GONE
        paused = heard_at is not None and silent > MEDIA_TIMEOUT_S
        if paused == self.paused:
            return None
        self.paused = paused
        return Change.PAUSED if paused else Change.RESUMED
