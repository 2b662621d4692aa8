"""Leading-silence trim: drop the silence Orpheus generates before it starts speaking.

The base model opens most utterances with about 600 ms of near-silence.
Dropping it before the audio is sent makes playback start with speech,
which is most of the perceived latency of a voice agent's reply.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from lyre.orpheus import SAMPLE_RATE

__all__ = ["LeadingSilenceTrimmer", "TrimConfig", "leading_silence"]


@dataclass(frozen=True)
class TrimConfig:
    """How silence is recognised and how much of it may be dropped.

    ``threshold_dbfs`` is the RMS of one block relative to full scale (1.0
    for float PCM) at which the block counts as speech. ``pad_ms`` of
    silence is kept before speech so its onset is not clipped, and no more
    than ``max_trim_ms`` is ever dropped, so a quiet speaker loses at most that.
    """

    threshold_dbfs: float = -40.0
    block_ms: float = 10.0
    pad_ms: float = 50.0
    max_trim_ms: float = 1500.0
    sample_rate: int = SAMPLE_RATE

    def __post_init__(self) -> None:
        # Each check reads "not (ok)" so that NaN fails it too.
        if not (self.threshold_dbfs < 0 and math.isfinite(self.threshold_dbfs)):
            raise ValueError(f"threshold_dbfs must be finite and < 0 (0 is full scale), got {self.threshold_dbfs}")
        if not self.sample_rate > 0:
            raise ValueError(f"sample_rate must be > 0, got {self.sample_rate}")
        if not (0 < self.block_ms < math.inf) or self.block_samples < 1:
            raise ValueError(f"block_ms must be finite and at least one sample long, got {self.block_ms}")
        if not 0 <= self.pad_ms < math.inf:
            raise ValueError(f"pad_ms must be finite and >= 0, got {self.pad_ms}")
        if not 0 <= self.max_trim_ms < math.inf:
            raise ValueError(f"max_trim_ms must be finite and >= 0, got {self.max_trim_ms}")

    def _samples(self, ms: float) -> int:
        return round(ms * self.sample_rate / 1000)

    @property
    def block_samples(self) -> int:
        return self._samples(self.block_ms)

    @property
    def pad_samples(self) -> int:
        return self._samples(self.pad_ms)

    @property
    def max_trim_samples(self) -> int:
        return self._samples(self.max_trim_ms)


def leading_silence(pcm: np.ndarray, config: TrimConfig) -> int | None:
    """Start (in samples) of the first block of ``pcm`` whose RMS reaches the threshold.

    Blocks are ``config.block_samples`` long, back to back from sample 0; a
    trailing partial block is not judged. None when no block reaches it.
    """
    pcm = np.asarray(pcm)
    if pcm.ndim != 1:
        raise ValueError(f"pcm must be mono (1-D), got shape {pcm.shape}")
    size = config.block_samples
    n_blocks = len(pcm) // size
    blocks = pcm[: n_blocks * size].reshape(n_blocks, size).astype(np.float64)  # (n_blocks, size)
    # Mean square against the squared threshold: the same test as RMS, without the root.
    loud = np.mean(np.square(blocks), axis=1) >= 10.0 ** (config.threshold_dbfs / 10.0)
    if not loud.any():
        return None
    return int(np.argmax(loud)) * size


class LeadingSilenceTrimmer:
    """Drops the leading silence of a stream of PCM chunks.

    Audio is held back until the first loud block is found at sample ``s``;
    then the first ``min(max(0, s - pad), max_trim)`` samples are dropped and
    everything after passes through unchanged. Once ``max_trim + pad``
    samples of silence have been seen the cut cannot grow, so exactly
    ``max_trim`` samples are dropped without waiting for speech: at most
    ``max_trim + pad`` samples plus one block are ever held back. The
    concatenated output is ``input[cut:]`` bit for bit, however it is chunked.
    """

    def __init__(self, config: TrimConfig = TrimConfig()) -> None:
        self.config = config
        self._held = np.zeros(0, dtype=np.float32)
        self._scanned = 0  # blocks of _held already found silent
        self._cut: int | None = None  # samples dropped, once decided
        # Blocks starting at or beyond this sample cannot change the cut.
        limit = config.max_trim_samples + config.pad_samples
        self._horizon = math.ceil(limit / config.block_samples) if config.max_trim_samples else 0

    @property
    def trimmed_samples(self) -> int:
        """Samples dropped so far (0 until the cut is decided)."""
        return self._cut or 0

    @property
    def trimmed_ms(self) -> float:
        """`trimmed_samples` in milliseconds."""
        return self.trimmed_samples * 1000 / self.config.sample_rate

    def push(self, pcm: np.ndarray) -> np.ndarray:
        """Add a float32 mono chunk of any length; return the audio to send now (maybe empty)."""
        chunk = np.asarray(pcm, dtype=np.float32)
        if chunk.ndim != 1:
            raise ValueError(f"pcm must be mono (1-D), got shape {chunk.shape}")
        if self._cut is not None:
            return chunk
        self._held = np.concatenate([self._held, chunk])
        cut = self._find_cut()
        return np.zeros(0, dtype=np.float32) if cut is None else self._release(cut)

    def flush(self) -> np.ndarray:
        """End of stream: return what is still held back, less up to ``max_trim`` of silence."""
        if self._cut is not None:
            return np.zeros(0, dtype=np.float32)
        return self._release(min(len(self._held), self.config.max_trim_samples))

    def _find_cut(self) -> int | None:
        size = self.config.block_samples
        stop = min(len(self._held) // size, self._horizon)
        if stop > self._scanned:
            start = self._scanned * size
            s = leading_silence(self._held[start : stop * size], self.config)
            if s is not None:
                return min(max(0, start + s - self.config.pad_samples), self.config.max_trim_samples)
            self._scanned = stop
        return self.config.max_trim_samples if self._scanned >= self._horizon else None

    def _release(self, cut: int) -> np.ndarray:
        out = self._held[cut:]
        self._cut = cut
        self._held = np.zeros(0, dtype=np.float32)
        return out
