"""`lyre bench` end to end: a real server process on the demo model, the bench as its own process."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from serving import Server, running_server

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
# The demo codec decodes a window in ~100 ms on a small CPU: keep requests to a few frames.
MAX_TOKENS = "42"
BENCH_TIMEOUT_S = 120


@pytest.fixture(scope="module")
def server() -> Iterator[Server]:
    # Every request served, so the figures' shapes can be checked at c=2: admission on the measured rates (on by
    # default; tests/server/test_server_scheduling.py) may refuse a second stream on a slow CPU.
    with running_server("--max-streams", "2", "--max-seq-len", "330", "--no-admit-on-rates") as s:
        yield s


def _bench(*args: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "lyre.cli", "bench", *args]
    return subprocess.run(command, check=False, capture_output=True, text=True, timeout=BENCH_TIMEOUT_S)


def _levels(report: dict[str, Any]) -> list[dict[str, Any]]:
    (target,) = report["targets"]
    return target["levels"]


def test_http_sweep_writes_table_json_and_plots(server: Server, tmp_path: Path) -> None:
    out, plots = tmp_path / "out.json", tmp_path / "plots"
    done = _bench(server.url, "--concurrency", "1", "2", "--requests", "4", "--warmup", "1",
                  "--max-tokens", MAX_TOKENS, "--seed", "7", "--json", str(out), "--plots", str(plots))
    assert done.returncode == 0, done.stderr
    assert "headline A:" in done.stdout and "ttfa p50" in done.stdout
    assert "c=2: 4/4 done" in done.stderr  # the live progress line, in its final state

    report = json.loads(out.read_text())
    settings = report["settings"]
    assert settings["urls"] == [server.url] and settings["levels"] == [1, 2] and settings["max_tokens"] == 42
    assert settings["pooled"] is True and settings["texts"] and report["versions"]["httpx"]
    levels = _levels(report)
    assert [level["load"] for level in levels] == [1, 2]
    for level in levels:
        assert level["requests"] == 4 and level["ok"] == 4 and level["errors"] == {}
        assert 0 < level["ttfa_p50_s"] <= level["ttfa_p90_s"] <= level["ttfa_p99_s"]
        assert 0.0 <= level["viable_share"] <= 1.0
        assert level["rtf_mean"] > 0 and level["requests_per_s"] > 0
        # the server's own counters, read before and after the level
        assert level["server"]["engine_batch_mean"] >= 1.0
        assert level["server"]["codec_batch_mean"] >= 1.0
        assert level["server"]["server_ttfa_s_mean"] > 0
        records = level["records"]
        assert sum(r["warmup"] for r in records) == level["load"]  # one warm-up request per stream
        for r in records:
            assert r["error"] is None and r["audio_s"] > 0 and r["ttfa_s"] == r["chunks"][0][0]
            assert r["e2e_s"] >= r["chunks"][-1][0] and r["audio_s"] == pytest.approx(sum(s for _, s in r["chunks"]))
    # two streams share one engine: its batches hold more than one request some of the time
    assert levels[1]["server"]["engine_batch_mean"] > 1.0

    for name in ("ttfa.png", "viable.png"):
        data = (plots / name).read_bytes()
        assert data.startswith(PNG_SIGNATURE) and len(data) > 1000


def test_websocket_sweep(server: Server, tmp_path: Path) -> None:
    texts, out = tmp_path / "texts.txt", tmp_path / "ws.json"
    texts.write_text("Hello there.\n\nOne more, please.\n")
    done = _bench(server.url, "--api", "ws", "--concurrency", "2", "--requests", "3", "--warmup", "0",
                  "--max-tokens", MAX_TOKENS, "--texts", str(texts), "--json", str(out))
    assert done.returncode == 0, done.stderr
    report = json.loads(out.read_text())
    assert report["settings"]["api"] == "ws" and report["settings"]["texts"] == ["Hello there.", "One more, please."]
    (level,) = _levels(report)
    assert level["ok"] == 3 and level["ttfa_p90_s"] > 0 and 0.0 <= level["viable_share"] <= 1.0
    assert all(r["chunks"] for r in level["records"])


def test_errors_are_counted_by_kind_not_raised(server: Server, tmp_path: Path) -> None:
    out = tmp_path / "bad.json"
    # over this server's max_tokens limit (330 - 256 prompt room): every request gets a 400
    done = _bench(server.url, "--concurrency", "1", "--requests", "2", "--warmup", "0", "--max-tokens", "500",
                  "--json", str(out))
    assert done.returncode == 1 and "no request completed" in done.stderr
    (level,) = _levels(json.loads(out.read_text()))
    assert level["errors"] == {"http_400": 2} and level["viable_share"] == 0.0 and level["ttfa_p50_s"] is None
    assert "max_tokens" in level["records"][0]["detail"]


def test_bench_imports_no_torch_and_no_server_code() -> None:
    code = ("import sys, lyre.bench, lyre.bench.clients, lyre.bench.load, lyre.bench.runner;"
            "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'matplotlib')"
            " or (m.startswith('lyre.') and not m.startswith(('lyre.bench', 'lyre.orpheus', 'lyre.common'))));"
            "print(bad); sys.exit(1 if bad else 0)")
    done = subprocess.run([sys.executable, "-c", code], check=False, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr


def test_compare_names_each_server(server: Server, tmp_path: Path) -> None:
    out = tmp_path / "cmp.json"
    done = _bench(server.url, "--compare", server.url, "--labels", "first", "second", "--concurrency", "1",
                  "--requests", "2", "--warmup", "0", "--max-tokens", MAX_TOKENS, "--json", str(out))
    assert done.returncode == 0, done.stderr
    assert "headline first:" in done.stdout and "headline second:" in done.stdout
    report = json.loads(out.read_text())
    assert report["settings"]["labels"] == ["first", "second"] and len(report["targets"]) == 2
    assert all(target["levels"][0]["ok"] == 2 for target in report["targets"])

    wrong = _bench(server.url, "--labels", "a", "b", "--concurrency", "1", "--requests", "1")
    assert wrong.returncode == 2 and "1 URLs but 2 labels" in wrong.stderr
