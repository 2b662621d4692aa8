"""The codec service's counters: calls, frames, queue waits, and the decode cost per frame it measures while
serving (recent, and warm: each call shape's first left out)."""

from __future__ import annotations

import statistics
from collections import deque
from dataclasses import dataclass, field

__all__ = ["CodecStats", "CodecTally"]

# Queue waits kept for CodecStats.recent_waits_s.
RECENT_WAITS = 256
# Weight of the newest call in the running (exponentially weighted) queue wait: about the last ten calls count.
EWMA_WEIGHT = 0.1
# The decode cost per frame is the median of the last this many calls': it follows the load, and one cold call
# (a shape's first builds its kernels) does not inflate it. The median of warm calls only is what the device
# sustains, for admission.
RECENT_COSTS = 15


@dataclass(frozen=True)
class CodecStats:
    """Counters since the service started. Waits are from submit to the start of the call that takes it."""

    decodes: int  # frames handed in by `decode` and finishes, each counted once, including dropped ones
    batches: int  # calls
    rows: int  # streams in them, summed
    frames: int  # decoded (a finish counts the silence that brings out its lookahead)
    mean_batch: float  # streams a call
    last_batch: int
    max_batch: int
    queue_wait_total_s: float
    queue_wait_max_s: float
    recent_waits_s: tuple[float, ...]  # the last RECENT_WAITS waits, oldest first
    decode_seconds: float
    dropped: int  # decodes whose caller was cancelled or whose stream was closed: skipped, or result discarded
    queued: int  # waiting now
    streams: int  # open now (holding a slot or about to)


@dataclass
class CodecTally:
    """The counters as they run (the service holds its lock around each change)."""

    decodes: int = 0
    dropped: int = 0
    batches: int = 0
    frames: int = 0
    rows: int = 0
    last_batch: int = 0
    max_batch: int = 0
    wait_total: float = 0.0
    wait_max: float = 0.0
    recent: deque[float] = field(default_factory=lambda: deque(maxlen=RECENT_WAITS))
    decode_seconds: float = 0.0
    costs: deque[float] = field(default_factory=lambda: deque(maxlen=RECENT_COSTS))  # per frame, call by call
    recent_per_frame: float | None = None  # their median
    shapes: set[tuple[bool, int, int]] = field(default_factory=set)  # (finish, frames, rows) of the calls so far
    warm_costs: deque[float] = field(default_factory=lambda: deque(maxlen=RECENT_COSTS))  # the same, warm ones
    warm_per_frame: float | None = None  # their median
    recent_wait: float = 0.0  # EWMA of seconds a decode waits in the queue

    def waited(self, wait: float) -> None:
        """A decode's first call started ``wait`` seconds after it was queued."""
        self.wait_total += wait
        self.wait_max = max(self.wait_max, wait)
        self.recent.append(wait)
        self.recent_wait += EWMA_WEIGHT * (wait - self.recent_wait)

    def called(self, shape: tuple[bool, int, int], frames: int, seconds: float) -> None:
        """A call of ``shape`` (finish, frames a row, rows) decoded ``frames`` frames in ``seconds``."""
        rows = shape[2]
        self.batches += 1
        self.rows += rows
        self.frames += frames
        self.last_batch = rows
        self.max_batch = max(self.max_batch, rows)
        self.decode_seconds += seconds
        per_frame = seconds / max(1, frames)
        self.costs.append(per_frame)
        self.recent_per_frame = statistics.median(self.costs)
        if shape in self.shapes:
            self.warm_costs.append(per_frame)
            self.warm_per_frame = statistics.median(self.warm_costs)
        self.shapes.add(shape)

    def snapshot(self, queued: int, streams: int) -> CodecStats:
        return CodecStats(
            decodes=self.decodes, batches=self.batches, rows=self.rows, frames=self.frames,
            mean_batch=self.rows / self.batches if self.batches else 0.0, last_batch=self.last_batch,
            max_batch=self.max_batch, queue_wait_total_s=self.wait_total, queue_wait_max_s=self.wait_max,
            recent_waits_s=tuple(self.recent), decode_seconds=self.decode_seconds, dropped=self.dropped,
            queued=queued, streams=streams,
        )
