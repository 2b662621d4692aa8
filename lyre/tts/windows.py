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

Given the measured rates (`Rates`: what a frame plays for, what it takes the
engine to make one for this stream, what the codec costs per decoded frame on
this device, kept up to date while serving), the sizes follow one rule: *each
next chunk is ready before the audio already sent has played*, with a margin:

- steady width k*: the narrowest window that keeps pace, the smallest n with
  max(n g, decode(n)) <= n p (frames are made while the codec decodes the
  window before; g: generation s per frame, p: playback s per frame at the
  listener's rate, decode(n): the queue wait plus (n + context) frames'
  cost; where the codec decodes one window at a time, as on a CPU, a frame
  costs as many frames' decode as there are live streams, since it decodes
  their windows in turn: lyre.tts.deadlines);
- the first chunk (nothing playing yet): the smallest n whose audio covers
  making the next window of k* frames after it leaves, max(0, k* g -
  decode(n)) + slow(k*) + margin <= n p. Each frame more in the first
  chunk delays first audio by g + one frame's decode; on the 2-core CPU of
  docs/benchmarks.md (g ~30 ms, ~25 ms a decoded frame, engine and codec on a
  core each) the rule asks for 3 frames instead of 1 for one stream (time to
  first audio p50 250-270 ms in process) and 8 for each of two; on a GPU for 1;
- after that a window waits for one more frame only while the listener's
  buffer still covers it and the wider decode: ahead - g - slow(r + 1) >=
  margin; so a stream ahead of its listener widens its windows (up to
  max_new), and one near running dry decodes what it has at once;
- a window decoded takes the most ready frames whose slow decode still fits
  in the listener's buffer (at most max_new), but never fewer than k* of
  them while k* are ready: narrower, a window costs more than it plays (on
  the CPU a one-frame window costs four frames' decode, more than a frame
  plays), and a stream that took them one by one drained its buffer while
  frames piled up, until its listener ran dry and one wide window ended
  the run with a gap of 60-120 ms.

slow(n) = (1 + spread) decode(n): a window is planned as if its decode took
half again its measured cost (`WindowPolicy.spread`). On the 2-core CPU a
window's cost per frame spreads from 0.87 to 1.18 times its median (5th to
95th percentile of 95 decodes, up to 1.6), and windows sized by the median
left 3 requests of 84 with a gap of 38-120 ms at one stream, in process;
at the slow end none of 84, for about 55 ms more time to first audio (a
third frame in the first chunk: docs/benchmarks.md, "Planning at the slow
end"; benchmarks/window_replay.py replays the planner on such costs).

(Tried on the 2-core CPU: holding later windows to at least k* frames by
waiting for frames not yet made made the second chunk wait for k* frames'
generation and gave longer gaps, not fewer: the floor takes only frames
that are ready.)
"""

from __future__ import annotations

from dataclasses import dataclass

from lyre.codec import CodecWindow

__all__ = ["Rates", "WindowPlanner", "WindowPolicy"]


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
    ahead_s: float = 0.5  # audio buffered ahead of playback before windows widen (without measured rates)
    margin_s: float = 0.03  # with measured rates: buffer kept beyond a window's cost, for the clocks' jitter
    # With measured rates: a window is planned as if its decode took (1 + spread) times its measured cost, so
    # that one slower than usual still comes before the listener runs dry.
    spread: float = 0.5
    # With measured rates: the first chunk's frames at most (None: as many as the rule asks). A cap trades
    # gaps for time to first audio, where the device is too slow to have both.
    first_most: int | None = None

    def __post_init__(self) -> None:
        if self.left < 0 or self.right < 0:
            raise ValueError(f"left and right context must be >= 0, got {self.left}, {self.right}")
        if self.max_new < 1:
            raise ValueError(f"max_new must be >= 1, got {self.max_new}")
        if not 1 <= self.first_new <= self.max_new:
            raise ValueError(f"first_new must be in [1, max_new], got {self.first_new}")
        if self.ahead_s < 0:
            raise ValueError(f"ahead_s must be >= 0, got {self.ahead_s}")
        if self.margin_s < 0:
            raise ValueError(f"margin_s must be >= 0, got {self.margin_s}")
        if self.spread < 0:
            raise ValueError(f"spread must be >= 0, got {self.spread}")
        if self.first_most is not None and not self.first_new <= self.first_most <= self.max_new:
            raise ValueError(f"first_most must be in [first_new, max_new], got {self.first_most}")


@dataclass(frozen=True)
class Rates:
    """What the planner sizes windows by, measured while serving (all wall seconds)."""

    play_s: float  # one frame's playback at the listener's rate
    generate_s: float  # the engine's time to make one frame of this stream
    decode_s: float  # the codec's cost per decoded frame (context frames included) on this device
    wait_s: float = 0.0  # a window's wait in the codec's queue before its decode starts

    def decode(self, frames: int) -> float:
        """Seconds from handing a window of ``frames`` (context included) to the codec to its audio."""
        return self.wait_s + frames * self.decode_s


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

    def next_window(self, ahead_s: float, rates: Rates | None = None) -> CodecWindow | None:
        """A window to decode now, or None to wait for more frames.

        ``ahead_s`` is how much already-emitted audio has not played yet. Without
        ``rates``: while it is short (under ``policy.ahead_s``), any frame with its right
        context ready goes out at once; once it is long, frames gather until a full
        ``max_new`` window. With ``rates``: the module's rule.
        """
        ready, least = self._ready(), self._least(ahead_s, rates)
        if ready < least or self._slack(ahead_s, rates, ready) is not None:
            return None
        new = min(ready, self.policy.max_new)
        if rates is not None:
            new = self._fit(new, least, ahead_s, rates, min(self.policy.left, self._emitted) + self.policy.right)
        return self._window(new, end=len(self._frames))

    def frames_wanted(self, ahead_s: float, rates: Rates | None = None) -> int:
        """How many more frames `next_window` needs before it has a window to give (at least 1)."""
        ready = self._ready()
        need = self._least(ahead_s, rates)
        if self._slack(ahead_s, rates, max(ready, need)) is not None:
            need = self.policy.max_new
        return max(1, need - ready)

    def patience(self, ahead_s: float, rates: Rates | None = None) -> float | None:
        """Seconds `next_window` may go on waiting for a wider window before it must decode what it has
        (the listener's buffer falls to what that window costs); None: it is not waiting for one."""
        return self._slack(ahead_s, rates, max(self._ready(), self._least(ahead_s, rates)))

    def steady_frames(self, rates: Rates) -> int:
        """k*: the narrowest window that keeps pace with the listener at ``rates`` (max_new if none does)."""
        context = self.policy.left + self.policy.right
        for n in range(1, self.policy.max_new + 1):
            if max(n * rates.generate_s, rates.decode(n + context)) <= n * rates.play_s:
                return n
        return self.policy.max_new

    def first_frames(self, rates: Rates) -> int:
        """The first chunk's frames: the fewest (at least ``first_new``, at most ``first_most``) whose audio
        covers making the next window of `steady_frames` frames after it leaves."""
        steady, most = self.steady_frames(rates), self.policy.first_most or self.policy.max_new
        after = self._slow(rates, steady + self.policy.left + self.policy.right)
        for n in range(self.policy.first_new, most):
            meanwhile = rates.decode(n + self.policy.right)  # frames keep coming while the first one decodes
            if max(0.0, steady * rates.generate_s - meanwhile) + after + self.policy.margin_s <= n * rates.play_s:
                return n
        return most

    def _fit(self, new: int, least: int, ahead_s: float, rates: Rates, context: int) -> int:
        """Of ``new`` ready frames, how many to decode now: the widest window that is decoded before the
        listener runs dry, at its slow end, margin aside; never narrower than k* (narrower, a window costs more
        than it plays and the buffer only shrinks) or than ``least``."""
        floor = max(least, min(new, self.steady_frames(rates)))
        while new > floor and self._slow(rates, new + context) + self.policy.margin_s > ahead_s:
            new -= 1
        return new

    def _slow(self, rates: Rates, frames: int) -> float:
        """A window's decode at the slow end of its spread (`WindowPolicy.spread`)."""
        return (1.0 + self.policy.spread) * rates.decode(frames)

    def _ready(self) -> int:
        """Frames not emitted whose right context has come."""
        return len(self._frames) - self.policy.right - self._emitted

    def _least(self, ahead_s: float, rates: Rates | None) -> int:
        """The fewest ready frames a window may have now: the first chunk's while the listener has nothing
        (without rates: ``first_new``), else 1."""
        if self._emitted > 0 or (rates is not None and ahead_s > 0):
            return 1
        return self.policy.first_new if rates is None else self.first_frames(rates)

    def _slack(self, ahead_s: float, rates: Rates | None, ready: int) -> float | None:
        """Seconds the planner may still wait for a window wider than ``ready`` frames; None: decode now."""
        if ready >= self.policy.max_new:
            return None
        if rates is None:
            return ahead_s - self.policy.ahead_s if ahead_s >= self.policy.ahead_s else None
        context = min(self.policy.left, self._emitted) + self.policy.right
        slack = ahead_s - rates.generate_s - self._slow(rates, ready + 1 + context) - self.policy.margin_s
        return slack if slack >= 0 and ahead_s > 0 else None

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
