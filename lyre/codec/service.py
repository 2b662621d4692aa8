"""The codec service: one per process, decoding every stream's windows in batches.

Streams await `CodecService.decode`, each window with the time its audio is
due (when its listener would otherwise run dry). A worker thread, off the
event loop, groups queued windows by frame count (SNAC batches only equal
shapes), serves the shape holding the most urgent window, gathers up to
``max_batch`` of that shape, most urgent first, for at most ``max_wait_ms``
from the arrival of the most urgent one (``FAR_WAIT_FACTOR`` times longer when
even that one is due more than ``FAR_S`` from now: a stream far ahead can wait
to share a bigger batch), decodes them in one call and hands each result back
to its own event loop.
"""

from __future__ import annotations

import asyncio
import bisect
import enum
import itertools
import statistics
import threading
import time
from collections import deque
from dataclasses import dataclass, field

import numpy as np
import torch

from lyre.common.batching import BatchLimits
from lyre.codec.snac import CodecWindow, SnacDecoder
from lyre.common.loops import settle_futures
from lyre.common.threads import use_threads

__all__ = ["BatchPolicy", "CodecService", "CodecServiceClosed", "CodecStats"]

# On a GPU one SNAC call costs about the same for 1 or 64 windows, so it pays
# to gather for a few ms (a small share of a frame's 85 ms) and batch wide.
CUDA_MAX_BATCH = 64
CUDA_MAX_WAIT_MS = 15.0
# On a CPU a batch of b windows costs b single decodes or more (2 cores, torch
# 2.13, benchmarks/codec.py: 4-frame windows 102 ms alone, 108 ms each in 4s;
# 8-frame windows 208 ms alone, 440 ms each in 8s), so windows go one by one,
# and waiting for company would only add latency.
CPU_MAX_BATCH = 1
CPU_MAX_WAIT_MS = 0.0
# Queue waits kept for CodecStats.recent_waits_s.
RECENT_WAITS = 256
# Weight of the newest batch in the running (exponentially weighted) queue wait: about the last ten batches
# count, so the figure follows the device's load while serving.
EWMA_WEIGHT = 0.1
# The decode cost per frame is the median of the last this many batches': it follows the load, and one cold
# decode (a shape's first builds its kernels: 2-3 times the cost on the 2-core CPU) does not inflate it. The
# median of warm decodes only is what the device sustains, for admission: early on most decodes are cold.
RECENT_COSTS = 15
# A window due later than this from now belongs to a stream far ahead of its listener...
FAR_S = 0.5
# ...and may wait this many times max_wait_ms for more windows to batch with.
FAR_WAIT_FACTOR = 4.0


@dataclass(frozen=True)
class BatchPolicy(BatchLimits):
    """How the worker forms batches: at most ``max_batch`` windows of one shape,
    waiting at most ``max_wait_ms`` after the oldest one arrived for more."""

    @classmethod
    def for_device(cls, device: str) -> BatchPolicy:
        """The policy measured best for ``device`` ("cpu", "cuda", "cuda:1", ...)."""
        if torch.device(device).type == "cuda":
            return cls(max_batch=CUDA_MAX_BATCH, max_wait_ms=CUDA_MAX_WAIT_MS)
        return cls(max_batch=CPU_MAX_BATCH, max_wait_ms=CPU_MAX_WAIT_MS)


@dataclass(frozen=True)
class CodecStats:
    """Counters since the service started. Waits are from submit to decode start."""

    windows: int  # decoded, including those whose caller cancelled mid-decode
    batches: int
    frames: int  # decoded, context frames included
    mean_batch: float
    last_batch: int
    max_batch: int
    queue_wait_total_s: float
    queue_wait_max_s: float
    recent_waits_s: tuple[float, ...]  # the last RECENT_WAITS waits, oldest first
    decode_seconds: float
    dropped: int  # windows whose caller was cancelled: skipped, or result discarded
    queued: int  # waiting now


class CodecServiceClosed(RuntimeError):
    """The service was closed before this window was decoded."""


class _State(enum.Enum):
    QUEUED = enum.auto()
    RUNNING = enum.auto()
    DONE = enum.auto()


@dataclass(eq=False)
class _Job:
    window: CodecWindow
    loop: asyncio.AbstractEventLoop
    future: asyncio.Future[np.ndarray]
    arrival: float  # time.monotonic()
    due: float  # time.monotonic() by which its audio is needed
    seq: int  # arrival order, to break ties
    state: _State = _State.QUEUED

    @property
    def key(self) -> tuple[float, int]:
        return self.due, self.seq


@dataclass
class _Tally:
    windows: int = 0
    batches: int = 0
    frames: int = 0
    last_batch: int = 0
    max_batch: int = 0
    wait_total: float = 0.0
    wait_max: float = 0.0
    recent: deque[float] = field(default_factory=lambda: deque(maxlen=RECENT_WAITS))
    decode_seconds: float = 0.0
    dropped: int = 0
    costs: deque[float] = field(default_factory=lambda: deque(maxlen=RECENT_COSTS))  # per frame, batch by batch
    recent_per_frame: float | None = None  # their median
    shapes: set[tuple[int, int]] = field(default_factory=set)  # (frames, windows) of the batches decoded so far
    warm_costs: deque[float] = field(default_factory=lambda: deque(maxlen=RECENT_COSTS))  # the same, warm ones
    warm_per_frame: float | None = None  # their median
    recent_wait: float = 0.0  # EWMA of seconds a window waits in the queue


class CodecService:
    """Batches decodes from every stream onto one worker thread."""

    def __init__(self, decoder: SnacDecoder, policy: BatchPolicy | None = None, threads: int | None = None) -> None:
        """``threads``: torch's intra-op threads in the worker's thread (lyre.common.threads; None: the
        process's default)."""
        self.decoder = decoder
        self.threads = threads
        self.policy = policy or BatchPolicy.for_device(str(decoder.device))
        self._cond = threading.Condition()
        self._queues: dict[int, list[_Job]] = {}  # frame count -> jobs, most urgent first
        self._seq = itertools.count()
        self._tally = _Tally()
        self._closed = False
        self._thread = threading.Thread(target=self._work, name="lyre-codec", daemon=True)
        self._thread.start()

    async def decode(self, window: CodecWindow, due: float | None = None) -> np.ndarray:
        """The float32 samples of ``window``'s kept frames, decoded in some batch.

        ``due`` (time.monotonic()) is when the audio is needed; windows are
        decoded most urgent first (None: due now, in arrival order). Raises
        `CodecServiceClosed` if the service closes first, or what the decode
        raised. Cancelling the caller drops the window.
        """
        loop = asyncio.get_running_loop()
        now = time.monotonic()
        job = _Job(window, loop, loop.create_future(), now, now if due is None else due, next(self._seq))
        with self._cond:
            if self._closed:
                raise CodecServiceClosed("codec service is closed")
            bisect.insort(self._queues.setdefault(window.n_frames, []), job, key=lambda j: j.key)
            self._cond.notify()
        try:
            return await job.future
        except asyncio.CancelledError:
            self._drop(job)
            raise

    @property
    def recent_seconds_per_frame(self) -> float:
        """Decode seconds per frame (context frames included) as measured lately on this device: the median of
        the last RECENT_COSTS batches', 0 before the first decode. Read without the lock."""
        return self._tally.recent_per_frame or 0.0

    @property
    def warm_seconds_per_frame(self) -> float:
        """The same median over warm decodes only (a shape's first decode builds its kernels and is left out):
        what the device sustains once warm. 0 before a shape is decoded twice. Read without the lock."""
        return self._tally.warm_per_frame or 0.0

    @property
    def recent_wait_s(self) -> float:
        """Seconds a window waits in the queue before its decode starts, lately (an EWMA; 0 at first)."""
        return self._tally.recent_wait

    def stats(self) -> CodecStats:
        """A snapshot of the counters."""
        with self._cond:
            t = self._tally
            return CodecStats(
                windows=t.windows,
                batches=t.batches,
                frames=t.frames,
                mean_batch=t.windows / t.batches if t.batches else 0.0,
                last_batch=t.last_batch,
                max_batch=t.max_batch,
                queue_wait_total_s=t.wait_total,
                queue_wait_max_s=t.wait_max,
                recent_waits_s=tuple(t.recent),
                decode_seconds=t.decode_seconds,
                dropped=t.dropped,
                queued=sum(len(q) for q in self._queues.values()),
            )

    def close(self) -> None:
        """Stop the worker. Queued decodes raise `CodecServiceClosed`; a batch
        already decoding still delivers. Safe to call more than once."""
        with self._cond:
            self._closed = True
            orphans = [job for queue in self._queues.values() for job in queue]
            self._queues.clear()
            for job in orphans:
                job.state = _State.DONE
            self._cond.notify_all()
        _deliver(orphans, [CodecServiceClosed("codec service closed")] * len(orphans))
        if threading.current_thread() is not self._thread:
            self._thread.join()

    def _drop(self, job: _Job) -> None:
        """The caller was cancelled: unqueue the window, or let its result go unread."""
        with self._cond:
            self._tally.dropped += 1
            if job.state is _State.QUEUED:
                queue = self._queues[job.window.n_frames]
                queue.remove(job)
                if not queue:
                    del self._queues[job.window.n_frames]
                job.state = _State.DONE
                self._cond.notify()  # the worker may have been waiting on this window's deadline

    def _work(self) -> None:
        use_threads(self.threads)
        while (batch := self._next_batch()) is not None:
            start = time.monotonic()
            outcomes: list[np.ndarray | BaseException]
            try:
                outcomes = list(self.decoder.decode_windows([job.window for job in batch]))
            except Exception as exc:  # delivered to every caller in the batch; the worker carries on
                outcomes = [exc] * len(batch)
            elapsed = time.monotonic() - start
            with self._cond:
                t = self._tally
                t.windows += len(batch)
                t.batches += 1
                t.frames += sum(job.window.n_frames for job in batch)
                t.last_batch = len(batch)
                t.max_batch = max(t.max_batch, len(batch))
                t.decode_seconds += elapsed
                per_frame = elapsed / max(1, sum(job.window.n_frames for job in batch))
                t.costs.append(per_frame)
                t.recent_per_frame = statistics.median(t.costs)
                if (shape := (batch[0].window.n_frames, len(batch))) in t.shapes:
                    t.warm_costs.append(per_frame)
                    t.warm_per_frame = statistics.median(t.warm_costs)
                t.shapes.add(shape)
                for job in batch:
                    job.state = _State.DONE
                    wait = start - job.arrival
                    t.wait_total += wait
                    t.wait_max = max(t.wait_max, wait)
                    t.recent.append(wait)
                    t.recent_wait += EWMA_WEIGHT * (wait - t.recent_wait)
            _deliver(batch, outcomes)

    def _next_batch(self) -> list[_Job] | None:
        """Block until a batch is due; None once closed."""
        max_wait = self.policy.max_wait_ms / 1000.0
        with self._cond:
            while not self._closed:
                if not self._queues:
                    self._cond.wait()
                    continue
                # Serve the shape holding the most urgent window.
                frames, queue = min(self._queues.items(), key=lambda item: item[1][0].key)
                now = time.monotonic()
                head = queue[0]
                hold = max_wait * (FAR_WAIT_FACTOR if head.due - now > FAR_S else 1.0)
                wait_left = head.arrival + hold - now
                if len(queue) >= self.policy.max_batch or wait_left <= 0:
                    batch = queue[: self.policy.max_batch]
                    del queue[: self.policy.max_batch]
                    if not queue:
                        del self._queues[frames]
                    for job in batch:
                        job.state = _State.RUNNING
                    return batch
                self._cond.wait(wait_left)
        return None


def _deliver(jobs: list[_Job], outcomes: list[np.ndarray | BaseException]) -> None:
    """Settle each job's future on its own loop: one thread-safe call per loop."""
    settle_futures((job.loop, job.future, outcome) for job, outcome in zip(jobs, outcomes))
