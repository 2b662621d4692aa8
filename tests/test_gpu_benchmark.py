"""benchmarks/gpu.py stays runnable: its --small CPU run goes through the whole flow."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_small_run_prints_figures_and_writes_results(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "gpu.py"), "--small", "--out", str(tmp_path)],
        cwd=ROOT, capture_output=True, text=True, timeout=300, check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("machine: cpu")
    assert any(line.split()[:3] == ["load", "server", "sent"] for line in lines), done.stdout
    for load in (1, 2):
        assert any(line.strip().startswith(f"{load} streams") for line in lines), done.stdout
        assert any(line.startswith(f"engine at {load} streams: step ") for line in lines), done.stdout
    assert any(line.startswith("headline A: ") for line in lines), done.stdout
    assert any(line.startswith("headline: ") and "decode step at 2 streams" in line for line in lines), done.stdout
    for name in ("bench.json", "ttfa.png", "viable.png"):
        assert (tmp_path / name).stat().st_size > 0, name
