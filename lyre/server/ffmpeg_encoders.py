"""The response formats encoded through PyAV (FFmpeg): G.711 for telephony, and the compressed formats, each a
codec inside a container. All resampling happens here too.

PyAV routes FFmpeg's log to a no-op callback unless someone calls
``av.logging.set_level``, so encoding writes nothing to stderr. With logging
turned on, the settings below (explicit bit rates, container-only options)
leave one warning: FLAC cannot rewrite its header on a stream it cannot seek.

An encoder abandoned without :meth:`StreamEncoder.finish` holds no OS
resources, only memory: PyAV closes its container when it is garbage
collected (the trailer lands in a buffer nobody reads).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from fractions import Fraction
from typing import TYPE_CHECKING

import numpy as np

from lyre.server.stream_encoder import StreamEncoder

if TYPE_CHECKING:
    import av

__all__ = ["MUXED", "G711Encoder", "MuxSpec", "MuxedEncoder"]

TELEPHONY_SAMPLE_RATE = 8_000  # G.711, what Twilio-style media streams carry

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


def _av():  # type: ignore[no-untyped-def]
    """PyAV, imported by the first encoder that needs FFmpeg: pcm and wav never load it."""
    import av

    return av


class _FfmpegEncoder(StreamEncoder):
    """An encoder that hands PyAV frames of its input."""

    def _frame(self, pcm: np.ndarray) -> av.AudioFrame:
        """Wrap ``pcm`` as a PyAV frame stamped with its position in the stream."""
        planar = np.ascontiguousarray(pcm).reshape(1, -1)  # (1, n): one channel plane
        frame = _av().AudioFrame.from_ndarray(planar, format="s16", layout="mono")
        frame.sample_rate = self.input_rate
        frame.pts = self._samples_in
        frame.time_base = Fraction(1, self.input_rate)
        return frame


class G711Encoder(_FfmpegEncoder):
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
class MuxSpec:
    """How one compressed format is produced: container, codec and settings."""

    content_type: str
    container: str
    codec: str  # the encoders PyAV's wheels bundle (FFmpeg's own Opus encoder is experimental)
    bit_rate: int | None = None
    container_options: dict[str, str] = field(default_factory=dict)


MUXED: dict[str, MuxSpec] = {
    "mp3": MuxSpec("audio/mpeg", "mp3", "libmp3lame", _MP3_BIT_RATE),
    "opus": MuxSpec(
        "audio/ogg", "ogg", "libopus", _OPUS_BIT_RATE, {"page_duration": str(_OGG_PAGE_DURATION_US)}
    ),
    "flac": MuxSpec(
        "audio/flac", "flac", "flac", None, {"metadata_header_padding": str(_FLAC_HEADER_PADDING)}
    ),
    "aac": MuxSpec("audio/aac", "adts", "aac", _AAC_BIT_RATE),  # ADTS: AAC frames with headers
}


class MuxedEncoder(_FfmpegEncoder):
    """A codec inside a container, written into memory as packets come out."""

    def __init__(self, input_rate: int, spec: MuxSpec) -> None:
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
