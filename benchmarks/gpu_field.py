"""The GPU run's row in the shape of the 2026 comparisons' table (nari-labs/benchmarks, SGLang-Omni): requests
arriving open-loop at fixed rates, and per rate the audible time to first audio (p50, p95), C100 (the share of
requests whose worst playback underrun is at most 100 ms) and the share with no underrun at all; a rate
*held* when every request completed with none. `lyre bench`'s own sweep (`lyre.bench`, ``mode="rate"``)
measures it; this module only asks for it and writes it out, with the levers' paired comparison, as markdown.

Used by benchmarks/gpu.py.
"""

from __future__ import annotations

import asyncio
from typing import Any

from gpu_plan import Plan

from lyre import bench

__all__ = ["field_rows", "markdown", "rate_sweep"]


def rate_sweep(url: str, plan: Plan) -> bench.BenchResult:
    """Poisson arrivals at each of ``plan.rates``, each level's first ``plan.rate_warmup_s`` s excluded."""
    config = bench.BenchConfig(urls=(url,), mode="rate", levels=plan.rates, warmup=plan.rate_warmup_s,
                               duration_s=plan.rate_duration_s, max_requests=plan.requests,
                               max_tokens=plan.max_tokens, seed=plan.seed, timeout_s=plan.timeout_s)
    return asyncio.run(bench.run_bench(config))


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else round(1000 * seconds, 1)


def field_rows(result: bench.BenchResult) -> list[dict[str, Any]]:
    """Per rate: the field's figures (ms and shares), and how many requests were sent and completed."""
    return [{"rate": s.load, "requests": s.requests, "ok": s.ok, "ttfa_audible_p50_ms": _ms(s.ttfa_audible_p50_s),
             "ttfa_audible_p95_ms": _ms(s.ttfa_audible_p95_s), "c100": s.c100, "zero_underrun": s.zero_underrun,
             "held": s.held}
            for s in (level.summary for level in result.targets[0].levels)]


def _cell(value: object, digits: int = 0) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def _interval(paired: dict[str, Any] | None) -> str:
    if not paired:
        return "-"
    low, high = paired["ci95"]
    return f"{paired['difference']:+.3f} [{low:+.3f}, {high:+.3f}]"


def markdown(figures: dict[str, Any]) -> str:
    """The run's rows for docs/benchmarks.md: the rate sweep as the field tabulates it, then each lever set
    against sdpa's eager bf16 (tokens alike, KV error, and WER and similarity where real weights ran)."""
    machine, lever = figures.get("machine", "-"), figures.get("served_lever", "-")
    lines = [f"Open-loop rates on {machine}, {lever}, {figures['weights']['model']}:", "",
             "| req/s | sent | ok | audible TTFA p50 ms | p95 ms | C100 | no underrun | held |",
             "|---:|---:|---:|---:|---:|---:|---:|:---:|"]
    for row in figures.get("rate_sweep", {}).get("rows", []):
        lines.append(f"| {row['rate']:g} | {row['requests']} | {row['ok']} | {_cell(row['ttfa_audible_p50_ms'])} | "
                     f"{_cell(row['ttfa_audible_p95_ms'])} | {_cell(row['c100'], 2)} | "
                     f"{_cell(row['zero_underrun'], 2)} | {_cell(row['held'])} |")
    quality = figures.get("quality", {})
    by_lever = {entry["lever"]: entry for entry in quality.get("levers", [])}
    lines += ["", "Each lever set against sdpa+eager+bf16 (teacher-forced greedy draws alike, KV error; WER and "
              "similarity B - A with 95% CI where real weights ran):", "",
              "| lever | tokens alike | KV error | agree | WER B - A | similarity B - A |", "|---|---:|---:|:---:|---|---|"]
    skipped = quality.get("skipped")
    for entry in figures.get("agreement", []):
        judged = by_lever.get(entry["lever"], {})
        same = f"{entry['same_tokens']}/{entry['tokens']}" if "tokens" in entry else "-"
        kv = f"{entry['kv_error']:.1e}" if "kv_error" in entry else entry.get("error", "-")
        lines.append(f"| {entry['lever']} | {same} | {kv} | {_cell(entry.get('agree'))} | "
                     f"{_interval(judged.get('wer')) if not skipped else 'not run'} | "
                     f"{_interval(judged.get('similarity')) if not skipped else 'not run'} |")
    if fp8 := figures.get("fp8_quality"):
        lines += ["", f"FP8 logits against bf16 over {fp8['positions']} positions: KL mean {fp8['kl_mean']:.1e}, "
                      f"max {fp8['kl_max']:.1e}; top-1 alike {fp8['top1_agreement']:.0%}"]
    if skipped:
        lines += ["", f"WER and similarity not run: {skipped}"]
    return "\n".join(lines) + "\n"
