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

import bisect
import itertools
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from lyre.codec.codec_stats import CodecStats, CodecTally
from lyre.codec.codec_stream import CodecServiceClosed, CodecStream, Job, JobState
from lyre.codec.snac import SnacDecoder, check_seed
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
        self._queue: list[Job] = []  # most urgent first
        self._freeing: list[int] = []  # slots of closed streams, freed by the worker before its next call
        self._streams = 0
        self._seq = itertools.count()
        self._tally = CodecTally()
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
    def cuda_graphs(self) -> bool:
        """Whether its calls replay from CUDA graphs (`StreamingSnac.capture_graphs`)."""
        return self.streaming.graphs is not None

    @property
    def serial(self) -> bool:
        """Whether a call's time grows with the frames in it (a CPU), rather than staying about the same for one
        stream or many (a GPU)."""
        return torch.device(self.decoder.device).type != "cuda"

    @property
    def recent_seconds_per_frame(self) -> float:
        """Decode seconds per frame as measured lately on this device: the median of the last calls'
        (lyre.codec.codec_stats), 0 before the first. Read without the lock."""
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
            return self._tally.snapshot(len(self._queue), self._streams)

    def close(self) -> None:
        """Stop the worker. Queued decodes raise `CodecServiceClosed`; a call already running still delivers.
        Safe to call more than once."""
        with self._cond:
            self._closed = True
            orphans, self._queue = self._queue, []
            for job in orphans:
                job.state = JobState.DONE
            self._cond.notify_all()
        _deliver(orphans, [CodecServiceClosed("codec service closed")] * len(orphans))
        if threading.current_thread() is not self._thread:
            self._thread.join()

    # -- from the streams (any thread) --

    def next_seq(self) -> int:
        """The next arrival number (ties between equally urgent decodes go to the first come)."""
        return next(self._seq)

    def submit(self, job: Job) -> None:
        """Queue a stream's job (`CodecStream` calls it)."""
        with self._cond:
            if self._closed:
                raise CodecServiceClosed("codec service is closed")
            bisect.insort(self._queue, job, key=lambda j: j.key)
            self._tally.decodes += 1
            self._cond.notify()

    def drop(self, stream: CodecStream) -> None:
        """Close ``stream``: its queued job discarded, its slot freed before the next call (`CodecStream.close`)."""
        with self._cond:
            if stream.closed:
                return
            stream.closed = True
            self._streams -= 1
            job = stream._job
            dropped = job is not None and job.state is not JobState.DONE
            if job is not None and job.state is JobState.QUEUED:
                self._queue.remove(job)
                self._cond.notify()  # the worker may have been waiting on this one's deadline
            if dropped:
                assert job is not None
                job.state = JobState.DONE
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
            self._settle(batch, outcomes, n, elapsed)

    def _slot(self, stream: CodecStream) -> int:
        """The stream's slot (on the worker thread only: opening one resets its state)."""
        if stream.slot is None:
            stream.slot = self.streaming.open(stream.seed)
        return stream.slot

    def _settle(self, batch: list[Job], outcomes: list[np.ndarray | BaseException], n: int, elapsed: float) -> None:
        done: list[tuple[Job, np.ndarray | BaseException]] = []
        with self._cond:
            frames = n * len(batch) if n else len(batch) * self.streaming.flush_frames
            self._tally.called((batch[0].finish, n, len(batch)), frames, elapsed)
            for job, outcome in zip(batch, outcomes):
                stream, failed = job.stream, isinstance(outcome, BaseException)
                if stream.closed or job.finish or failed:  # the stream is done with its slot
                    if stream.slot is not None:
                        if not job.finish or failed:  # a finish that went through freed it in the decoder
                            self._freeing.append(stream.slot)
                        stream.slot = None
                    if job.state is JobState.RUNNING:
                        job.state = JobState.DONE
                        done.append((job, outcome))
                        if job.finish and not failed:
                            stream.closed = True
                            self._streams -= 1
                    continue
                job.pieces.append(outcome)
                del job.frames[:n]
                if job.frames:  # the rest go in a later call
                    job.state = JobState.QUEUED
                    bisect.insort(self._queue, job, key=lambda j: j.key)
                else:
                    job.state = JobState.DONE
                    done.append((job, job.pieces[0] if len(job.pieces) == 1 else np.concatenate(job.pieces)))
        _deliver([job for job, _ in done], [outcome for _, outcome in done])

    def _next_batch(self) -> tuple[list[Job], int] | None:
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
                        job.state = JobState.RUNNING
                        if not job.waited:
                            job.waited = True
                            self._tally.waited(now - job.arrival)
                    return batch, n
                self._cond.wait(wait_left)
        return None


def _deliver(jobs: list[Job], outcomes: Sequence[np.ndarray | BaseException]) -> None:
    """Settle each job's future on its own loop: one thread-safe call per loop."""
    settle_futures((job.loop, job.future, outcome) for job, outcome in zip(jobs, outcomes))
