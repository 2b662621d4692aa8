"""Streaming encoders for the OpenAI speech API's ``response_format`` values.

Each encoder takes int16 mono PCM chunk by chunk and returns whatever encoded
bytes are ready, so an HTTP response can stream audio while it is generated.
Every compressed format and all resampling go through PyAV (FFmpeg).

PyAV routes FFmpeg's log to a no-op callback unless someone calls
``av.logging.set_level``, so encoding writes nothing to stderr. With logging
turned on, the settings below (explicit bit rates, container-only options)
leave one warning: FLAC cannot rewrite its header on a stream it cannot seek.

An encoder abandoned without :meth:`StreamEncoder.finish` holds no OS
resources, only memory: PyAV closes its container when it is garbage
collected (the trailer lands in a buffer nobody reads).
"""

from __future__ import annotations

import struct
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from fractions import Fraction
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import av

__all__ = ["FORMATS", "StreamEncoder", "UnsupportedFormat", "make_encoder"]

FORMATS: tuple[str, ...] = ("pcm", "wav", "mp3", "opus", "flac", "aac", "mulaw", "alaw")


def _av():  # type: ignore[no-untyped-def]
    """PyAV, imported by the first encoder that needs FFmpeg: pcm and wav never load it."""
    import av

    return av

DEFAULT_SAMPLE_RATE = 24_000  # Orpheus (SNAC) output
TELEPHONY_SAMPLE_RATE = 8_000  # G.711, what Twilio-style media streams carry

# WAV: PCM s16le mono. While streaming the length is unknown, so the RIFF and
# data chunk sizes hold the largest value; players read until the stream ends.
_WAV_FORMAT_PCM = 1
_WAV_BITS_PER_SAMPLE = 16
_WAV_UNKNOWN_SIZE = 0xFFFFFFFF
_WAV_HEADER = struct.Struct("<4sI4s4sIHHIIHH4sI")  # 44 bytes

# Bit rates for 24 kHz mono speech; set explicitly because libopus logs a
# warning when it has to pick one itself.
_MP3_BIT_RATE = 64_000
_OPUS_BIT_RATE = 32_000
_AAC_BIT_RATE = 64_000

# The Ogg muxer holds packets until a page spans this long (default 1 s); one
# 20 ms Opus packet per page lets each chunk's audio out at once, for about
# 1.4 kB/s of page headers.
_OGG_PAGE_DURATION_US = 20_000
# The FLAC muxer reserves 8 KiB of padding to rewrite its header on close,
# which a stream that cannot seek back never does.
_FLAC_HEADER_PADDING = 0


class UnsupportedFormat(ValueError):
    """The requested response format is not one of :data:`FORMATS`."""

    def __init__(self, fmt: str) -> None:
        super().__init__(f"unsupported audio format {fmt!r}; choose one of {', '.join(FORMATS)}")
        self.format = fmt


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

    def _frame(self, pcm: np.ndarray) -> av.AudioFrame:
        """Wrap ``pcm`` as a PyAV frame stamped with its position in the stream."""
        planar = np.ascontiguousarray(pcm).reshape(1, -1)  # (1, n): one channel plane
        frame = _av().AudioFrame.from_ndarray(planar, format="s16", layout="mono")
        frame.sample_rate = self.input_rate
        frame.pts = self._samples_in
        frame.time_base = Fraction(1, self.input_rate)
        return frame


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


class _G711Encoder(StreamEncoder):
    """Resample to 8 kHz, then mu-law or A-law bytes with no container."""

    def __init__(self, input_rate: int, codec: str, content_type: str) -> None:
        super().__init__(input_rate)
        self.content_type = content_type
        self.sample_rate = TELEPHONY_SAMPLE_RATE
        # One resampler for the whole stream: its filter history carries over
        # chunk edges, so there are no clicks where chunks meet.
        av = _av()
        self._resampler = av.AudioResampler(format="s16", layout="mono", rate=self.sample_rate)
        self._codec = av.CodecContext.create(codec, "w")
        self._codec.sample_rate = self.sample_rate
        self._codec.layout = "mono"
        self._codec.format = "s16"

    def _encode_frames(self, frames: list[av.AudioFrame | None]) -> bytes:
        return b"".join(bytes(packet) for frame in frames for packet in self._codec.encode(frame))

    def _encode(self, pcm: np.ndarray) -> bytes:
        return self._encode_frames(self._resampler.resample(self._frame(pcm)))

    def _flush(self) -> bytes:
        return self._encode_frames([*self._resampler.resample(None), None])


class _ByteSink:
    """A write-only file for PyAV; the encoder drains it after every call.

    No ``seek``: muxers then treat the output as a live stream and never try
    to rewrite a header.
    """

    def __init__(self) -> None:
        self._buffer = bytearray()

    def write(self, data: bytes) -> int:
        self._buffer += data
        return len(data)

    def drain(self) -> bytes:
        out = bytes(self._buffer)
        self._buffer.clear()
        return out


@dataclass(frozen=True)
class _MuxSpec:
    """How one compressed format is produced: container, codec and settings."""

    content_type: str
    container: str
    codec: str  # the encoders PyAV's wheels bundle (FFmpeg's own Opus encoder is experimental)
    bit_rate: int | None = None
    container_options: dict[str, str] = field(default_factory=dict)


_MUXED: dict[str, _MuxSpec] = {
    "mp3": _MuxSpec("audio/mpeg", "mp3", "libmp3lame", _MP3_BIT_RATE),
    "opus": _MuxSpec(
        "audio/ogg", "ogg", "libopus", _OPUS_BIT_RATE, {"page_duration": str(_OGG_PAGE_DURATION_US)}
    ),
    "flac": _MuxSpec(
        "audio/flac", "flac", "flac", None, {"metadata_header_padding": str(_FLAC_HEADER_PADDING)}
    ),
    "aac": _MuxSpec("audio/aac", "adts", "aac", _AAC_BIT_RATE),  # ADTS: AAC frames with headers
}


class _MuxedEncoder(StreamEncoder):
    """A codec inside a container, written into memory as packets come out."""

    def __init__(self, input_rate: int, spec: _MuxSpec) -> None:
        super().__init__(input_rate)
        self.content_type = spec.content_type
        self.sample_rate = _output_rate(spec.codec, input_rate)
        self._sink = _ByteSink()
        self._container = _av().open(
            self._sink, mode="w", format=spec.container, container_options=spec.container_options
        )
        # PyAV converts sample format and rate, and regroups samples into the
        # codec's frame size, inside encode().
        self._stream = self._container.add_stream(spec.codec, rate=self.sample_rate, layout="mono")
        if spec.bit_rate is not None:
            self._stream.bit_rate = spec.bit_rate

    def _encode(self, pcm: np.ndarray) -> bytes:
        self._container.mux(self._stream.encode(self._frame(pcm)))
        return self._sink.drain()

    def _flush(self) -> bytes:
        self._container.mux(self._stream.encode(None))
        self._container.close()
        return self._sink.drain()


def _output_rate(codec: str, input_rate: int) -> int:
    """Keep the input rate when the codec takes it, else use its highest rate."""
    rates = _av().codec.Codec(codec, "w").audio_rates  # None: any rate
    if not rates or input_rate in rates:
        return input_rate
    return max(rates)


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
        return _G711Encoder(sample_rate, "pcm_mulaw", "audio/basic")
    if fmt == "alaw":
        return _G711Encoder(sample_rate, "pcm_alaw", "audio/x-alaw-basic")
    if fmt in _MUXED:
        return _MuxedEncoder(sample_rate, _MUXED[fmt])
    raise UnsupportedFormat(fmt)
