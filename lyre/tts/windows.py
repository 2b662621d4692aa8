"""Which frames to decode when: streaming windows that emit every frame once.

SNAC's decoder is convolutional, so a frame decoded in a short window only
sounds like the same frame in the whole utterance when the window gives it
context: one frame on the left and two on the right, as in the reference
decoder. Unlike the reference (which decodes the last four frames after every
new one, keeps only the second, and so never emits frame 0 or the last two
frames), the planner

- emits frame 0 as soon as frames 0-2 exist: 3 frames, 21 tokens. Frame 0
  needs no left context (the utterance starts there, exactly as in a whole
  decode) but does need its two right frames;
- emits every frame exactly once, and flushes the last two frames, whose
  right edge is the true end of the utterance, when generation stops;
- once the stream is ahead of playback, waits for several new frames and
  decodes them in one wider window, so a frame costs (k + 3) / k frame
  decodes instead of four.
"""

from __future__ import annotations

from dataclasses import dataclass

from lyre.codec import CodecWindow

__all__ = ["WindowPlanner", "WindowPolicy"]


@dataclass(frozen=True)
class WindowPolicy:
    """How the planner trades first-audio latency against codec work."""

    left: int = 1  # frames of context before the emitted ones
    right: int = 2  # frames of context after them
    # Frames in the first chunk. One gives the earliest audio; where a decode
    # takes longer than a frame plays (a CPU), a longer first chunk buys the
    # time the second decode needs, so playback never runs dry.
    first_new: int = 1
    max_new: int = 8  # emitted frames per window, at most
    ahead_s: float = 0.5  # audio buffered ahead of playback before windows widen

    def __post_init__(self) -> None:
        if self.left < 0 or self.right < 0:
            raise ValueError(f"left and right context must be >= 0, got {self.left}, {self.right}")
        if self.max_new < 1:
            raise ValueError(f"max_new must be >= 1, got {self.max_new}")
        if not 1 <= self.first_new <= self.max_new:
            raise ValueError(f"first_new must be in [1, max_new], got {self.first_new}")
        if self.ahead_s < 0:
            raise ValueError(f"ahead_s must be >= 0, got {self.ahead_s}")


class WindowPlanner:
    """Turns one utterance's frames, as they arrive, into decode windows."""

    def __init__(self, policy: WindowPolicy = WindowPolicy(), seed: int | None = 0) -> None:
        self.policy = policy
        self.seed = seed
        self._frames: list[tuple[int, ...]] = []
        self._emitted = 0  # frames [0, _emitted) are covered by windows already handed out

    def push(self, frame: tuple[int, ...]) -> None:
        """Add the next frame's 7 codes."""
        self._frames.append(frame)

    @property
    def frames(self) -> int:
        return len(self._frames)

    @property
    def emitted(self) -> int:
        return self._emitted

    def next_window(self, ahead_s: float) -> CodecWindow | None:
        """A window to decode now, or None to wait for more frames.

        ``ahead_s`` is how much already-emitted audio has not played yet. While
        it is short, any frame with its right context ready goes out at once;
        once it is long, frames gather until a full ``max_new`` window.
        """
        ready = len(self._frames) - self.policy.right - self._emitted
        if ready < (self.policy.first_new if self._emitted == 0 else 1):
            return None
        if ready < self.policy.max_new and ahead_s >= self.policy.ahead_s:
            return None
        return self._window(min(ready, self.policy.max_new), end=len(self._frames))

    def frames_wanted(self, ahead_s: float) -> int:
        """How many more frames `next_window` needs before it has a window to give (at least 1)."""
        ready = len(self._frames) - self.policy.right - self._emitted
        need = self.policy.first_new if self._emitted == 0 else 1
        if ahead_s >= self.policy.ahead_s:
            need = max(need, self.policy.max_new)
        return max(1, need - ready)

    def patience(self, ahead_s: float) -> float | None:
        """Seconds until the listener's buffer falls to ``policy.ahead_s``, when `next_window` stops
        waiting for a wide window and decodes what it has; None: it is not waiting for one."""
        return ahead_s - self.policy.ahead_s if ahead_s >= self.policy.ahead_s else None

    def finish(self) -> list[CodecWindow]:
        """Generation has stopped: windows for every frame not yet emitted."""
        windows = []
        while self._emitted < len(self._frames):
            new = min(self.policy.max_new, len(self._frames) - self._emitted)
            windows.append(self._window(new, end=len(self._frames)))
        return windows

    def _window(self, new: int, end: int) -> CodecWindow:
        first = self._emitted
        start = max(0, first - self.policy.left)
        stop = min(end, first + new + self.policy.right)
        self._emitted = first + new
        return CodecWindow(
            frames=tuple(self._frames[start:stop]),
            start_frame=start,
            keep=(first - start, first - start + new),
            seed=self.seed,
        )
