"""Speech clips (a voice's training data, a reference voice's sample): any file PyAV reads, checked, as
24 kHz mono float32 with the silence cut.

A clip is refused (`ClipRejected`, its message the reason) when it cannot be
used: unreadable, empty, clipped or silent. Leading silence is cut to a kept
pad before the first loud block, since a voice trained on silent openings
learns to generate them; trailing silence is trimmed to a short pad.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
import io
from pathlib import Path

import numpy as np

from lyre.orpheus import SAMPLE_RATE
from lyre.tts.trim import TrimConfig, leading_silence

__all__ = ["ClipRejected", "SilenceCut", "TrimmedClip", "load_clip", "trim_clip"]

FULL_SCALE = 0.999  # a sample at or past this is at full scale (int16 32767 is 0.99997)
MAX_CLIPPED_SHARE = 0.001  # a clip with more of its samples at full scale is refused as clipped


class ClipRejected(ValueError):
    """An audio file training cannot use; the message is the reason."""


@dataclass(frozen=True)
class SilenceCut:
    """How silence around speech is found and cut.

    ``threshold_dbfs``: the RMS of a 10 ms block (relative to full scale) at
    which it counts as speech. ``lead_pad_ms`` of silence is kept before the
    first loud block (``cut_leading=False`` keeps all of it) and
    ``tail_pad_ms`` after the last one.
    """

    cut_leading: bool = True
    threshold_dbfs: float = -40.0
    lead_pad_ms: float = 50.0
    tail_pad_ms: float = 100.0

    def __post_init__(self) -> None:
        if not (self.threshold_dbfs < 0 and math.isfinite(self.threshold_dbfs)):
            raise ValueError(f"silence threshold must be finite and below 0 dBFS, got {self.threshold_dbfs}")
        for name in ("lead_pad_ms", "tail_pad_ms"):
            value = getattr(self, name)
            if not 0 <= value < math.inf:
                raise ValueError(f"{name} must be finite and >= 0, got {value}")

    def _detector(self) -> TrimConfig:
        return TrimConfig(threshold_dbfs=self.threshold_dbfs, sample_rate=SAMPLE_RATE)


@dataclass(frozen=True)
class TrimmedClip:
    """A clip ready to encode, and how much silence was cut from each end."""

    pcm: np.ndarray  # float32 (samples,) at SAMPLE_RATE
    lead_cut_s: float
    tail_cut_s: float

    @property
    def seconds(self) -> float:
        return len(self.pcm) / SAMPLE_RATE


def _decode(source: Path | bytes) -> tuple[np.ndarray, int]:
    """Every sample of the first audio stream at its own rate, float32 (channels, samples)."""
    import av

    if (len(source) if isinstance(source, bytes) else source.stat().st_size) == 0:
        raise ClipRejected("empty file (0 bytes)")
    try:
        with av.open(io.BytesIO(source) if isinstance(source, bytes) else str(source)) as container:
            if not container.streams.audio:
                raise ClipRejected("no audio stream in the file")
            stream = container.streams.audio[0]
            planar = av.AudioResampler(format="fltp")  # keeps rate and channels; any sample format in
            chunks = [f.to_ndarray() for frame in container.decode(stream) for f in planar.resample(frame)]
            chunks += [f.to_ndarray() for f in planar.resample(None)]
            rate = stream.rate
    except (av.error.FFmpegError, UnicodeDecodeError, ValueError) as exc:
        if isinstance(exc, ClipRejected):
            raise
        raise ClipRejected(f"unreadable: not an audio file PyAV can decode ({exc})") from None
    if not chunks or sum(c.shape[1] for c in chunks) == 0:
        raise ClipRejected("empty: the file holds no audio samples")
    return np.concatenate(chunks, axis=1).astype(np.float32, copy=False), rate


def _to_mono_24k(samples: np.ndarray, rate: int) -> np.ndarray:
    """(channels, samples) at ``rate`` -> float32 (samples,) at SAMPLE_RATE."""
    import av

    mono = np.ascontiguousarray(samples.mean(axis=0, dtype=np.float32))  # (samples,)
    if rate == SAMPLE_RATE:
        return mono
    resampler = av.AudioResampler(format="flt", layout="mono", rate=SAMPLE_RATE)
    frame = av.AudioFrame.from_ndarray(mono.reshape(1, -1), format="flt", layout="mono")
    frame.sample_rate = rate
    frames = resampler.resample(frame) + resampler.resample(None)
    return np.concatenate([f.to_ndarray().reshape(-1) for f in frames]).astype(np.float32, copy=False)


def load_clip(source: Path | bytes) -> np.ndarray:
    """A file (its path, or its bytes) decoded, checked for clipping, as float32 mono at 24 kHz; ClipRejected
    says why not."""
    samples, rate = _decode(source)
    # Judged before mixing and resampling, which smooth a clipped plateau below full scale.
    clipped = float(np.mean(np.abs(samples).max(axis=0) >= FULL_SCALE))
    if clipped > MAX_CLIPPED_SHARE:
        raise ClipRejected(f"clipped: {100 * clipped:.1f}% of its samples are at full scale "
                           f"(at most {100 * MAX_CLIPPED_SHARE:.1f}% allowed)")
    return _to_mono_24k(samples, rate)


def trim_clip(pcm: np.ndarray, cut: SilenceCut) -> TrimmedClip:
    """Cut the silence around the speech in ``pcm`` as ``cut`` says; ClipRejected when it is all silence."""
    detector = cut._detector()
    start = leading_silence(pcm, detector)
    if start is None:
        raise ClipRejected(f"silent: no 10 ms block reaches {cut.threshold_dbfs:g} dBFS")
    # The last loud block, found from the end: its end is where the speech stops.
    from_end = leading_silence(pcm[::-1], detector)
    assert from_end is not None  # a loud block exists
    end = len(pcm) - from_end
    pad = round(cut.tail_pad_ms * SAMPLE_RATE / 1000)
    stop = min(len(pcm), end + pad)
    begin = max(0, start - round(cut.lead_pad_ms * SAMPLE_RATE / 1000)) if cut.cut_leading else 0
    return TrimmedClip(pcm[begin:stop], begin / SAMPLE_RATE, (len(pcm) - stop) / SAMPLE_RATE)
