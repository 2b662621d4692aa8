"""benchmarks/gpu.py stays runnable on the GPU machine: its --small CPU run goes through the whole flow
with only what that machine has and the wheels scripts/gpu_wheels.sh brings importable."""

from __future__ import annotations

import importlib.metadata
import json
from pathlib import Path

import pytest

from gpu_machine import ROOT, normalize, run_as_on_the_machine, wheel_pins


def test_the_wheels_are_the_versions_the_tests_run() -> None:
    pins = wheel_pins()
    assert {"fastapi", "uvicorn", "snac", "tokenizers", "matplotlib"} <= set(pins)
    installed = {normalize(d.metadata["Name"]): d.version for d in importlib.metadata.distributions()}
    assert {name: installed.get(name) for name in pins} == pins


@pytest.mark.slow
def test_small_run_prints_figures_and_writes_results(tmp_path: Path) -> None:
    done = run_as_on_the_machine(ROOT / "benchmarks" / "gpu.py", "--small", "--out", str(tmp_path))
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("machine: cpu")
    for lever in ("gather+eager+bf16", "sdpa+eager+bf16", "sdpa+fixed+bf16", "sdpa+eager+fp8"):
        assert any(line.strip().startswith(lever) and "4x128:" in line for line in lines), done.stdout
    assert any("sdpa+eager+bf16 vs gather+eager+bf16" in line for line in lines), done.stdout
    assert any(line.split()[:3] == ["load", "server", "sent"] for line in lines), done.stdout
    for load in (1, 2):
        assert any(line.strip().startswith(f"{load} streams") for line in lines), done.stdout
        assert any(line.startswith(f"engine at {load} streams: step ") for line in lines), done.stdout
    for scheduler in ("deadline", "fcfs"):
        assert any(line.startswith(f"headline ({scheduler}): ") for line in lines), done.stdout
    figures = json.loads((tmp_path / "gpu.json").read_text())
    assert {row["lever"] for row in figures["steps"] if "error" not in row} >= {"sdpa+eager+bf16", "sdpa+fixed+bf16"}
    assert figures["agreement"][0]["tokens"] > 0 and 0 <= figures["fp8_quality"]["top1_agreement"] <= 1
    assert {"sdpa+eager+bf16 4x2", "sdpa+graphs+bf16 4x2"} <= set(figures["lora"]["ratio"]), figures["lora"]
    assert any(key.startswith("bfloat16+eager 4f") for key in figures["codec"]["ms"])
    # Present whatever happened: here transformers may not import as on the machine, and that is not fatal.
    assert "step_s" in figures["train_step"] or "error" in figures["train_step"]
    assert figures["bench_deadline"]["targets"][0]["levels"] and figures["bench_fcfs"]["targets"][0]["levels"]
    for name in ("ttfa.png", "viable.png", "step_ms.png"):
        assert (tmp_path / name).stat().st_size > 0, name


@pytest.mark.slow
def test_the_training_step_section_times_train_voices_defaults() -> None:
    import sys

    sys.path.insert(0, str(ROOT / "benchmarks"))
    from gpu_train import train_step_figures

    lines: list[str] = []
    figures = train_step_figures(True, "cpu", lines.append)
    assert figures["step_s"] > 0 and figures["batch_size"] == 4 and figures["rank"] == 16
    assert figures["sequence_tokens"] == 18 + 4 * 7 + 2  # a prompt of 12 text tokens, 4 frames, the end tokens
    assert lines[0].startswith("training step (LoRA r16, batch 4")
