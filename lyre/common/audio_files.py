"""Audio files of any format PyAV reads, decoded frame by frame to float32 mono at one rate, stopped as soon as
they hold more audio than their reader takes.

A compressed file can hold far more audio than its size suggests: 100 KB of FLAC silence is ten minutes, and
a megabyte of Opus silence over an hour. Decoded whole before it is measured, such a file is a memory bomb.
So the audio is counted as the decoder hands it out, and decoding stops at the first frame past the limit:
no more than the limit (and one group of frames) is ever held.
"""

from __future__ import annotations

import io
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import av

__all__ = ["AudioTooLong", "NoAudio", "UnreadableAudio", "decode_audio"]

# Frames are mixed and resampled a group at a time: Opus hands out 20 ms frames, and the per-call cost of
# PyAV and numpy on each one alone was most of the work (10 minutes of Opus: 2.2 s of CPU against 0.8 s).
_GROUP_SECONDS = 1.0


class UnreadableAudio(ValueError):
    """Bytes that are not an audio file PyAV can decode; the message is the decoder's reason."""


class NoAudio(ValueError):
    """A file with no audio in it: empty, without an audio stream, or without samples."""


class AudioTooLong(ValueError):
    """A file holding more than ``limit_s`` seconds of audio (decoding stopped there)."""

    def __init__(self, limit_s: float) -> None:
        super().__init__(f"more than {limit_s:g} s of audio")
        self.limit_s = limit_s


def decode_audio(source: bytes | Path, rate: int, max_seconds: float | None = None,
                 watch: Callable[[np.ndarray], None] | None = None) -> np.ndarray:
    """The first audio stream of ``source`` (a file's bytes or path) as float32 mono at ``rate``, shape (samples,).

    Channels are averaged. ``watch`` sees every sample first, as float32 (channels, samples) at the file's own
    rate (a clipping check must look before mixing smooths it). AudioTooLong as soon as more than
    ``max_seconds`` have been decoded (None: no limit), NoAudio or UnreadableAudio otherwise.
    """
    import av

    if (len(source) if isinstance(source, bytes) else source.stat().st_size) == 0:
        raise NoAudio("the file is empty (0 bytes)")
    chunks: list[np.ndarray] = []
    try:
        with av.open(io.BytesIO(source) if isinstance(source, bytes) else str(source),
                     metadata_errors="ignore") as container:
            if not container.streams.audio:
                raise NoAudio("the file has no audio stream")
            mixer = _Mixer(rate, watch)
            for group in _groups(_counted(container.decode(container.streams.audio[0]), max_seconds)):
                chunks += mixer.mix(group)
            chunks += mixer.flush()
    except (NoAudio, AudioTooLong):
        raise
    except (av.error.FFmpegError, UnicodeDecodeError, ValueError) as exc:  # ValueError: a frame changing format
        raise UnreadableAudio(str(exc)) from None
    if not chunks or sum(c.size for c in chunks) == 0:
        raise NoAudio("the file holds no audio samples")
    return np.concatenate(chunks)


def _counted(frames: Iterator[av.AudioFrame], max_seconds: float | None) -> Iterator[av.AudioFrame]:
    """``frames`` as decoded, AudioTooLong at the first that takes them past ``max_seconds``."""
    seconds = 0.0
    for frame in frames:
        seconds += frame.samples / frame.sample_rate
        if max_seconds is not None and seconds > max_seconds:
            raise AudioTooLong(max_seconds)
        yield frame


def _groups(frames: Iterator[av.AudioFrame]) -> Iterator[av.AudioFrame]:
    """``frames`` joined into frames of about `_GROUP_SECONDS` each."""
    import av

    fifo = av.AudioFifo()
    for frame in frames:
        frame.pts = None  # the fifo checks timestamps run on; a file's need not, and only the samples matter
        fifo.write(frame)
        if fifo.samples >= _GROUP_SECONDS * frame.sample_rate:
            yield fifo.read()
    if fifo.samples:
        yield fifo.read()


class _Mixer:
    """Decoded frames to float32 mono at ``rate``: channels averaged at the file's rate, then resampled."""

    def __init__(self, rate: int, watch: Callable[[np.ndarray], None] | None) -> None:
        import av

        self._av = av
        self._rate = rate
        self._watch = watch
        self._planar = av.AudioResampler(format="fltp")  # any sample format in, rate and channels kept
        self._resampler: av.AudioResampler | None = None  # made for the first frame not already at ``rate``

    def mix(self, frame: av.AudioFrame) -> list[np.ndarray]:
        out = []
        for planar in self._planar.resample(frame):
            channels = planar.to_ndarray()  # (channels, samples)
            if self._watch is not None:
                self._watch(channels)
            mono = channels[0].copy() if channels.shape[0] == 1 else channels.mean(axis=0, dtype=np.float32)
            if planar.sample_rate == self._rate and self._resampler is None:
                out.append(mono)
                continue
            if self._resampler is None:
                self._resampler = self._av.AudioResampler(format="flt", layout="mono", rate=self._rate)
            single = self._av.AudioFrame.from_ndarray(mono.reshape(1, -1), format="flt", layout="mono")
            single.sample_rate = planar.sample_rate
            out += [f.to_ndarray().reshape(-1) for f in self._resampler.resample(single)]
        return out

    def flush(self) -> list[np.ndarray]:
        """What the resampler still holds at the end of the file."""
        if self._resampler is None:
            return []
        return [f.to_ndarray().reshape(-1) for f in self._resampler.resample(None)]
