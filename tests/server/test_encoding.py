"""Streaming encoders: every format decodes back (with PyAV) to the tone that went in."""

from __future__ import annotations

import gc
import io
import itertools
import struct
from collections.abc import Iterable

import av
import numpy as np
import pytest

from lyre.server.encoding import FORMATS, UnsupportedFormat, make_encoder
from lyre.server.stream_encoder import StreamEncoder

RATE = 24_000
TONE_HZ = 440.0
TONE_S = 1.5

CHUNK = 2048  # 85 ms, a typical decoder chunk
ODD_SIZES = (1, 479, 1000, 3333, 17, 2048)
FREQ_TOLERANCE_HZ = 3.0

# Decoded length may exceed the input by the encoder's priming delay plus one
# frame of end padding: a live MP3/ADTS stream has nowhere to say how much to
# trim (MP3's LAME header is rewritten by seeking back, which a stream can't).
MP3_DELAY = 576 + 529  # LAME's encoder delay + the decoder's
AAC_DELAY = 1024
EXTRA_SAMPLES = {"mp3": MP3_DELAY + 576, "aac": AAC_DELAY + 1024}
DURATION_SLACK_S = 0.002
# Audio an encoder may still hold when the input stops, about a frame plus
# look-ahead (FLAC's blocks are 96 ms); Ogg's default 1 s pages would fail this.
MAX_LAG_S = 0.1  # resampler rounding for the 8 kHz formats

CONTENT_TYPES = {
    "pcm": "audio/pcm",
    "wav": "audio/wav",
    "mp3": "audio/mpeg",
    "opus": "audio/ogg",
    "flac": "audio/flac",
    "aac": "audio/aac",
    "mulaw": "audio/basic",
    "alaw": "audio/x-alaw-basic",
}
OUTPUT_RATES = {"mulaw": 8_000, "alaw": 8_000}
OPUS_DECODE_RATE = 48_000  # Ogg Opus always decodes at 48 kHz; OpusHead keeps the input rate


def tone(seconds: float, rate: int) -> np.ndarray:
    """A 440 Hz sine at 0.3 of full scale, int16."""
    t = np.arange(round(seconds * rate)) / rate
    return (0.3 * 32767 * np.sin(2 * np.pi * TONE_HZ * t)).astype(np.int16)


TONE = tone(TONE_S, RATE)


def chunks(pcm: np.ndarray, sizes: Iterable[int]) -> list[np.ndarray]:
    """Consecutive pieces of ``pcm`` whose sizes cycle through ``sizes``."""
    ends = np.cumsum(list(itertools.islice(itertools.cycle(sizes), pcm.size)))
    return np.split(pcm, ends[ends < pcm.size])


def encode(fmt: str, parts: list[np.ndarray]) -> tuple[StreamEncoder, list[bytes], bytes]:
    """Feed ``parts``; returns the encoder, each feed's output, and finish()'s."""
    encoder = make_encoder(fmt)
    fed = [encoder.feed(part) for part in parts]
    return encoder, fed, encoder.finish()


def decode(fmt: str, data: bytes) -> tuple[np.ndarray, int]:
    """Samples as float in [-1, 1] and their sample rate."""
    if fmt == "pcm":
        return np.frombuffer(data, "<i2") / 32768.0, RATE
    kwargs = {}
    if fmt in ("mulaw", "alaw"):  # raw G.711: the demuxer must be told what it is
        kwargs = {"format": fmt, "options": {"sample_rate": "8000", "ch_layout": "mono"}}
    with av.open(io.BytesIO(data), **kwargs) as container:
        rate = container.streams.audio[0].rate
        frames = [frame.to_ndarray() for frame in container.decode(audio=0)]  # each (1, n)
    samples = np.concatenate(frames, axis=1)[0]
    if samples.dtype == np.int16:
        samples = samples / 32768.0
    return samples.astype(np.float64), rate


def dominant_hz(samples: np.ndarray, rate: int) -> float:
    spectrum = np.abs(np.fft.rfft(samples * np.hanning(samples.size)))
    return float(np.argmax(spectrum)) * rate / samples.size


@pytest.mark.parametrize("sizes", [(CHUNK,), ODD_SIZES], ids=["2048", "odd"])
@pytest.mark.parametrize("fmt", FORMATS)
def test_round_trip_tone(fmt: str, sizes: tuple[int, ...]) -> None:
    encoder, fed, tail = encode(fmt, chunks(TONE, sizes))
    samples, rate = decode(fmt, b"".join(fed) + tail)

    out_rate = OUTPUT_RATES.get(fmt, RATE)
    assert encoder.sample_rate == out_rate
    assert encoder.content_type == CONTENT_TYPES[fmt]
    expected_rate = OPUS_DECODE_RATE if fmt == "opus" else out_rate
    assert rate == expected_rate
    extra_s = EXTRA_SAMPLES.get(fmt, 0) / RATE
    assert TONE_S - DURATION_SLACK_S <= samples.size / rate <= TONE_S + extra_s + DURATION_SLACK_S
    assert dominant_hz(samples, rate) == pytest.approx(TONE_HZ, abs=FREQ_TOLERANCE_HZ)
    assert np.max(np.abs(samples)) == pytest.approx(0.3, abs=0.05)


@pytest.mark.parametrize("fmt", FORMATS)
def test_bytes_flow_before_finish(fmt: str) -> None:
    _, fed, _ = encode(fmt, chunks(TONE, (CHUNK,)))
    # FLAC needs one 2304-sample block, so its first bytes come with the second chunk.
    assert next(i for i, out in enumerate(fed) if out) <= 1
    # And audio keeps flowing: what came out before finish() plays nearly all of it.
    samples, rate = decode(fmt, b"".join(fed))
    assert samples.size / rate >= TONE_S - MAX_LAG_S


@pytest.mark.parametrize("fmt", ["pcm", "wav"])
def test_pcm_and_wav_are_bit_exact(fmt: str) -> None:
    _, fed, tail = encode(fmt, chunks(TONE, ODD_SIZES))
    data = b"".join(fed) + tail
    header = 44 if fmt == "wav" else 0
    assert len(data) == header + 2 * TONE.size
    np.testing.assert_array_equal(np.frombuffer(data[header:], "<i2"), TONE)


def test_wav_header() -> None:
    _, fed, tail = encode("wav", [TONE[:100]])
    assert fed[0][44:] == TONE[:100].tobytes() and tail == b""
    fields = struct.unpack("<4sI4s4sIHHIIHH4sI", fed[0][:44])
    riff, riff_size, wave, fmt_id, fmt_size, *fmt_fields, data_id, data_size = fields
    assert (riff, wave, fmt_id, data_id) == (b"RIFF", b"WAVE", b"fmt ", b"data")
    assert riff_size == data_size == 0xFFFFFFFF  # unknown length while streaming
    pcm, channels, rate, byte_rate, block_align, bits = fmt_fields
    assert (fmt_size, pcm, channels, bits) == (16, 1, 1, 16)  # 16-byte PCM fmt chunk, mono s16
    assert (rate, byte_rate, block_align) == (RATE, 2 * RATE, 2)


def test_empty_wav_is_still_a_header() -> None:
    encoder = make_encoder("wav")
    assert encoder.feed(np.zeros(0, np.int16)) == b""
    assert len(encoder.finish()) == 44


def test_opus_header_keeps_input_rate() -> None:
    _, fed, tail = encode("opus", chunks(TONE, (CHUNK,)))
    data = b"".join(fed) + tail
    at = data.index(b"OpusHead")
    assert struct.unpack_from("<I", data, at + 12)[0] == RATE


def test_opus_at_a_rate_it_cannot_take_is_resampled() -> None:
    encoder = make_encoder("opus", sample_rate=22_050)
    assert encoder.sample_rate == 48_000
    data = encoder.feed(tone(1.0, 22_050)) + encoder.finish()
    samples, rate = decode("opus", data)
    assert samples.size / rate == pytest.approx(1.0, abs=0.01)
    assert dominant_hz(samples, rate) == pytest.approx(TONE_HZ, abs=FREQ_TOLERANCE_HZ)


@pytest.mark.parametrize("fmt", ["mulaw", "alaw"])
def test_telephony_resampling_is_seamless_across_chunks(fmt: str) -> None:
    # The resampler keeps its history between chunks, so chunking changes nothing.
    _, fed, tail = encode(fmt, chunks(TONE, ODD_SIZES))
    _, whole, whole_tail = encode(fmt, [TONE])
    assert b"".join(fed) + tail == b"".join(whole) + whole_tail


def test_unsupported_format() -> None:
    with pytest.raises(UnsupportedFormat) as info:
        make_encoder("ogg-vorbis")
    assert isinstance(info.value, ValueError)
    assert "ogg-vorbis" in str(info.value)
    assert all(fmt in str(info.value) for fmt in FORMATS)


@pytest.mark.parametrize(
    "bad",
    [TONE.astype(np.float32), TONE.reshape(-1, 2), TONE.astype(">i2"), list(TONE[:10])],
    ids=["float", "2-D", "big-endian", "list"],
)
@pytest.mark.parametrize("fmt", ["pcm", "mp3"])
def test_bad_input_is_rejected(fmt: str, bad: object) -> None:
    with pytest.raises(ValueError):
        make_encoder(fmt).feed(bad)  # type: ignore[arg-type]


@pytest.mark.parametrize("fmt", ["pcm", "mulaw", "flac"])
def test_strided_input_is_accepted(fmt: str) -> None:
    _, fed, tail = encode(fmt, [TONE[::2], TONE[1::2]])
    assert b"".join(fed) + tail


def test_sample_rate_must_be_positive() -> None:
    with pytest.raises(ValueError, match="sample_rate"):
        make_encoder("wav", sample_rate=0)


@pytest.mark.parametrize("fmt", FORMATS)
def test_no_feed_after_finish(fmt: str) -> None:
    encoder = make_encoder(fmt)
    encoder.feed(TONE[:CHUNK])
    encoder.finish()
    with pytest.raises(RuntimeError):
        encoder.feed(TONE[:CHUNK])
    with pytest.raises(RuntimeError):
        encoder.finish()


def test_nothing_on_stderr(capfd: pytest.CaptureFixture[str]) -> None:
    for fmt in FORMATS:
        encode(fmt, chunks(TONE, (CHUNK,)))
    assert capfd.readouterr().err == ""


@pytest.mark.parametrize("fmt", FORMATS)
def test_abandoned_encoder_is_collected_quietly(fmt: str) -> None:
    encoder = make_encoder(fmt)
    encoder.feed(TONE[: 4 * CHUNK])
    del encoder
    gc.collect()  # an exception in a finaliser would surface as a warning (an error here)
