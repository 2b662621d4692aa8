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
from pathlib import Path

import numpy as np

from lyre.common.audio_files import AudioTooLong, NoAudio, UnreadableAudio, decode_audio
from lyre.orpheus import SAMPLE_RATE
from lyre.tts.trim import TrimConfig, leading_silence

__all__ = ["ClipRejected", "ClipTooLong", "SilenceCut", "TrimmedClip", "load_clip", "trim_clip"]

FULL_SCALE = 0.999  # a sample at or past this is at full scale (int16 32767 is 0.99997)
MAX_CLIPPED_SHARE = 0.001  # a clip with more of its samples at full scale is refused as clipped


class ClipRejected(ValueError):
    """An audio file training cannot use; the message is the reason."""


class ClipTooLong(ClipRejected):
    """A file holding more than ``limit_s`` seconds of audio (decoding stopped there)."""

    def __init__(self, limit_s: float) -> None:
        super().__init__(f"too long: more than {limit_s:g} s of audio")
        self.limit_s = limit_s


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


class _ClippingCount:
    """Sample instants at full scale on any channel, counted as the decoder hands them out."""

    def __init__(self) -> None:
        self.clipped = 0
        self.samples = 0

    def __call__(self, channels: np.ndarray) -> None:  # (channels, samples) at the file's own rate
        self.clipped += int(np.count_nonzero(np.abs(channels).max(axis=0) >= FULL_SCALE))
        self.samples += channels.shape[1]

    @property
    def share(self) -> float:
        return self.clipped / self.samples if self.samples else 0.0


def load_clip(source: Path | bytes, max_seconds: float | None = None) -> np.ndarray:
    """A file (its path, or its bytes) decoded, checked for clipping, as float32 mono at 24 kHz; ClipRejected
    says why not, without decoding past ``max_seconds`` of audio (None: no limit)."""
    count = _ClippingCount()  # judged before mixing and resampling, which smooth a clipped plateau
    try:
        pcm = decode_audio(source, SAMPLE_RATE, max_seconds, watch=count)
    except AudioTooLong as exc:
        raise ClipTooLong(exc.limit_s) from None
    except NoAudio as exc:
        raise ClipRejected(f"empty: {exc}") from None
    except UnreadableAudio as exc:
        raise ClipRejected(f"unreadable: not an audio file PyAV can decode ({exc})") from None
    if count.share > MAX_CLIPPED_SHARE:
        raise ClipRejected(f"clipped: {100 * count.share:.1f}% of its samples are at full scale "
                           f"(at most {100 * MAX_CLIPPED_SHARE:.1f}% allowed)")
    return pcm


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
