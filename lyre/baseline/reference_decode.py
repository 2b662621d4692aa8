"""The reference streaming decode: a 4-frame SNAC window after every frame, keep the second."""

from __future__ import annotations

import threading
import time

import numpy as np

from lyre.codec import CodecStats, CodecWindow, SnacDecoder

__all__ = ["NaiveCodec", "ReferenceWindows"]

# The reference decodes the last 4 frames and keeps the second: one frame of
# left context, two of right context.
_WINDOW_FRAMES = 4
_KEEP = (1, 2)



class ReferenceWindows:
    """The reference streaming decode's windows for one utterance.

    After frame i >= 3 arrives: frames i-3..i, keeping frame i-2 (samples
    2048:4096 of the window's audio).
    """

    def __init__(self, seed: int | None) -> None:
        self.seed = seed
        self._frames: list[tuple[int, ...]] = []

    def push(self, frame: tuple[int, ...]) -> CodecWindow | None:
        """Add the next frame's 7 codes; the window to decode now, if any."""
        self._frames.append(frame)
        start = len(self._frames) - _WINDOW_FRAMES
        if start < 0:
            return None
        return CodecWindow(tuple(self._frames[start:]), start_frame=start, keep=_KEEP, seed=self.seed)


class NaiveCodec:
    """SNAC, one window at a time, called from each request's own task: no shared batching."""

    def __init__(self, decoder: SnacDecoder) -> None:
        self.decoder = decoder
        self._lock = threading.Lock()
        self._windows = 0
        self._frames = 0
        self._seconds = 0.0

    def decode(self, window: CodecWindow) -> np.ndarray:
        """float32 samples of the window's kept frames (blocking; run it off the event loop)."""
        start = time.perf_counter()
        (pcm,) = self.decoder.decode_windows([window])
        with self._lock:
            self._windows += 1
            self._frames += window.n_frames
            self._seconds += time.perf_counter() - start
        return pcm

    def stats(self) -> CodecStats:
        """Honest counts: every window is a batch of one, and nothing queues (waits are not measured)."""
        with self._lock:
            windows, frames, seconds = self._windows, self._frames, self._seconds
        one = 1 if windows else 0
        return CodecStats(decodes=windows, batches=windows, rows=windows, frames=frames, mean_batch=float(one),
                          last_batch=one, max_batch=one, queue_wait_total_s=0.0, queue_wait_max_s=0.0,
                          recent_waits_s=(), decode_seconds=seconds, dropped=0, queued=0, streams=0)

    def close(self) -> None:
        """Nothing to stop: decodes run in the requests' own tasks."""
