"""One utterance's decode through the codec service: the handle a speech segment holds, and the decodes it
queues (lyre.codec.service does the work)."""

from __future__ import annotations

import asyncio
import enum
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from lyre.codec.snac import check_frames

__all__ = ["CodecServiceClosed", "CodecStream", "Job", "JobState"]


class StreamOwner(Protocol):
    """What a stream asks of the service that decodes it (lyre.codec.service's `CodecService`)."""

    def next_seq(self) -> int: ...

    def submit(self, job: Job) -> None: ...

    def drop(self, stream: CodecStream) -> None: ...


class CodecServiceClosed(RuntimeError):
    """The service (or the stream) was closed before this decode was done."""


class JobState(enum.Enum):
    """Where a job is: queued, in the worker's call, or done (its future settled or to be left alone)."""

    QUEUED = enum.auto()
    RUNNING = enum.auto()
    DONE = enum.auto()


@dataclass(eq=False)
class Job:
    """A stream's decode (its frames) or finish, queued for the service's worker."""

    stream: CodecStream
    frames: list[tuple[int, ...]]  # still to decode (empty for a finish)
    finish: bool
    loop: asyncio.AbstractEventLoop
    future: asyncio.Future[np.ndarray]
    arrival: float  # time.monotonic()
    due: float  # time.monotonic() by which its audio is needed
    seq: int  # arrival order, to break ties
    pieces: list[np.ndarray] = field(default_factory=list)
    state: JobState = JobState.QUEUED
    waited: bool = False  # its queue wait is counted

    @property
    def key(self) -> tuple[float, int]:
        return self.due, self.seq


class CodecStream:
    """One utterance's decode; see the module docstring. One `decode` or `finish` at a time."""

    def __init__(self, service: StreamOwner, seed: int | None) -> None:
        self._service = service
        self.seed = seed
        self.slot: int | None = None  # the decoder's slot, taken by the worker at the stream's first call
        self.closed = False
        self.frames = 0  # handed in so far
        self._job: Job | None = None

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
        self._service.drop(self)

    async def _submit(self, frames: list[tuple[int, ...]], finish: bool, due: float | None) -> np.ndarray:
        if self._job is not None:
            raise RuntimeError("a codec stream takes one decode at a time")
        if self.closed:
            raise CodecServiceClosed("codec stream is closed")
        loop = asyncio.get_running_loop()
        now = time.monotonic()
        job = Job(self, frames, finish, loop, loop.create_future(), now, now if due is None else due,
                   self._service.next_seq())
        self._service.submit(job)
        self._job = job
        try:
            return await job.future
        except asyncio.CancelledError:
            self.close()
            raise
        finally:
            self._job = None
