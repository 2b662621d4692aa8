"""Streaming encoders for the OpenAI speech API's ``response_format`` values: which formats there are, and a
fresh encoder for each (a `StreamEncoder`, lyre.server.stream_encoder).

Raw PCM and WAV are written here and never load FFmpeg; every compressed
format, G.711 and all resampling go through PyAV (lyre.server.ffmpeg_encoders).
"""

from __future__ import annotations

import struct

import numpy as np

from lyre.server.ffmpeg_encoders import MUXED, G711Encoder, MuxedEncoder
from lyre.server.stream_encoder import StreamEncoder

__all__ = ["FORMATS", "UnsupportedFormat", "make_encoder"]

FORMATS: tuple[str, ...] = ("pcm", "wav", "mp3", "opus", "flac", "aac", "mulaw", "alaw")
DEFAULT_SAMPLE_RATE = 24_000  # Orpheus (SNAC) output

# WAV: PCM s16le mono. While streaming the length is unknown, so the RIFF and
# data chunk sizes hold the largest value; players read until the stream ends.
_WAV_FORMAT_PCM = 1
_WAV_BITS_PER_SAMPLE = 16
_WAV_UNKNOWN_SIZE = 0xFFFFFFFF
_WAV_HEADER = struct.Struct("<4sI4s4sIHHIIHH4sI")  # 44 bytes


class UnsupportedFormat(ValueError):
    """The requested response format is not one of :data:`FORMATS`."""

    def __init__(self, fmt: str) -> None:
        super().__init__(f"unsupported audio format {fmt!r}; choose one of {', '.join(FORMATS)}")
        self.format = fmt


class _PcmEncoder(StreamEncoder):
    """Raw s16le samples, no header."""

    content_type = "audio/pcm"

    def __init__(self, input_rate: int) -> None:
        super().__init__(input_rate)
        self.sample_rate = input_rate

    def _encode(self, pcm: np.ndarray) -> bytes:
        return pcm.astype("<i2", copy=False).tobytes()

    def _flush(self) -> bytes:
        return b""


class _WavEncoder(_PcmEncoder):
    """A 44-byte WAV header with unknown sizes, then raw s16le samples."""

    content_type = "audio/wav"

    def __init__(self, input_rate: int) -> None:
        super().__init__(input_rate)
        self._header_sent = False

    def _header(self) -> bytes:
        if self._header_sent:
            return b""
        self._header_sent = True
        block_align = _WAV_BITS_PER_SAMPLE // 8  # one channel
        return _WAV_HEADER.pack(
            b"RIFF", _WAV_UNKNOWN_SIZE, b"WAVE",
            b"fmt ", 16, _WAV_FORMAT_PCM, 1, self.sample_rate,
            self.sample_rate * block_align, block_align, _WAV_BITS_PER_SAMPLE,
            b"data", _WAV_UNKNOWN_SIZE,
        )  # fmt: skip

    def _encode(self, pcm: np.ndarray) -> bytes:
        return self._header() + super()._encode(pcm)

    def _flush(self) -> bytes:
        return self._header()  # an empty stream is still a valid (empty) WAV

    def whole(self, data: bytes) -> bytes:
        """The finished file, its sizes known now."""
        size = len(data) - _WAV_HEADER.size
        return data[:4] + struct.pack("<I", size + 36) + data[8:40] + struct.pack("<I", size) + data[44:]


def make_encoder(fmt: str, sample_rate: int = DEFAULT_SAMPLE_RATE) -> StreamEncoder:
    """A fresh encoder for ``fmt`` (one of :data:`FORMATS`); input is int16 mono at ``sample_rate``.

    Output keeps ``sample_rate`` where the codec takes it (else PyAV
    resamples to the codec's highest rate), except ``mulaw``/``alaw``, which
    are resampled to 8 kHz telephony audio.
    Raises :class:`UnsupportedFormat` for any other ``fmt``.
    """
    if sample_rate <= 0:
        raise ValueError(f"sample_rate must be positive, got {sample_rate}")
    if fmt == "pcm":
        return _PcmEncoder(sample_rate)
    if fmt == "wav":
        return _WavEncoder(sample_rate)
    if fmt == "mulaw":
        return G711Encoder(sample_rate, "pcm_mulaw", "audio/basic")
    if fmt == "alaw":
        return G711Encoder(sample_rate, "pcm_alaw", "audio/x-alaw-basic")
    if fmt in MUXED:
        return MuxedEncoder(sample_rate, MUXED[fmt])
    raise UnsupportedFormat(fmt)
