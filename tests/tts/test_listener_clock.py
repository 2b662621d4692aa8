"""The server's model of a stream's listener (lyre.tts.clock), exactly, on chunk timelines given by hand, and
against the bench's listener (lyre.bench.playback) on the same timelines."""

from __future__ import annotations

import pytest

from lyre.bench.playback import play
from lyre.orpheus import SAMPLE_RATE, SAMPLES_PER_FRAME
from lyre.tts.clock import PlaybackClock

FRAME_S = SAMPLES_PER_FRAME / SAMPLE_RATE  # 85.33 ms


def _listen(chunks: list[tuple[float, int]], rate: float = 1.0) -> PlaybackClock:
    """``chunks``: (leaves at, frames); the first starts playback."""
    clock = PlaybackClock(rate)
    clock.start(chunks[0][0])
    for at, frames in chunks:
        clock.send(frames * SAMPLES_PER_FRAME, at=at)
    return clock


def test_chunks_that_leave_before_the_listener_runs_dry_make_no_underrun() -> None:
    clock = _listen([(10.0, 2), (10.1, 1), (10.17, 3), (10.34, 1)])
    assert clock.gaps == [] and clock.underruns == 0
    assert clock.runs_dry_at() == pytest.approx(10.0 + 7 * FRAME_S)


def test_each_chunk_after_the_listener_ran_dry_is_an_underrun_as_long_as_the_stall() -> None:
    # 1 frame plays 10.000-10.085; the next leaves at 10.2: a 114.7 ms stall, and playback goes on from 10.2
    # (to 10.371); the third leaves at 10.371 + 0.05; the fourth before the third has played out.
    third = 10.2 + 2 * FRAME_S + 0.05
    clock = _listen([(10.0, 1), (10.2, 2), (third, 1), (third + 0.05, 1)])
    assert clock.gaps == pytest.approx([0.2 - FRAME_S, 0.05])
    assert clock.last_gap_at == pytest.approx(third)
    assert clock.runs_dry_at() == pytest.approx(third + 2 * FRAME_S)


def test_a_stall_under_a_millisecond_is_jitter_and_the_rate_scales_playback() -> None:
    assert _listen([(0.0, 1), (FRAME_S + 0.0009, 1)]).gaps == []
    # At twice real time a frame plays in 42.7 ms: a chunk 85.3 ms later comes 42.7 ms after the listener ran dry.
    assert _listen([(0.0, 1), (FRAME_S, 1)], rate=2.0).gaps == pytest.approx([FRAME_S / 2])
    with pytest.raises(ValueError, match="playback rate"):
        PlaybackClock(0)


@pytest.mark.parametrize("timeline", [
    [(0.0, 1), (0.2, 2), (0.3, 1), (0.9, 4), (0.95, 8), (2.5, 1)],
    [(1.0, 3), (1.1, 1), (1.2, 1), (1.3, 1), (1.4, 1), (1.5, 1), (1.6, 1)],
    [(0.0, 8), (0.5, 8), (1.9, 8), (2.0, 1)],
])
def test_the_server_and_the_bench_hear_the_same_underruns(timeline: list[tuple[float, int]]) -> None:
    clock = _listen(timeline)
    heard = play([(at, frames * FRAME_S) for at, frames in timeline], leading_silence_s=0.0)
    assert clock.underruns == heard.underruns
    assert max(clock.gaps, default=0.0) == pytest.approx(heard.worst_underrun_s)
    assert sum(clock.gaps) == pytest.approx(heard.stalled_s)
