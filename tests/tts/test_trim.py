"""Tests for lyre.tts.trim: leading-silence detection and the streaming trimmer."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lyre.orpheus import SAMPLE_RATE
from lyre.tts.trim import LeadingSilenceTrimmer, TrimConfig, leading_silence

CONFIG = TrimConfig()
MS = SAMPLE_RATE // 1000  # samples per millisecond: 24


def _silence(ms: float) -> np.ndarray:
    return np.zeros(round(ms * MS), dtype=np.float32)


def _noise(ms: float, dbfs: float = -60.0, seed: int = 0) -> np.ndarray:
    """Gaussian noise whose RMS is ``dbfs`` (well below the -40 dBFS threshold)."""
    rng = np.random.default_rng(seed)
    return (rng.standard_normal(round(ms * MS)) * 10 ** (dbfs / 20)).astype(np.float32)


def _tone(ms: float, amplitude: float = 0.5, hz: float = 440.0) -> np.ndarray:
    t = np.arange(round(ms * MS)) / SAMPLE_RATE
    return (amplitude * np.sin(2 * np.pi * hz * t)).astype(np.float32)


def _run(
    pcm: np.ndarray, chunks: list[int], config: TrimConfig = CONFIG
) -> tuple[np.ndarray, LeadingSilenceTrimmer]:
    """Push ``pcm`` cut at ``chunks`` (sizes; the rest goes last), flush, and join the output."""
    trimmer = LeadingSilenceTrimmer(config)
    bounds = np.cumsum([0, *chunks])
    pieces = [pcm[a:b] for a, b in zip(bounds, [*bounds[1:], len(pcm)])]
    out = [trimmer.push(p) for p in pieces] + [trimmer.flush()]
    assert all(o.dtype == np.float32 for o in out)
    return np.concatenate(out), trimmer


def _expected_cut(pcm: np.ndarray, config: TrimConfig) -> int:
    s = leading_silence(pcm, config)
    if s is None:
        return min(len(pcm), config.max_trim_samples)
    return min(max(0, s - config.pad_samples), config.max_trim_samples)


def test_config_sample_counts() -> None:
    assert CONFIG.sample_rate == SAMPLE_RATE == 24000
    assert (CONFIG.block_samples, CONFIG.pad_samples, CONFIG.max_trim_samples) == (240, 1200, 36000)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("threshold_dbfs", 0.0),
        ("threshold_dbfs", 3.0),
        ("threshold_dbfs", float("nan")),
        ("block_ms", 0.0),
        ("block_ms", -10.0),
        ("block_ms", 0.001),  # rounds to no samples at all
        ("pad_ms", -1.0),
        ("max_trim_ms", -0.5),
        ("max_trim_ms", float("inf")),
        ("sample_rate", 0),
    ],
)
def test_config_validation_names_the_field(field: str, value: float) -> None:
    with pytest.raises(ValueError, match=f"^{field} must be"):
        TrimConfig(**{field: value})


def test_leading_silence_finds_the_first_loud_block() -> None:
    pcm = np.concatenate([_silence(600), _tone(200)])
    assert leading_silence(pcm, CONFIG) == 14400
    assert leading_silence(_tone(100), CONFIG) == 0
    assert leading_silence(_silence(500), CONFIG) is None
    assert leading_silence(np.zeros(0, dtype=np.float32), CONFIG) is None


def test_leading_silence_reports_the_start_of_the_block_speech_begins_in() -> None:
    pcm = np.concatenate([np.zeros(250, dtype=np.float32), _tone(100)])
    assert leading_silence(pcm, CONFIG) == 240  # speech starts at 250, inside the block at 240


def test_leading_silence_ignores_a_trailing_partial_block() -> None:
    pcm = np.concatenate([_silence(50), np.full(239, 0.5, dtype=np.float32)])
    assert leading_silence(pcm, CONFIG) is None
    assert leading_silence(np.concatenate([pcm, [0.5]]), CONFIG) == 1200


def test_threshold_is_block_rms_in_dbfs() -> None:
    # -40 dBFS is an RMS of 0.01; a constant signal's RMS is its level.
    just_above = np.full(480, 0.0101, dtype=np.float32)
    just_below = np.full(480, 0.0099, dtype=np.float32)
    assert leading_silence(just_above, CONFIG) == 0
    assert leading_silence(just_below, CONFIG) is None
    assert leading_silence(just_below, TrimConfig(threshold_dbfs=-41.0)) == 0


def test_leading_silence_refuses_stereo() -> None:
    with pytest.raises(ValueError, match="mono"):
        leading_silence(np.zeros((2, 480)), CONFIG)


def test_600ms_of_silence_is_trimmed_to_the_pad() -> None:
    pcm = np.concatenate([_silence(600), _tone(300)])
    out, trimmer = _run(pcm, [])
    assert trimmer.trimmed_samples == 13200 and trimmer.trimmed_ms == 550.0
    np.testing.assert_array_equal(out, pcm[13200:])


def test_noise_below_threshold_counts_as_silence() -> None:
    pcm = np.concatenate([_noise(600), _tone(300)])
    out, trimmer = _run(pcm, [2048] * 20)
    assert trimmer.trimmed_samples == 13200
    np.testing.assert_array_equal(out, pcm[13200:])


def test_speech_from_the_first_sample_passes_through_at_once() -> None:
    pcm = _tone(100)
    trimmer = LeadingSilenceTrimmer()
    first = trimmer.push(pcm[:240])
    np.testing.assert_array_equal(first, pcm[:240])  # one loud block decides: nothing is held
    np.testing.assert_array_equal(trimmer.push(pcm[240:]), pcm[240:])
    assert trimmer.flush().size == 0 and trimmer.trimmed_samples == 0


def test_speech_closer_than_the_pad_is_not_trimmed() -> None:
    pcm = np.concatenate([_silence(30), _tone(100)])
    out, trimmer = _run(pcm, [100] * 10)
    assert trimmer.trimmed_samples == 0
    np.testing.assert_array_equal(out, pcm)


def test_silence_beyond_the_cap_is_trimmed_by_exactly_the_cap() -> None:
    pcm = np.concatenate([_silence(3000), _tone(200)])
    trimmer = LeadingSilenceTrimmer()
    released = [trimmer.push(pcm[i : i + 2400]) for i in range(0, 2400 * 17, 2400)]
    # Speech starts at 3 s, but after max_trim + pad (1.55 s) of silence the
    # trimmer stops waiting for it.
    assert sum(r.size for r in released[:15]) == 0
    assert released[15].size == 2400 and trimmer.trimmed_samples == 36000
    out = np.concatenate([*released, trimmer.push(pcm[2400 * 17 :]), trimmer.flush()])
    np.testing.assert_array_equal(out, pcm[36000:])


@pytest.mark.parametrize(("speech_ms", "cut"), [(1520, 35280), (1540, 35760), (1600, 36000)])
def test_the_cap_wins_only_once_speech_is_further_than_cap_plus_pad(speech_ms: int, cut: int) -> None:
    pcm = np.concatenate([_silence(speech_ms), _tone(100)])
    out, trimmer = _run(pcm, [960] * 10)
    assert trimmer.trimmed_samples == cut  # min(speech - 50 ms, 1500 ms)
    np.testing.assert_array_equal(out, pcm[cut:])


def test_all_silent_stream_is_dropped_on_flush() -> None:
    trimmer = LeadingSilenceTrimmer()
    assert trimmer.push(_silence(400)).size == 0
    assert trimmer.push(_noise(400)).size == 0
    tail = trimmer.flush()
    assert tail.size == 0 and tail.dtype == np.float32
    assert trimmer.trimmed_samples == 19200 and trimmer.trimmed_ms == 800.0


def test_long_all_silent_stream_loses_only_the_cap() -> None:
    pcm = _noise(2000, seed=3)
    out, trimmer = _run(pcm, [4800] * 4)
    assert trimmer.trimmed_samples == 36000
    np.testing.assert_array_equal(out, pcm[36000:])


def test_zero_cap_passes_everything_through_at_once() -> None:
    trimmer = LeadingSilenceTrimmer(TrimConfig(max_trim_ms=0))
    pcm = _silence(20)
    np.testing.assert_array_equal(trimmer.push(pcm), pcm)
    assert trimmer.trimmed_samples == 0


def test_push_refuses_stereo() -> None:
    with pytest.raises(ValueError, match="mono"):
        LeadingSilenceTrimmer().push(np.zeros((480, 2), dtype=np.float32))


_SMALL = TrimConfig(pad_ms=5.0, max_trim_ms=40.0, block_ms=2.0, sample_rate=8000)  # 16-sample blocks


@st.composite
def _signal(draw: st.DrawFn) -> np.ndarray:
    """Quiet noise, then maybe a loud stretch, then anything: cut points land everywhere."""
    silent = draw(st.integers(0, 600))
    loud = draw(st.integers(0, 200))
    rest = draw(st.integers(0, 200))
    seed = draw(st.integers(0, 2**16))
    rng = np.random.default_rng(seed)
    parts = [rng.standard_normal(silent) * 1e-4, rng.uniform(-0.8, 0.8, loud), rng.standard_normal(rest) * 0.1]
    return np.concatenate(parts).astype(np.float32)


_CHUNKS = st.lists(st.integers(0, 120), max_size=30)


@given(_signal(), _CHUNKS, _CHUNKS)
@settings(max_examples=150, deadline=None)
def test_any_chunking_gives_the_same_output(pcm: np.ndarray, chunks_a: list[int], chunks_b: list[int]) -> None:
    cut = _expected_cut(pcm, _SMALL)
    out_a, trim_a = _run(pcm, chunks_a, _SMALL)
    out_b, trim_b = _run(pcm, chunks_b, _SMALL)
    assert trim_a.trimmed_samples == trim_b.trimmed_samples == cut
    assert out_a.tobytes() == out_b.tobytes() == pcm[cut:].tobytes()


@given(_signal(), st.lists(st.integers(1, 50), min_size=1, max_size=40))
@settings(max_examples=100, deadline=None)
def test_held_back_audio_stays_bounded(pcm: np.ndarray, chunks: list[int]) -> None:
    trimmer = LeadingSilenceTrimmer(_SMALL)
    pushed = emitted = 0
    bound = _SMALL.max_trim_samples + _SMALL.pad_samples + _SMALL.block_samples
    for size in chunks:
        piece = pcm[pushed : pushed + size]
        pushed += len(piece)
        emitted += len(trimmer.push(piece))
        held = pushed - emitted - trimmer.trimmed_samples
        assert 0 <= held < bound
