"""The bench's arithmetic on hand-made numbers: percentiles, viability, tokens/s, SLO headline, /metrics parsing."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from lyre.bench.metrics import (
    LevelSummary,
    Measured,
    Slo,
    headline,
    is_viable,
    percentile,
    real_time_factor,
    stream_tokens_per_second,
    summarize,
)
from lyre.bench.prometheus import parse_metrics, server_deltas
from lyre.orpheus import FRAME_TOKENS, SAMPLE_RATE, SAMPLES_PER_FRAME

FRAME_S = SAMPLES_PER_FRAME / SAMPLE_RATE  # 85.33 ms


# ---- percentiles --------------------------------------------------------------


def test_percentile_of_one_value_is_that_value() -> None:
    assert [percentile([0.3], q) for q in (0, 50, 90, 99, 100)] == [0.3] * 5


def test_percentile_odd_count_median_is_the_middle_value() -> None:
    assert percentile([5.0, 1.0, 3.0], 50) == 3.0
    assert percentile([5.0, 1.0, 3.0], 0) == 1.0
    assert percentile([5.0, 1.0, 3.0], 100) == 5.0


def test_percentile_even_count_interpolates_linearly() -> None:
    assert percentile([4.0, 1.0, 3.0, 2.0], 50) == 2.5
    # rank 0.9 * 9 = 8.1: between the 9th (9) and 10th (10) values
    assert percentile(range(1, 11), 90) == pytest.approx(9.1)
    # rank 0.99 * 3 = 2.97: between 30 and 40
    assert percentile([10, 20, 30, 40], 99) == pytest.approx(39.7)


def test_percentile_of_nothing_is_none_and_q_is_checked() -> None:
    assert percentile([], 50) is None
    with pytest.raises(ValueError):
        percentile([1.0], 101)


@given(st.lists(st.floats(-1e6, 1e6), min_size=1, max_size=50), st.floats(0, 100))
def test_percentile_matches_numpy_linear(values: list[float], q: float) -> None:
    assert percentile(values, q) == pytest.approx(float(np.percentile(values, q)), rel=1e-9, abs=1e-6)


# ---- viability ----------------------------------------------------------------


def _steady(first: float, count: int, gap: float, seconds: float = FRAME_S) -> list[tuple[float, float]]:
    return [(first + i * gap, seconds) for i in range(count)]


def test_a_stream_faster_than_playback_is_viable() -> None:
    assert is_viable(_steady(first=0.4, count=10, gap=0.05))


def test_a_stream_that_stalls_is_not_viable() -> None:
    chunks = _steady(first=0.2, count=4, gap=0.05)  # 4 frames buffered by t = 0.35
    chunks.append((0.2 + 4 * FRAME_S + 0.01, FRAME_S))  # after the 4 buffered frames have played out
    assert not is_viable(chunks)


def test_slower_than_playback_fails_at_the_first_late_chunk() -> None:
    assert not is_viable(_steady(first=0.1, count=3, gap=FRAME_S * 1.5))


def test_a_chunk_exactly_on_its_deadline_is_in_time() -> None:
    # chunk i arrives at t_1 + (audio of chunks 1..i-1): playback never waits
    assert is_viable([(1.0, 0.5), (1.5, 0.5), (2.0, 0.25), (2.25, 1.0)])
    # the same with durations whose float sums are inexact (0.1 + 0.2 != 0.3)
    assert is_viable([(0.0, 0.1), (0.1, 0.2), (0.30000000000000004, 0.1)])
    assert not is_viable([(1.0, 0.5), (1.5, 0.5), (2.001, 0.25)])


def test_a_big_first_chunk_buys_time_for_later_ones() -> None:
    assert is_viable([(0.5, 2.0), (2.4, 0.1), (2.45, 0.1)])


def test_one_chunk_is_viable_and_no_audio_is_not() -> None:
    assert is_viable([(3.0, 0.2)])
    assert not is_viable([])


# ---- per-stream rates -------------------------------------------------------------


def test_tokens_per_second_counts_audio_after_the_first_chunk() -> None:
    # 3 more frames (21 tokens) arrive over 3 frame-durations: exactly real time
    chunks = _steady(first=0.3, count=4, gap=FRAME_S)
    assert stream_tokens_per_second(chunks) == pytest.approx(7 * SAMPLE_RATE / SAMPLES_PER_FRAME)
    assert stream_tokens_per_second(chunks) == pytest.approx(82.03, abs=0.01)
    # twice as fast: 2 frames per 85 ms
    fast = _steady(first=0.3, count=5, gap=FRAME_S / 2)
    assert stream_tokens_per_second(fast) == pytest.approx(2 * FRAME_TOKENS / FRAME_S)


def test_tokens_per_second_needs_two_chunks_apart() -> None:
    assert stream_tokens_per_second([(0.2, 1.0)]) is None
    assert stream_tokens_per_second([(0.2, 1.0), (0.2, 1.0)]) is None


def test_real_time_factor() -> None:
    assert real_time_factor(1.0, 4.0) == 0.25
    assert real_time_factor(1.0, 0.0) is None


# ---- summaries and the SLO headline --------------------------------------------------


def test_summary_counts_failures_as_not_viable_and_keeps_them_out_of_latency() -> None:
    good = Measured(sent_at=0.0, e2e_s=1.0, chunks=_steady(0.1, 5, 0.05))
    late = Measured(sent_at=0.5, e2e_s=2.0, chunks=_steady(0.3, 3, 0.5))
    failed = Measured(sent_at=1.0, e2e_s=0.2, chunks=[], error="http_429")
    s = summarize(2, [good, late, failed])
    assert (s.requests, s.ok, s.errors) == (3, 2, {"http_429": 1})
    assert s.viable_share == pytest.approx(1 / 3)
    assert s.ttfa_p50_s == pytest.approx(0.2)
    assert s.e2e_p50_s == pytest.approx(1.5)
    assert s.requests_per_s == pytest.approx(2 / 2.5)  # from the first send (0) to the last end (2.5)
    assert s.audio_s_total == pytest.approx(8 * FRAME_S)
    assert s.rtf_mean == pytest.approx((1.0 / (5 * FRAME_S) + 2.0 / (3 * FRAME_S)) / 2)


def test_summary_of_only_failures_has_no_latency() -> None:
    s = summarize(1, [Measured(0.0, 0.1, [], error="connection")])
    assert s.ok == 0 and s.ttfa_p90_s is None and s.viable_share == 0.0 and s.requests_per_s is None


def _level(load: float, ttfa_p90_s: float | None, viable: float | None) -> LevelSummary:
    return LevelSummary(load=load, requests=10, ok=10, ttfa_p90_s=ttfa_p90_s, viable_share=viable)


def test_headline_is_the_highest_load_holding_the_slo() -> None:
    slo = Slo(ttfa_p90_ms=250, viable_share=0.99)
    levels = [_level(1, 0.10, 1.0), _level(2, 0.20, 1.0), _level(4, 0.25, 0.99), _level(8, 0.40, 1.0),
              _level(16, 0.20, 0.90)]
    assert headline(levels, slo) == 4  # 4 sits exactly on both limits; 8 is too slow, 16 not viable enough
    assert headline(levels[:2], slo) == 2
    assert headline([_level(1, 0.3, 1.0), _level(2, None, None)], slo) is None
    assert headline(levels, Slo(ttfa_p90_ms=500, viable_share=0.95)) == 8


def test_slo_is_validated() -> None:
    with pytest.raises(ValueError):
        Slo(viable_share=1.5)
    with pytest.raises(ValueError):
        Slo(ttfa_p90_ms=0)


# ---- the server's /metrics page -------------------------------------------------------

BEFORE = """\
# HELP lyre_engine_steps_total Engine steps run
# TYPE lyre_engine_steps_total counter
lyre_engine_steps_total 100.0
lyre_tokens_generated_total 150.0
lyre_codec_rows_total 40.0
lyre_codec_batches_total 40.0
lyre_engine_queue_wait_seconds_total 1.5
lyre_requests_total{api="http",outcome="ok"} 10.0
lyre_time_to_first_audio_seconds_bucket{api="http",le="+Inf"} 10.0
lyre_time_to_first_audio_seconds_sum{api="http"} 2.0
lyre_time_to_first_audio_seconds_count{api="http"} 10.0
lyre_queue_wait_seconds_sum 0.5
lyre_queue_wait_seconds_count 10.0
"""

AFTER = """\
lyre_engine_steps_total 200.0
lyre_tokens_generated_total 550.0 1712345678000
lyre_codec_rows_total 100.0
lyre_codec_batches_total 70.0
lyre_engine_queue_wait_seconds_total 2.5
lyre_requests_total{api="http",outcome="ok"} 14.0
lyre_requests_total{api="websocket",outcome="error"} 1.0
lyre_time_to_first_audio_seconds_sum{api="http"} 3.0
lyre_time_to_first_audio_seconds_count{api="http"} 14.0
lyre_time_to_first_audio_seconds_sum{api="websocket"} 0.5
lyre_time_to_first_audio_seconds_count{api="websocket"} 1.0
lyre_queue_wait_seconds_sum 1.5
lyre_queue_wait_seconds_count 15.0
"""


def test_parse_metrics_reads_names_labels_and_special_values() -> None:
    page = parse_metrics(BEFORE + 'odd_total{path="/a \\"b\\"",code="200"} +Inf\nnot a sample line\nnan_gauge NaN\n')
    assert page.get("lyre_engine_steps_total") == 100.0
    assert page.get("lyre_requests_total", api="http", outcome="ok") == 10.0
    assert page.get("lyre_requests_total", api="http") is None  # label sets match exactly
    assert page.get("lyre_time_to_first_audio_seconds_bucket", api="http", le="+Inf") == 10.0
    assert page.get("odd_total", path='/a "b"', code="200") == math.inf
    assert math.isnan(page.get("nan_gauge") or 0.0)
    assert page.total("lyre_requests_total") == 10.0
    assert page.get("missing") is None and page.total("missing") is None
    assert "lyre_codec_batches_total" in set(page)


def test_server_deltas_per_level() -> None:
    d = server_deltas(parse_metrics(BEFORE), parse_metrics(AFTER))
    assert d["engine_batch_mean"] == pytest.approx(400 / 100)
    assert d["codec_batch_mean"] == pytest.approx(60 / 30)
    # a labelled series first seen after the level started counts from zero
    assert d["requests"] == pytest.approx(5)
    assert d["engine_queue_wait_s_mean"] == pytest.approx(1.0 / 5)
    assert d["server_ttfa_s_mean"] == pytest.approx(1.5 / 5)
    assert d["admission_wait_s_mean"] == pytest.approx(1.0 / 5)
    assert d["tokens"] == pytest.approx(400)


def test_engine_queue_wait_uses_admitted_requests_when_the_server_counts_them() -> None:
    before = parse_metrics(BEFORE + "lyre_engine_admitted_total 10\n")
    after = parse_metrics(AFTER + "lyre_engine_admitted_total 20\n")
    assert server_deltas(before, after)["engine_queue_wait_s_mean"] == pytest.approx(1.0 / 10)


def test_missing_metrics_are_absent_not_errors() -> None:
    d = server_deltas(parse_metrics("lyre_engine_steps_total 5\n"), parse_metrics("lyre_engine_steps_total 5\n"))
    assert set(d.values()) == {None}
    assert set(server_deltas(None, parse_metrics(AFTER)).values()) == {None}
    # no steps in the level: no batch size rather than a division by zero
    assert server_deltas(parse_metrics(AFTER), parse_metrics(AFTER))["engine_batch_mean"] is None
