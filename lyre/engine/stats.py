"""Engine counters: queue depth and wait, batch sizes, step times."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from lyre.engine.scheduler import ScheduledBatch

__all__ = ["EngineStats", "StatsRecorder"]


@dataclass(frozen=True)
class EngineStats:
    """A snapshot of the engine's counters since it started."""

    waiting: int  # requests queued for a slot now
    running: int  # requests holding a slot now
    steps: int
    tokens: int  # tokens produced, all requests
    admitted: int
    step_seconds: float  # wall time inside steps, cumulative
    forward_seconds: float  # of which model forward + output projection
    queue_wait_total: float  # seconds requests waited for a slot, summed over admitted ones
    queue_wait_max: float
    recent_queue_waits: tuple[float, ...]  # the last admitted requests' waits, oldest first
    last_batch_size: int

    @property
    def mean_batch_size(self) -> float:
        return self.tokens / self.steps if self.steps else 0.0

    @property
    def outside_forward_share(self) -> float:
        """Share of step time spent outside the model forward (scheduling, sampling, bookkeeping)."""
        return 1.0 - self.forward_seconds / self.step_seconds if self.step_seconds else 0.0


class StatsRecorder:
    """Mutated by the engine thread under the engine's lock."""

    def __init__(self, keep: int = 1024) -> None:
        self.steps = 0
        self.tokens = 0
        self.admitted = 0
        self.step_seconds = 0.0
        self.queue_wait_total = 0.0
        self.queue_wait_max = 0.0
        self.recent_waits: deque[float] = deque(maxlen=keep)
        self.last_batch_size = 0

    def record_step(self, batch: ScheduledBatch, seconds: float) -> None:
        size = len(batch.prefill) + len(batch.decode)
        self.steps += 1
        self.tokens += size
        self.step_seconds += seconds
        self.last_batch_size = size
        for req in batch.prefill:
            wait = req.queue_wait or 0.0
            self.admitted += 1
            self.queue_wait_total += wait
            self.queue_wait_max = max(self.queue_wait_max, wait)
            self.recent_waits.append(wait)

    def snapshot(self, waiting: int, running: int, forward_seconds: float) -> EngineStats:
        return EngineStats(
            waiting=waiting,
            running=running,
            steps=self.steps,
            tokens=self.tokens,
            admitted=self.admitted,
            step_seconds=self.step_seconds,
            forward_seconds=forward_seconds,
            queue_wait_total=self.queue_wait_total,
            queue_wait_max=self.queue_wait_max,
            recent_queue_waits=tuple(self.recent_waits),
            last_batch_size=self.last_batch_size,
        )
