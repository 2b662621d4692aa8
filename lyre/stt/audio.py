"""Audio in for speech-to-text: files of any format, and streamed PCM, as float32 at 16 kHz mono."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from lyre.common import audio_files

if TYPE_CHECKING:
    import av

__all__ = ["SAMPLE_RATE", "AudioError", "AudioTooLong", "PcmResampler", "decode_file"]

SAMPLE_RATE = 16_000  # what Whisper hears


class AudioError(ValueError):
    """Audio that cannot be used; the message says what was wrong."""


class AudioTooLong(AudioError):
    """A file holding more audio than its reader takes (``limit_s`` seconds)."""

    def __init__(self, message: str, limit_s: float) -> None:
        super().__init__(message)
        self.limit_s = limit_s


def decode_file(data: bytes, name: str = "file", max_seconds: float | None = None) -> np.ndarray:
    """Decode an audio file (wav, mp3, flac, ogg, webm, m4a, ...) to float32 16 kHz mono, shape (samples,).

    Decoded frame by frame, and refused (`AudioTooLong`) as soon as it holds more than ``max_seconds``."""
    if not data:
        raise AudioError(f"{name} is empty")
    try:
        return audio_files.decode_audio(data, SAMPLE_RATE, max_seconds)
    except audio_files.AudioTooLong as exc:
        raise AudioTooLong(f"{name} holds more than {exc.limit_s:g} s of audio", exc.limit_s) from None
    except audio_files.NoAudio:
        raise AudioError(f"{name} holds no audio samples") from None
    except audio_files.UnreadableAudio as exc:
        raise AudioError(f"{name} is not an audio file that can be decoded ({exc})") from None


class PcmResampler:
    """Streamed little-endian pcm16 mono at ``rate`` to float32 at 16 kHz, state kept across chunks."""

    def __init__(self, rate: int) -> None:
        if not 8_000 <= rate <= 48_000:
            raise AudioError(f"sample rate must be 8000..48000 Hz, got {rate}")
        self.rate = rate
        import av

        self._av = av
        self._resampler = (
            None if rate == SAMPLE_RATE else av.AudioResampler(format="flt", layout="mono", rate=SAMPLE_RATE)
        )
        self._pts = 0
        self._closed = False

    def push(self, pcm: bytes) -> np.ndarray:
        """Resample the next chunk; returns what is ready, shape (samples,), possibly empty."""
        if len(pcm) % 2:
            raise AudioError(f"pcm16 audio must be a whole number of 2-byte samples, got {len(pcm)} bytes")
        samples = np.frombuffer(pcm, dtype="<i2")
        if self._closed:
            raise AudioError("the audio input is closed")
        if self._resampler is None:
            return samples.astype(np.float32) / 32768.0
        if samples.size == 0:
            return np.zeros(0, np.float32)
        frame = self._av.AudioFrame.from_ndarray(samples.reshape(1, -1), format="s16", layout="mono")
        frame.sample_rate = self.rate
        frame.pts = self._pts
        self._pts += samples.size
        return self._collect(self._resampler.resample(frame))

    def flush(self) -> np.ndarray:
        """What the resampler still holds, at the end of a stream."""
        if self._resampler is None:  # at 16 kHz already, or closed
            return np.zeros(0, np.float32)
        return self._collect(self._resampler.resample(None))

    def close(self) -> None:
        """Free FFmpeg's filter graph (and the threads it holds) now, not when a session's objects are next
        collected; the resampler then passes audio through no more (AudioError)."""
        self._resampler, self._closed = None, True

    @staticmethod
    def _collect(frames: list[av.AudioFrame]) -> np.ndarray:
        if not frames:
            return np.zeros(0, np.float32)
        return np.concatenate([f.to_ndarray().reshape(-1) for f in frames]).astype(np.float32, copy=False)
