"""A live session's input audio: 16 kHz samples addressed by their position in the stream."""

from __future__ import annotations

import numpy as np

__all__ = ["AudioBuffer"]


class AudioBuffer:
    """The samples from stream position ``start`` to ``end``.

    Appends are kept as a list of chunks and joined only when read, so a
    minute of 20 ms appends costs a minute of copying, not a minute per append.
    """

    def __init__(self) -> None:
        self.start = 0
        self._chunks: list[np.ndarray] = []
        self.size = 0

    @property
    def end(self) -> int:
        return self.start + self.size

    def append(self, audio: np.ndarray) -> None:
        self._chunks.append(audio)
        self.size += audio.size

    def read(self, begin: int, end: int | None = None) -> np.ndarray:
        """Samples ``begin`` (a stream position, at least ``start``) to ``end`` (default: all), shape (n,)."""
        if len(self._chunks) != 1:
            self._chunks = [np.concatenate(self._chunks) if self._chunks else np.zeros(0, np.float32)]
        stop = self.size if end is None else end - self.start
        return self._chunks[0][begin - self.start:stop]

    def drop_before(self, position: int) -> None:
        """Forget the samples before ``position``; positions stay as they were."""
        cut = min(max(position - self.start, 0), self.size)
        if cut == 0:
            return
        rest = self.read(self.start + cut)
        self._chunks = [rest] if rest.size else []
        self.start += cut
        self.size -= cut
