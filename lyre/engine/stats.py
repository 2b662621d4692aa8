"""Engine counters: queue depth and wait, batch sizes, step times, playback deadlines."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from lyre.engine.block_manager import CacheStats

if TYPE_CHECKING:
    from lyre.engine.batch import ScheduledBatch
    from lyre.engine.scheduler import Scheduler

__all__ = ["STEP_EWMA_WEIGHT", "EngineStats", "StatsRecorder", "slack_percentiles"]

STEP_EWMA_WEIGHT = 0.05  # the newest decode step's weight in recent_step_seconds: about the last 20 count


def slack_percentiles(slacks: list[float]) -> tuple[float, float, float] | None:
    """p10, p50, p90 of the streams' slack (nearest rank), or None without streams."""
    if not slacks:
        return None
    ordered = sorted(slacks)

    def at(q: float) -> float:
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))]

    return at(0.1), at(0.5), at(0.9)


@dataclass(frozen=True)
class EngineStats:
    """A snapshot of the engine's counters since it started, and of its state now."""

    waiting: int  # requests queued for a KV-cache slot now
    running: int  # requests holding a slot now (resident)
    parked: int  # of which streams far enough ahead of their listener to sit out of the compute batch
    steps: int
    tokens: int  # tokens produced, all requests
    admitted: int
    step_seconds: float  # wall time inside steps, cumulative
    forward_seconds: float  # of which the device's work (forward, projection, sampling)
    queue_wait_total: float  # seconds requests waited for a slot, summed over admitted ones
    queue_wait_max: float
    last_batch_size: int  # rows in the last step (prefill and decode): the compute batch
    deadline_misses: int  # times a stream fell behind its listener
    behind: int  # streams behind their listener at the last step
    slack_p10_p50_p90: tuple[float, float, float] | None  # seconds, over the streams at the last step
    kv_cache_bytes: int
    failure: str | None = None  # why the engine stopped serving, once it has failed (a server is then not ready)
    kv_cache: CacheStats | None = None  # the pool's blocks and the prefix cache's hits (None: no block cache)
    block_size: int = 0  # positions per KV-cache block
    preemptions: int = 0  # times a request's blocks were taken back (it then runs its tokens again)
    # Seconds a step with no prompt in it took lately (an EWMA, STEP_EWMA_WEIGHT; 0 before the first): what
    # one more token of each running stream costs now, the cold first steps forgotten.
    recent_step_seconds: float = 0.0

    @property
    def mean_batch_size(self) -> float:
        return self.tokens / self.steps if self.steps else 0.0


class StatsRecorder:
    """Mutated by the engine thread under the engine's lock."""

    def __init__(self, kv_cache_bytes: int) -> None:
        self.steps = 0
        self.tokens = 0
        self.admitted = 0
        self.step_seconds = 0.0
        self.queue_wait_total = 0.0
        self.queue_wait_max = 0.0
        self.last_batch_size = 0
        self.recent_step_seconds = 0.0
        self.kv_cache_bytes = kv_cache_bytes

    def record_step(self, batch: ScheduledBatch, seconds: float) -> None:
        size = len(batch.prefill) + len(batch.decode)
        self.steps += 1
        self.tokens += len(batch.sampled)
        self.step_seconds += seconds
        self.last_batch_size = size
        if not batch.prefill:
            self.recent_step_seconds = seconds if not self.recent_step_seconds else (
                self.recent_step_seconds + STEP_EWMA_WEIGHT * (seconds - self.recent_step_seconds))
        for chunk in batch.prefill:
            if not chunk.first or chunk.req.preemptions:  # admitted once, whatever the chunks and resumptions
                continue
            wait = chunk.req.queue_wait or 0.0
            self.admitted += 1
            self.queue_wait_total += wait
            self.queue_wait_max = max(self.queue_wait_max, wait)

    def snapshot(self, scheduler: Scheduler, forward_seconds: float, failure: str | None = None) -> EngineStats:
        return EngineStats(
            waiting=len(scheduler.waiting),
            running=len(scheduler.running),
            parked=scheduler.parked,
            steps=self.steps,
            tokens=self.tokens,
            admitted=self.admitted,
            step_seconds=self.step_seconds,
            forward_seconds=forward_seconds,
            queue_wait_total=self.queue_wait_total,
            queue_wait_max=self.queue_wait_max,
            last_batch_size=self.last_batch_size,
            deadline_misses=scheduler.deadline_misses,
            behind=scheduler.behind,
            slack_p10_p50_p90=slack_percentiles(scheduler.slacks),
            kv_cache_bytes=self.kv_cache_bytes,
            kv_cache=scheduler.blocks.stats(),
            block_size=scheduler.blocks.block_size,
            preemptions=scheduler.preemptions,
            recent_step_seconds=self.recent_step_seconds,
            failure=failure,
        )
