"""Audio in for speech-to-text: files decoded to 16 kHz, streamed pcm16 resampled."""

from __future__ import annotations

import io
import time
import wave

import av
import numpy as np
import pytest
from bombs import silence_bomb
from speech import ESPEAK_RATE, SENTENCES, speak, speak_pcm16, speak_wav

from lyre.stt import SAMPLE_RATE, AudioError, AudioTooLong, PcmResampler, decode_file

SENTENCE = SENTENCES[10]  # the longest: about 5.7 s


def _espeak_samples() -> np.ndarray:
    """The sentence as int16 at espeak-ng's rate, shape (samples,)."""
    with wave.open(io.BytesIO(speak_wav(SENTENCE))) as spoken:
        return np.frombuffer(spoken.readframes(spoken.getnframes()), dtype="<i2")


def _encode(container: str, codec: str, samples: np.ndarray, rate: int, layout: str = "mono") -> bytes:
    """An audio file of ``samples`` (int16, shape (channels, n)) written by PyAV."""
    buffer = io.BytesIO()
    with av.open(buffer, "w", format=container) as out:
        stream = out.add_stream(codec, rate=rate, layout=layout)
        frame = av.AudioFrame.from_ndarray(np.ascontiguousarray(samples.reshape(1, -1)), format="s16", layout=layout)
        frame.sample_rate = rate
        for packet in [*stream.encode(frame), *stream.encode(None)]:
            out.mux(packet)
    return buffer.getvalue()


@pytest.mark.parametrize(("container", "codec"), [("wav", "pcm_s16le"), ("mp3", "libmp3lame"), ("flac", "flac")])
def test_decode_file_formats_to_16khz(container: str, codec: str) -> None:
    samples = _espeak_samples()
    audio = decode_file(_encode(container, codec, samples, ESPEAK_RATE), f"speech.{container}")
    assert audio.dtype == np.float32 and audio.ndim == 1
    assert audio.size == pytest.approx(samples.size * SAMPLE_RATE / ESPEAK_RATE, rel=0.01)
    assert 0.05 < np.abs(audio).max() <= 1.0


def test_decode_file_mixes_stereo_to_mono() -> None:
    mono = _espeak_samples()
    interleaved = np.stack([mono, mono], axis=1)  # (n, 2): packed s16 is interleaved
    data = _encode("wav", "pcm_s16le", interleaved, ESPEAK_RATE, layout="stereo")
    audio = decode_file(data)
    assert audio.size == pytest.approx(mono.size * SAMPLE_RATE / ESPEAK_RATE, rel=0.01)
    np.testing.assert_allclose(audio, decode_file(speak_wav(SENTENCE)), atol=1e-3)


def test_decode_file_matches_the_spoken_audio() -> None:
    decoded = decode_file(speak_wav(SENTENCE))
    reference = np.asarray(speak(SENTENCE, SAMPLE_RATE))
    n = min(decoded.size, reference.size)
    assert abs(decoded.size - reference.size) <= 2
    assert np.corrcoef(decoded[:n], reference[:n])[0, 1] > 0.99


def test_non_audio_bytes_are_rejected_by_name() -> None:
    with pytest.raises(AudioError, match=r"notes\.txt is not an audio file"):
        decode_file(b"these are meeting notes, not a recording\n" * 40, "notes.txt")


def test_empty_bytes_are_rejected() -> None:
    with pytest.raises(AudioError, match=r"upload\.wav is empty"):
        decode_file(b"", "upload.wav")


def test_a_file_without_samples_is_rejected() -> None:
    buffer = io.BytesIO()
    with wave.open(buffer, "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(2)
        out.setframerate(SAMPLE_RATE)
    with pytest.raises(AudioError, match="holds no audio samples"):
        decode_file(buffer.getvalue(), "silence.wav")


@pytest.mark.parametrize(("codec", "container"), [("flac", "flac"), ("libopus", "ogg")])
def test_decoding_stops_at_the_limit_of_a_file_holding_more(codec: str, container: str) -> None:
    bomb = silence_bomb(codec, container, 3600)  # an hour of silence in under 1 MB
    start = time.process_time()
    with pytest.raises(AudioTooLong, match=r"bomb\.audio holds more than 60 s of audio") as too_long:
        decode_file(bomb, "bomb.audio", max_seconds=60)
    assert too_long.value.limit_s == 60
    assert time.process_time() - start < 1.0  # the hour, decoded, takes seconds
    within = decode_file(silence_bomb(codec, container, 30), max_seconds=60)
    assert within.size == pytest.approx(30 * SAMPLE_RATE, rel=0.02) and not within.any()


def _stream(resampler: PcmResampler, pcm: bytes, sizes: list[int]) -> np.ndarray:
    out, at, i = [], 0, 0
    while at < len(pcm):
        size = sizes[i % len(sizes)]
        out.append(resampler.push(pcm[at:at + size]))
        at += size
        i += 1
    out.append(resampler.flush())
    return np.concatenate(out)


@pytest.mark.parametrize("sizes", [[1920], [2, 4094, 638, 1920, 10]], ids=["40ms", "irregular"])
def test_pcm_resampler_chunked_matches_one_shot(sizes: list[int]) -> None:
    pcm = speak_pcm16(SENTENCE, 24_000)
    one_shot = _stream(PcmResampler(24_000), pcm, [len(pcm)])
    chunked = _stream(PcmResampler(24_000), pcm, sizes)
    assert one_shot.dtype == chunked.dtype == np.float32
    assert abs(one_shot.size - len(pcm) // 2 * 2 / 3) <= 2
    assert chunked.size == one_shot.size
    np.testing.assert_allclose(chunked, one_shot, atol=2e-3)


def test_pcm_resampler_is_close_to_espeak_at_16khz() -> None:
    resampled = _stream(PcmResampler(24_000), speak_pcm16(SENTENCE, 24_000), [1920])
    reference = np.asarray(speak(SENTENCE, SAMPLE_RATE))
    n = min(resampled.size, reference.size)
    assert abs(resampled.size - reference.size) <= 2
    assert np.corrcoef(resampled[:n], reference[:n])[0, 1] > 0.99


def test_pcm_resampler_at_16khz_only_converts() -> None:
    pcm = np.array([0, 16384, -32768, 32767], dtype="<i2").tobytes()
    resampler = PcmResampler(SAMPLE_RATE)
    np.testing.assert_array_equal(resampler.push(pcm), np.array([0, 0.5, -1, 32767 / 32768], np.float32))
    assert resampler.flush().size == 0


def test_pcm_resampler_empty_chunk() -> None:
    assert PcmResampler(24_000).push(b"").size == 0


@pytest.mark.parametrize("rate", [24_000, SAMPLE_RATE])
def test_pcm_resampler_rejects_odd_byte_counts(rate: int) -> None:
    with pytest.raises(AudioError, match="2-byte samples, got 1921 bytes"):
        PcmResampler(rate).push(b"\0" * 1921)


@pytest.mark.parametrize("rate", [0, 7_999, 48_001, -24_000])
def test_pcm_resampler_rejects_bad_rates(rate: int) -> None:
    with pytest.raises(AudioError, match=f"8000..48000 Hz, got {rate}"):
        PcmResampler(rate)
