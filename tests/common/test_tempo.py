"""The time stretch behind ``speed``: the length the speed makes, the pitch kept, whatever the chunking."""

from __future__ import annotations

import numpy as np
import pytest

from lyre.common.tempo import TimeStretch

RATE = 24_000


def _stretched(speed: float, audio: np.ndarray, chunk: int) -> np.ndarray:
    stretch = TimeStretch(speed, RATE)
    out = [stretch.push(audio[i:i + chunk]) for i in range(0, audio.size, chunk)]
    out.append(stretch.flush())
    whole = np.concatenate(out)
    assert whole.dtype == np.int16 and stretch.samples_out == whole.size
    return whole


def _pitch(audio: np.ndarray) -> float:
    spectrum = np.abs(np.fft.rfft(audio[RATE // 4:RATE // 4 + 8192].astype(np.float64) * np.hanning(8192)))
    return float(np.argmax(spectrum) * RATE / 8192)


@pytest.mark.parametrize("speed", [0.25, 0.5, 0.8, 1.0, 1.25, 2.0, 3.0, 4.0])
@pytest.mark.parametrize("chunk", [480, 2048, 7000])
def test_the_speed_sets_the_length_and_keeps_the_pitch(speed: float, chunk: int) -> None:
    t = np.arange(3 * RATE) / RATE
    tone = (8000 * np.sin(2 * np.pi * 300 * t)).astype(np.int16)  # 3 s at 300 Hz
    out = _stretched(speed, tone, chunk)
    assert out.size == round(tone.size / speed)
    assert abs(_pitch(out) - 300) < 2 * RATE / 8192  # within two bins: a tempo change, not a pitch change
    if speed == 1.0:
        assert np.array_equal(out, tone)  # untouched


def test_a_speed_out_of_range_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match="speed must be from 0.25 to 4.0"):
        TimeStretch(5.0)
