"""benchmarks/gpu.py stays runnable on the GPU machine: its --small CPU run goes through the whole flow
with only what that machine has and the wheels scripts/gpu_wheels.sh brings importable."""

from __future__ import annotations

import importlib.metadata
import json
import sys
from pathlib import Path

import pytest

from gpu_machine import ROOT, normalize, run_as_on_the_machine, wheel_pins
from lyre.models.demo import DemoPaths
from lyre.models.loader import load_llama
from lyre.engine.runner import ModelRunner
from lyre.engine.step_inputs import POSITION as _POSITION


def test_the_wheels_are_the_versions_the_tests_run() -> None:
    pins = wheel_pins()
    assert {"fastapi", "uvicorn", "snac", "tokenizers", "matplotlib"} <= set(pins)
    installed = {normalize(d.metadata["Name"]): d.version for d in importlib.metadata.distributions()}
    assert {name: installed.get(name) for name in pins} == pins


def test_the_agreement_check_passes_the_fixed_shape_path_and_fails_a_broken_one(
        demo: DemoPaths, monkeypatch: pytest.MonkeyPatch) -> None:
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from gpu_agreement import token_agreement
    from gpu_levers import Lever

    model = load_llama(demo.model, max_seq_len=128, device="cpu", dtype="float32")
    pair = [(Lever("sdpa", "fixed", False), Lever("sdpa", "eager", False))]
    (good,) = token_agreement(model, pair, "cpu", 8, lambda line: None)
    assert good["agree"] and good["equal"] and good["kv_error"] < 1e-4 and good["tokens"] == 27, good
    decode_fixed = ModelRunner._decode_fixed

    def positions_off_by_one(self: ModelRunner, rows: int, blocks: int) -> None:  # a misplaced input buffer
        self._rows[_POSITION, :rows] += 1
        decode_fixed(self, rows, blocks)

    monkeypatch.setattr(ModelRunner, "_decode_fixed", positions_off_by_one)
    (bad,) = token_agreement(model, pair, "cpu", 8, lambda line: None)
    assert not bad["agree"] and bad["kv_error"] > 0.5, bad


@pytest.mark.slow
def test_small_run_prints_figures_and_writes_results(tmp_path: Path) -> None:
    done = run_as_on_the_machine(ROOT / "benchmarks" / "gpu.py", "--small", "--out", str(tmp_path))
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("machine: cpu")
    for lever in ("sdpa+eager+bf16", "sdpa+fixed+bf16", "sdpa+eager+fp8"):
        assert any(line.strip().startswith(lever) and "4x128:" in line for line in lines), done.stdout
    for lever in ("sdpa+fixed+bf16", "sdpa+eager+fp8"):  # each against the reference, sdpa's plain eager decoding
        assert any(f"{lever} vs sdpa+eager+bf16" in line for line in lines), done.stdout
    assert any(line.split()[:3] == ["load", "server", "sent"] for line in lines), done.stdout
    for load in (1, 2):
        assert any(line.strip().startswith(f"{load} streams") for line in lines), done.stdout
        assert any(line.startswith(f"engine at {load} streams: step ") for line in lines), done.stdout
    for scheduler in ("deadline", "fcfs"):
        assert any(line.startswith(f"headline ({scheduler}): ") for line in lines), done.stdout
    # The field's table: requests arriving open-loop at 2/s on the deadline server, by lyre bench's own sweep.
    assert any(line.startswith("rate 2/s: 2/2 done, audible TTFA p50 ") and " C100 " in line for line in lines)
    figures = json.loads((tmp_path / "gpu.json").read_text())
    assert {row["lever"] for row in figures["steps"] if "error" not in row} >= {"sdpa+eager+bf16", "sdpa+fixed+bf16"}
    # The fixed-shape path and FP8 weights agree with sdpa's plain eager decoding in bf16 (gpu_agreement).
    assert {(e["lever"], e["reference"]) for e in figures["agreement"]} == {
        ("sdpa+fixed+bf16", "sdpa+eager+bf16"), ("sdpa+eager+fp8", "sdpa+eager+bf16")}, figures["agreement"]
    assert all(e["agree"] and e["tokens"] > 0 for e in figures["agreement"]), figures["agreement"]
    assert figures["fp8_quality"]["kl_max"] < 0.05, figures["fp8_quality"]  # the bound tests/test_fp8.py holds
    assert {"sdpa+eager+bf16 4x2", "sdpa+graphs+bf16 4x2"} <= set(figures["lora"]["ratio"]), figures["lora"]
    assert any(key.startswith("bfloat16+eager 4f") for key in figures["codec"]["ms"])
    stream = figures["codec_stream"]
    assert not stream["errors"] and any(key.startswith("float32+eager 4f x") for key in stream["ms"]), stream
    assert stream["snr_db_vs_whole"]["float32+eager"] >= 100, stream  # exact to float rounding
    assert figures["bench_deadline"]["targets"][0]["levels"] and figures["bench_fcfs"]["targets"][0]["levels"]
    (rate,) = figures["rate_sweep"]["rows"]
    assert rate["rate"] == 2 and rate["ok"] == rate["requests"] == 2 and 0 <= rate["c100"] <= 1, rate
    assert rate["ttfa_audible_p50_ms"] <= rate["ttfa_audible_p95_ms"] and isinstance(rate["held"], bool), rate
    assert figures["rate_sweep"]["bench"]["settings"]["mode"] == "rate"
    # Random weights: no WER or similarity, and the run says why rather than reporting noise's.
    assert "random weights make noise" in figures["quality"]["skipped"], figures["quality"]
    table = (tmp_path / "gpu.md").read_text()
    assert "| 2 | 2 | 2 | " in table and "| sdpa+fixed+bf16 | 27/27 | " in table and "not run" in table, table
    # The training step, with only what the machine has: train-voice's defaults on a prompt of 12 text tokens,
    # 4 frames and the end tokens.
    train = figures["train_step"]
    assert "error" not in train and train["step_s"] > 0 and train["batch_size"] == 4 and train["rank"] == 16, train
    assert train["sequence_tokens"] == 18 + 4 * 7 + 2
    assert any(line.startswith("training step (LoRA r16, batch 4") for line in lines), done.stdout
    for name in ("ttfa.png", "viable.png", "step_ms.png"):
        assert (tmp_path / name).stat().st_size > 0, name


@pytest.mark.slow
def test_with_a_model_folder_each_lever_set_s_speech_is_judged_against_the_reference(demo: DemoPaths) -> None:
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from gpu_levers import Lever
    from gpu_plan import REFERENCE, parse
    from gpu_quality import lever_quality

    # The demo folder is loaded as real weights are (its speech is noise: WER near 1, which the check reports).
    plan = parse(["--small", "--model", str(demo.model), "--codec", str(demo.codec), "--quality-texts", "2"], "")
    lines: list[str] = []
    quality = lever_quality(plan, [REFERENCE, Lever("sdpa", "fixed", False)], lines.append)
    assert quality["judge"] == "the built-in Whisper base, local" and quality["texts"] == 2, quality
    assert quality["reference_corpus_wer"] >= 0.8, quality
    (entry,) = quality["levers"]
    assert entry["lever"] == "sdpa+fixed+bf16" and "error" not in entry, entry
    wer = entry["wer"]
    assert wer["pairs"] == 2 and wer["ci95"][0] <= wer["difference"] <= wer["ci95"][1], wer
    assert any(line.startswith("  sdpa+fixed+bf16: corpus WER ") for line in lines), lines


def test_the_markdown_rows_carry_the_rates_and_each_lever_s_paired_differences() -> None:
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from gpu_field import markdown

    paired = {"difference": 0.012, "ci95": [-0.01, 0.034], "pairs": 36, "resamples": 10000, "seed": 0}
    figures = {"machine": "cuda: H200", "served_lever": "sdpa+graphs+bf16", "weights": {"model": "orpheus-3b"},
               "rate_sweep": {"rows": [{"rate": 8.0, "requests": 120, "ok": 120, "ttfa_audible_p50_ms": 151.0,
                                        "ttfa_audible_p95_ms": 230.4, "c100": 1.0, "zero_underrun": 1.0,
                                        "held": True}]},
               "agreement": [{"lever": "sdpa+graphs+fp8", "same_tokens": 60, "tokens": 75, "kv_error": 0.09,
                              "agree": True}],
               "quality": {"levers": [{"lever": "sdpa+graphs+fp8", "wer": paired, "similarity": None}]},
               "fp8_quality": {"kl_mean": 3.4e-4, "kl_max": 4.3e-4, "top1_agreement": 0.857, "positions": 42}}
    table = markdown(figures)
    assert "| 8 | 120 | 120 | 151 | 230 | 1.00 | 1.00 | yes |" in table, table
    assert "| sdpa+graphs+fp8 | 60/75 | 9.0e-02 | yes | +0.012 [-0.010, +0.034] | - |" in table, table
    assert "over 42 positions: KL mean 3.4e-04, max 4.3e-04; top-1 alike 86%" in table, table
