"""The codec service: one per process, decoding every stream's frames once, as they come, batched across streams.

    stream = service.open(seed=7)                  # one utterance (a speech segment): a slot of state
    pcm = await stream.decode(frames, due)         # the audio these frames let out (the lookahead holds some back)
    pcm = await stream.finish(due)                 # the rest, at the utterance's end; the slot is free again
    stream.close()                                 # or drop it (cancelled, failed) at any time

The decoder is lyre.codec.streaming's: each stream's state is kept, so a
frame is decoded once and the audio equals the whole utterance's decode. A
worker thread, off the event loop, serves the most urgent stream first: one
call takes its frames (at most ``max_frames``) and as many of every other
stream that has that many queued, most urgent first, up to ``max_batch``
rows, waiting at most ``max_wait_ms`` from the arrival of the most urgent
(``FAR_WAIT_FACTOR`` times longer when even that one is due more than
``FAR_S`` from now); a stream with more frames queued keeps the rest for the
next call. Finishes go together in calls of their own. Each result goes back
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
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import torch

from lyre.codec.snac import SnacDecoder, check_frames, check_seed
from lyre.codec.streaming import StreamingSnac
from lyre.common.batching import BatchLimits
from lyre.common.loops import settle_futures
from lyre.common.threads import use_threads

__all__ = ["BatchPolicy", "CodecService", "CodecServiceClosed", "CodecStats", "CodecStream"]

# On a GPU one call costs about the same for 1 or 64 streams, so it pays to gather for a few ms (a small share
# of a frame's 85 ms) and batch wide.
CUDA_MAX_BATCH = 64
CUDA_MAX_WAIT_MS = 15.0
# On a CPU the streams queued now share a call, none waits for company: a batch saves per-call work and reads
# the weights once (2 cores, torch 2.13, one thread, benchmarks/codec.py: a frame alone ~20 ms, 8 streams a
# frame each ~15 ms a frame), but past about 32 frames a call the working set leaves the caches and a frame
# costs more (16 streams of 4 frames: ~29 ms a frame).
CPU_MAX_BATCH = 8
CPU_MAX_WAIT_MS = 0.0
# Frames of one stream in one call, at most.
MAX_FRAMES = 4
# Slots made when the service starts; the pool doubles when every one is taken.
START_SLOTS = 16
# Queue waits kept for CodecStats.recent_waits_s.
RECENT_WAITS = 256
# Weight of the newest call in the running (exponentially weighted) queue wait: about the last ten calls count.
EWMA_WEIGHT = 0.1
# The decode cost per frame is the median of the last this many calls': it follows the load, and one cold call
# (a shape's first builds its kernels) does not inflate it. The median of warm calls only is what the device
# sustains, for admission.
RECENT_COSTS = 15
# A stream due later than this from now is far ahead of its listener...
FAR_S = 0.5
# ...and may wait this many times max_wait_ms for company.
FAR_WAIT_FACTOR = 4.0


@dataclass(frozen=True)
class BatchPolicy(BatchLimits):
    """How the worker forms calls: at most ``max_batch`` streams of ``max_frames`` frames each, waiting at most
    ``max_wait_ms`` after the most urgent arrived for more."""

    max_frames: int = MAX_FRAMES

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.max_frames < 1:
            raise ValueError(f"max_frames must be >= 1, got {self.max_frames}")

    @classmethod
    def for_device(cls, device: str) -> BatchPolicy:
        """The policy measured best for ``device`` ("cpu", "cuda", "cuda:1", ...)."""
        if torch.device(device).type == "cuda":
            return cls(max_batch=CUDA_MAX_BATCH, max_wait_ms=CUDA_MAX_WAIT_MS)
        return cls(max_batch=CPU_MAX_BATCH, max_wait_ms=CPU_MAX_WAIT_MS)


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


class CodecServiceClosed(RuntimeError):
    """The service (or the stream) was closed before this decode was done."""


class _State(enum.Enum):
    QUEUED = enum.auto()
    RUNNING = enum.auto()
    DONE = enum.auto()


@dataclass(eq=False)
class _Job:
    stream: CodecStream
    frames: list[tuple[int, ...]]  # still to decode (empty for a finish)
    finish: bool
    loop: asyncio.AbstractEventLoop
    future: asyncio.Future[np.ndarray]
    arrival: float  # time.monotonic()
    due: float  # time.monotonic() by which its audio is needed
    seq: int  # arrival order, to break ties
    pieces: list[np.ndarray] = field(default_factory=list)
    state: _State = _State.QUEUED
    waited: bool = False  # its queue wait is counted

    @property
    def key(self) -> tuple[float, int]:
        return self.due, self.seq


@dataclass
class _Tally:
    decodes: int = 0
    batches: int = 0
    frames: int = 0
    rows: int = 0
    last_batch: int = 0
    max_batch: int = 0
    wait_total: float = 0.0
    wait_max: float = 0.0
    recent: deque[float] = field(default_factory=lambda: deque(maxlen=RECENT_WAITS))
    decode_seconds: float = 0.0
    dropped: int = 0
    costs: deque[float] = field(default_factory=lambda: deque(maxlen=RECENT_COSTS))  # per frame, call by call
    recent_per_frame: float | None = None  # their median
    shapes: set[tuple[bool, int, int]] = field(default_factory=set)  # (finish, frames, rows) of the calls so far
    warm_costs: deque[float] = field(default_factory=lambda: deque(maxlen=RECENT_COSTS))  # the same, warm ones
    warm_per_frame: float | None = None  # their median
    recent_wait: float = 0.0  # EWMA of seconds a decode waits in the queue


class CodecStream:
    """One utterance's decode; see the module docstring. One `decode` or `finish` at a time."""

    def __init__(self, service: CodecService, seed: int | None) -> None:
        self._service = service
        self.seed = seed
        self.slot: int | None = None  # the decoder's slot, taken by the worker at the stream's first call
        self.closed = False
        self.frames = 0  # handed in so far
        self._job: _Job | None = None

    async def decode(self, frames: Sequence[Sequence[int]], due: float | None = None) -> np.ndarray:
        """The float32 samples the next ``frames`` (7 codes each) let out: the first call's fewer than its
        frames hold (the lookahead, 4,757 samples), then 2,048 a frame. ``due`` (time.monotonic()) is when the
        audio is needed (None: now). Raises `CodecServiceClosed` if the stream or service closes first, or what
        the decode raised; cancelling the caller closes the stream."""
        frames = check_frames(frames)
        if not frames:
            raise ValueError("decode needs at least one frame")
        self.frames += len(frames)
        return await self._submit(list(frames), False, due)

    async def finish(self, due: float | None = None) -> np.ndarray:
        """The samples the lookahead still holds, up to the last frame; the stream is closed after."""
        if self.slot is None and self.frames == 0:
            self.close()
            return np.zeros(0, np.float32)
        return await self._submit([], True, due)

    def close(self) -> None:
        """Drop the stream: its queued work is discarded and its slot freed. Safe to call more than once."""
        self._service._close_stream(self)

    async def _submit(self, frames: list[tuple[int, ...]], finish: bool, due: float | None) -> np.ndarray:
        if self._job is not None:
            raise RuntimeError("a codec stream takes one decode at a time")
        if self.closed:
            raise CodecServiceClosed("codec stream is closed")
        loop = asyncio.get_running_loop()
        now = time.monotonic()
        job = _Job(self, frames, finish, loop, loop.create_future(), now, now if due is None else due,
                   next(self._service._seq))
        self._service._queue_job(job)
        self._job = job
        try:
            return await job.future
        except asyncio.CancelledError:
            self.close()
            raise
        finally:
            self._job = None


class CodecService:
    """Decodes every stream's frames on one worker thread, batched across streams."""

    def __init__(self, decoder: SnacDecoder, policy: BatchPolicy | None = None, threads: int | None = None,
                 slots: int = START_SLOTS, streaming: StreamingSnac | None = None) -> None:
        """``threads``: torch's intra-op threads in the worker's thread (lyre.common.threads; None: the
        process's default); ``slots``: the streams the decoder holds state for at first; ``streaming``: the
        streaming decoder (default: one over ``decoder``'s model; a benchmark may bring a stand-in)."""
        self.decoder = decoder
        self.threads = threads
        self.policy = policy or BatchPolicy.for_device(str(decoder.device))
        self.streaming = streaming or StreamingSnac(decoder.model, slots)
        self.lookahead = self.streaming.lookahead  # samples held back until the frames after them come
        self._cond = threading.Condition()
        self._queue: list[_Job] = []  # most urgent first
        self._freeing: list[int] = []  # slots of closed streams, freed by the worker before its next call
        self._streams = 0
        self._seq = itertools.count()
        self._tally = _Tally()
        self._closed = False
        self._thread = threading.Thread(target=self._work, name="lyre-codec", daemon=True)
        self._thread.start()

    def open(self, seed: int | None = 0) -> CodecStream:
        """A stream for one utterance, its noise keyed by ``seed`` (None: no noise)."""
        check_seed(seed)
        if self._closed:
            raise CodecServiceClosed("codec service is closed")
        with self._cond:
            self._streams += 1
        return CodecStream(self, seed)

    @property
    def serial(self) -> bool:
        """Whether a call's time grows with the frames in it (a CPU), rather than staying about the same for one
        stream or many (a GPU)."""
        return torch.device(self.decoder.device).type != "cuda"

    @property
    def recent_seconds_per_frame(self) -> float:
        """Decode seconds per frame as measured lately on this device: the median of the last RECENT_COSTS
        calls', 0 before the first. Read without the lock."""
        return self._tally.recent_per_frame or 0.0

    @property
    def warm_seconds_per_frame(self) -> float:
        """The same median over warm calls only (a shape's first call builds its kernels and is left out):
        what the device sustains once warm. 0 before a shape is decoded twice. Read without the lock."""
        return self._tally.warm_per_frame or 0.0

    @property
    def recent_wait_s(self) -> float:
        """Seconds a decode waits in the queue before its call starts, lately (an EWMA; 0 at first)."""
        return self._tally.recent_wait

    def stats(self) -> CodecStats:
        """A snapshot of the counters."""
        with self._cond:
            t = self._tally
            return CodecStats(
                decodes=t.decodes, batches=t.batches, rows=t.rows, frames=t.frames,
                mean_batch=t.rows / t.batches if t.batches else 0.0, last_batch=t.last_batch,
                max_batch=t.max_batch, queue_wait_total_s=t.wait_total, queue_wait_max_s=t.wait_max,
                recent_waits_s=tuple(t.recent), decode_seconds=t.decode_seconds, dropped=t.dropped,
                queued=len(self._queue), streams=self._streams,
            )

    def close(self) -> None:
        """Stop the worker. Queued decodes raise `CodecServiceClosed`; a call already running still delivers.
        Safe to call more than once."""
        with self._cond:
            self._closed = True
            orphans, self._queue = self._queue, []
            for job in orphans:
                job.state = _State.DONE
            self._cond.notify_all()
        _deliver(orphans, [CodecServiceClosed("codec service closed")] * len(orphans))
        if threading.current_thread() is not self._thread:
            self._thread.join()

    # -- from the streams (any thread) --

    def _queue_job(self, job: _Job) -> None:
        with self._cond:
            if self._closed:
                raise CodecServiceClosed("codec service is closed")
            bisect.insort(self._queue, job, key=lambda j: j.key)
            self._tally.decodes += 1
            self._cond.notify()

    def _close_stream(self, stream: CodecStream) -> None:
        with self._cond:
            if stream.closed:
                return
            stream.closed = True
            self._streams -= 1
            job = stream._job
            dropped = job is not None and job.state is not _State.DONE
            if job is not None and job.state is _State.QUEUED:
                self._queue.remove(job)
                self._cond.notify()  # the worker may have been waiting on this one's deadline
            if dropped:
                assert job is not None
                job.state = _State.DONE
                self._tally.dropped += 1
            if stream.slot is not None:
                self._freeing.append(stream.slot)
                stream.slot = None
        if dropped:
            assert job is not None
            _deliver([job], [CodecServiceClosed("codec stream closed")])

    # -- the worker --

    def _work(self) -> None:
        use_threads(self.threads)
        while (call := self._next_batch()) is not None:
            batch, n = call
            start = time.monotonic()
            finish = batch[0].finish
            outcomes: list[np.ndarray | BaseException]
            try:
                slots = [self._slot(job.stream) for job in batch]
                if finish:
                    outcomes = list(self.streaming.finish(slots))
                else:
                    outcomes = list(self.streaming.push([(slot, job.frames[:n]) for slot, job in zip(slots, batch)]))
            except Exception as exc:  # the state of these rows is lost: each fails; the worker carries on
                outcomes = [exc] * len(batch)
            elapsed = time.monotonic() - start
            self._settle(batch, outcomes, n, start, elapsed)

    def _slot(self, stream: CodecStream) -> int:
        """The stream's slot (on the worker thread only: opening one resets its state)."""
        if stream.slot is None:
            stream.slot = self.streaming.open(stream.seed)
        return stream.slot

    def _settle(self, batch: list[_Job], outcomes: list[np.ndarray | BaseException], n: int, start: float,
                elapsed: float) -> None:
        done: list[tuple[_Job, np.ndarray | BaseException]] = []
        with self._cond:
            t = self._tally
            frames = n * len(batch) if n else len(batch) * self.streaming.flush_frames
            t.batches += 1
            t.rows += len(batch)
            t.frames += frames
            t.last_batch = len(batch)
            t.max_batch = max(t.max_batch, len(batch))
            t.decode_seconds += elapsed
            per_frame = elapsed / max(1, frames)
            t.costs.append(per_frame)
            t.recent_per_frame = statistics.median(t.costs)
            if (shape := (batch[0].finish, n, len(batch))) in t.shapes:
                t.warm_costs.append(per_frame)
                t.warm_per_frame = statistics.median(t.warm_costs)
            t.shapes.add(shape)
            for job, outcome in zip(batch, outcomes):
                stream, failed = job.stream, isinstance(outcome, BaseException)
                if stream.closed or job.finish or failed:  # the stream is done with its slot
                    if stream.slot is not None:
                        if failed:  # a finish frees its slot in the decoder itself
                            self._freeing.append(stream.slot)
                        stream.slot = None
                    if job.state is _State.RUNNING:
                        job.state = _State.DONE
                        done.append((job, outcome))
                        if job.finish and not failed:
                            stream.closed = True
                            self._streams -= 1
                    continue
                job.pieces.append(outcome)
                del job.frames[:n]
                if job.frames:  # the rest go in a later call
                    job.state = _State.QUEUED
                    bisect.insort(self._queue, job, key=lambda j: j.key)
                else:
                    job.state = _State.DONE
                    done.append((job, job.pieces[0] if len(job.pieces) == 1 else np.concatenate(job.pieces)))
        _deliver([job for job, _ in done], [outcome for _, outcome in done])

    def _next_batch(self) -> tuple[list[_Job], int] | None:
        """Block until a call is due: its streams and the frames each gives it (0: finishes); None once
        closed."""
        max_wait = self.policy.max_wait_ms / 1000.0
        with self._cond:
            while not self._closed:
                for slot in self._freeing:
                    self.streaming.close(slot)
                self._freeing.clear()
                if not self._queue:
                    self._cond.wait()
                    continue
                head = self._queue[0]
                if head.finish:
                    n, mates = 0, [job for job in self._queue if job.finish]
                else:
                    n = min(len(head.frames), self.policy.max_frames)
                    mates = [job for job in self._queue if not job.finish and len(job.frames) >= n]
                now = time.monotonic()
                hold = max_wait * (FAR_WAIT_FACTOR if head.due - now > FAR_S else 1.0)
                wait_left = head.arrival + hold - now
                if len(mates) >= self.policy.max_batch or wait_left <= 0:
                    batch = mates[: self.policy.max_batch]
                    for job in batch:
                        self._queue.remove(job)
                        job.state = _State.RUNNING
                        if not job.waited:
                            job.waited = True
                            wait = now - job.arrival
                            t = self._tally
                            t.wait_total += wait
                            t.wait_max = max(t.wait_max, wait)
                            t.recent.append(wait)
                            t.recent_wait += EWMA_WEIGHT * (wait - t.recent_wait)
                    return batch, n
                self._cond.wait(wait_left)
        return None


def _deliver(jobs: list[_Job], outcomes: Sequence[np.ndarray | BaseException]) -> None:
    """Settle each job's future on its own loop: one thread-safe call per loop."""
    settle_futures((job.loop, job.future, outcome) for job, outcome in zip(jobs, outcomes))
