"""What every encoder of a response format does: int16 mono PCM in, chunk by chunk, and whatever encoded bytes
are ready out, so an HTTP response can stream audio while it is generated."""

from __future__ import annotations

from abc import ABC, abstractmethod

import numpy as np

__all__ = ["StreamEncoder"]


class StreamEncoder(ABC):
    """Encodes one audio stream: :meth:`feed` chunks in order, then :meth:`finish` once.

    The concatenation of everything returned is the complete file or stream.
    """

    content_type: str
    """The HTTP ``Content-Type`` of the output."""
    sample_rate: int
    """Sample rate of the encoded output, in Hz."""

    def __init__(self, input_rate: int) -> None:
        self.input_rate = input_rate
        self._samples_in = 0
        self._finished = False

    def feed(self, pcm: np.ndarray) -> bytes:
        """Encode one chunk of int16 mono PCM (shape ``(n,)``) at the input rate.

        Returns the encoded bytes ready now, possibly ``b""`` while the codec
        fills a frame. Raises ``ValueError`` for anything but a 1-D int16
        array and ``RuntimeError`` after :meth:`finish`.
        """
        if self._finished:
            raise RuntimeError("feed() after finish(): this encoder's stream is complete")
        if not isinstance(pcm, np.ndarray):
            raise ValueError(f"pcm must be a numpy array, got {type(pcm).__name__}")
        if pcm.dtype != np.int16:
            raise ValueError(f"pcm must be int16 samples, got dtype {pcm.dtype}")
        if pcm.ndim != 1:
            raise ValueError(f"pcm must be 1-D mono samples, got shape {pcm.shape}")
        if pcm.size == 0:
            return b""
        out = self._encode(pcm)
        self._samples_in += pcm.size
        return out

    def finish(self) -> bytes:
        """Flush the codec and container; returns the rest of the stream.

        Raises ``RuntimeError`` if called twice.
        """
        if self._finished:
            raise RuntimeError("finish() called twice")
        self._finished = True
        return self._flush()

    def whole(self, data: bytes) -> bytes:
        """The finished file from all that `feed` and `finish` returned, when it is sent in one piece."""
        return data

    @abstractmethod
    def _encode(self, pcm: np.ndarray) -> bytes:
        """Encode a validated, non-empty chunk."""

    @abstractmethod
    def _flush(self) -> bytes:
        """Drain everything buffered and release codec state."""
