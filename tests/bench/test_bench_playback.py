"""What a listener hears of a stream (lyre.bench.playback), by hand-worked timelines; and `lyre bench` against a
stand-in server whose audio opens with silence and runs dry once, alone and in trials on fresh servers."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from lyre.bench.metrics import Measured, summarize
from lyre.bench.playback import AUDIBLE_S16, first_audible, play

STUB = Path(__file__).with_name("speech_stub.py")


def test_the_first_audible_sample_is_the_first_at_or_above_minus_40_dbfs() -> None:
    quiet = np.full(100, AUDIBLE_S16 - 1, dtype="<i2")
    assert first_audible(quiet.tobytes()) is None
    loud = np.concatenate([quiet, np.array([0, -AUDIBLE_S16, 5], dtype="<i2")])
    assert first_audible(loud.tobytes()) == 101
    assert AUDIBLE_S16 == 328  # 1% of full scale


def test_a_stream_in_time_has_no_underrun_and_is_heard_from_its_first_chunk() -> None:
    heard = play([(0.1, 0.5), (0.4, 0.5), (0.8, 0.5)], leading_silence_s=0.0)
    assert heard.audible_at_s == 0.1 and heard.underruns == 0 and heard.worst_underrun_s == 0.0


def test_silence_then_a_late_chunk_is_heard_late_and_runs_dry_once() -> None:
    # 0.3 s of silence at 0, then 0.1 s chunks at 0.2, 0.25 and 0.55: heard from 0.2 s; dry from 0.4 to 0.55.
    chunks = [(0.0, 0.3), (0.2, 0.1), (0.25, 0.1), (0.55, 0.1)]
    heard = play(chunks, leading_silence_s=0.3)
    assert heard.audible_at_s == 0.2 and heard.underruns == 1
    assert heard.worst_underrun_s == pytest.approx(0.15) and heard.stalled_s == pytest.approx(0.15)
    # The same stream to a listener at half speed: 0.1 s of audio lasts 0.2 s, so nothing runs dry.
    assert play(chunks, leading_silence_s=0.3, playback_rate=0.5).underruns == 0
    # The first audible sample inside the first chunk: heard from that chunk on, the silence played first.
    assert play([(0.05, 0.4), (0.3, 0.2)], leading_silence_s=0.1).audible_at_s == 0.05
    assert play(chunks, leading_silence_s=None).audible_at_s is None


def test_a_level_reports_c50_c100_c200_and_failed_requests_count_in_none_of_them() -> None:
    timelines = [[(0.1, 0.2), (0.25, 0.2)],  # in time
                 [(0.1, 0.1), (0.28, 0.1)],  # 80 ms dry
                 [(0.1, 0.1), (0.35, 0.1)]]  # 150 ms dry
    requests = [Measured(0.0, 1.0, chunks, ttfb_s=0.05, leading_silence_s=0.0) for chunks in timelines]
    requests.append(Measured(0.0, 1.0, [], error="http_429"))
    level = summarize(1.0, requests)
    assert (level.c50, level.c100, level.c200, level.zero_underrun) == (0.25, 0.5, 0.75, 0.25)
    assert level.ttfb_p50_s == 0.05 and level.ttfa_audible_p50_s == pytest.approx(0.1) and not level.held


def _bench(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "lyre.cli", "bench", *args], check=False, capture_output=True,
                          text=True, timeout=180)


def test_the_bench_hears_the_silence_and_the_underrun_on_fresh_servers(tmp_path: Path) -> None:
    out = tmp_path / "trials.json"
    done = _bench("--serve", f"{sys.executable} {STUB} --port {{port}}", "--trials", "2", "--concurrency", "1",
                  "--requests", "2", "--warmup", "0", "--json", str(out))
    assert done.returncode == 0, done.stderr
    assert "across trials on fresh servers" in done.stdout
    report = json.loads(out.read_text())
    assert len(report["trials"]) == 2
    assert len({t["targets"][0]["url"] for t in report["trials"]}) == 2  # a server of its own each
    for trial in report["trials"]:
        (level,) = trial["targets"][0]["levels"]
        assert level["ok"] == 2 and level["held"] is False and level["zero_underrun"] == 0.0 and level["c50"] == 0.0
        for record in level["records"]:
            assert record["leading_silence_s"] == pytest.approx(0.3, abs=0.001)  # the tone rises from 0
            # Audible first audio comes with the tone, 0.2 s in, not with the first (silent) bytes.
            assert record["ttfa_audible_s"] - record["ttfa_s"] >= 0.15
            assert record["ttfb_s"] <= record["ttfa_s"] and record["worst_underrun_s"] >= 0.1
        assert level["ttfa_audible_ms"]["p50"] >= 150
    (row,) = report["spread"]
    assert row["runs"] == 2 and row["held_runs"] == 0 and row["c50"]["max"] == 0.0
