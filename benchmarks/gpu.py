"""One prepared run for a lent GPU: lyre's server under a concurrency sweep, figures of DESIGN.md section 5.

By default it builds an Orpheus-3B-shaped Llama with random weights straight
on the GPU in bf16 (no download: the lent machine has no network), SNAC of
the real 24 kHz shape from the demo codec folder, serves them with
``create_app`` on loopback, and sweeps concurrency with lyre's load
generator. It prints the table, the SLO headline (most concurrent streams
at p90 TTFA <= 250 ms and >= 99% viable), the engine's step time at each
level and peak GPU memory, and writes ``bench.json``, ``ttfa.png`` and
``viable.png`` under --out (default $OUT, else ./gpu-bench-out).

``--small`` runs the same flow on the CPU with the tiny demo model in well
under a minute; the test suite runs it so this script keeps working.

    python benchmarks/gpu.py                       # on the GPU machine, about 6 minutes
    python benchmarks/gpu.py --concurrency 8 32 --duration 20
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

from lyre import bench, orpheus
from lyre.bench.runner import LevelResult, TargetResult
from lyre.codec import BatchPolicy, CodecService, SnacDecoder, load_snac
from lyre.demo_model import demo_model
from lyre.engine import Engine, EngineConfig, EngineStats, LlamaConfig
from lyre.engine.config import RopeScaling
from lyre.engine.llama import Llama
from lyre.model_folder import load_tokenizer
from lyre.server.app import create_app
from lyre.server.config import ServerConfig
from lyre.tts import TTS

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
_READY_TIMEOUT_S = 600.0  # model build, codec load and the warm-up utterance

T = TypeVar("T")


@dataclass(frozen=True)
class Plan:
    """What one run does: where, how big, and the sweep."""

    small: bool
    device: str
    levels: tuple[int, ...]
    requests: int
    duration_s: float
    warmup: int
    max_tokens: int
    max_seq_len: int
    timeout_s: float
    seed: int | None
    out: Path


def _parse(argv: list[str] | None) -> Plan:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--small", action="store_true",
                   help="CPU, tiny demo model, levels 1 2, a few requests of 42 tokens (a smoke run)")
    p.add_argument("--concurrency", type=int, nargs="+", metavar="N",
                   help="concurrency levels (default: 1 4 16 32 64; --small: 1 2)")
    p.add_argument("--requests", type=int, help="measured requests per level at most (default: 256; --small: 3)")
    p.add_argument("--duration", type=float,
                   help="seconds of measured load per level at most (default: 40; --small: 10)")
    p.add_argument("--warmup", type=int, help="warm-up requests per stream at each level (default: 1; --small: 0)")
    p.add_argument("--max-tokens", type=int, help="per request (default: 280, about 3.4 s of audio; --small: 42)")
    p.add_argument("--max-seq-len", type=int, default=1024, help="KV-cache positions per stream (default: 1024)")
    p.add_argument("--timeout", type=float, default=120.0, help="seconds per request (default: 120)")
    p.add_argument("--seed", type=int, default=0, help="request k gets seed + k (default: 0)")
    p.add_argument("--out", type=Path, help="results folder (default: $OUT, else ./gpu-bench-out)")
    args = p.parse_args(argv)
    small = args.small

    def pick(value: T | None, full: T, tiny: T) -> T:
        """The flag's value, else the default of the chosen size."""
        return value if value is not None else (tiny if small else full)

    return Plan(
        small=small,
        device="cpu" if small else "cuda",
        levels=tuple(pick(args.concurrency, [1, 4, 16, 32, 64], [1, 2])),
        requests=pick(args.requests, 256, 3),
        duration_s=pick(args.duration, 40.0, 10.0),
        warmup=pick(args.warmup, 1, 0),
        max_tokens=pick(args.max_tokens, 280, 42),
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


def _build_tts(plan: Plan) -> TTS:
    demo = demo_model()
    max_batch = max(plan.levels)
    engine_config = EngineConfig(max_batch=max_batch, max_seq_len=plan.max_seq_len, device=plan.device)
    if plan.small:
        return TTS.load(demo.model, demo.codec, engine_config)
    engine = Engine(_random_orpheus_3b(plan.max_seq_len, plan.device), engine_config)
    codec = CodecService(SnacDecoder(load_snac(demo.codec, device=plan.device)), BatchPolicy.for_device(plan.device))
    return TTS(engine, load_tokenizer(demo.model), codec, orpheus.VOICES)


@contextmanager
def _serving(tts: TTS, plan: Plan) -> Iterator[str]:
    """lyre's app on a free loopback port in a background thread; yields its URL once /ready says so."""
    max_streams = max(plan.levels)
    config = ServerConfig(max_streams=max_streams, max_queue=2 * max_streams, device=plan.device,
                          max_seq_len=plan.max_seq_len)
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    server = uvicorn.Server(uvicorn.Config(create_app(config, tts=tts), log_level="warning"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, name="uvicorn", daemon=True)
    thread.start()
    try:
        _wait_ready(url, thread)
        yield url
    finally:
        server.should_exit = True
        thread.join(60)
        sock.close()


def _wait_ready(url: str, thread: threading.Thread) -> None:
    deadline = time.monotonic() + _READY_TIMEOUT_S
    while time.monotonic() < deadline:
        if not thread.is_alive():
            raise RuntimeError("the server thread stopped before it was ready (see the log above)")
        try:
            if httpx.get(url + "/ready", timeout=5.0).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise RuntimeError(f"{url} not ready after {_READY_TIMEOUT_S:g} s")


def _step_figures(before: EngineStats, after: EngineStats) -> dict[str, float | None]:
    steps = after.steps - before.steps
    if not steps:
        return {"steps": 0, "step_ms": None, "mean_batch": None}
    return {
        "steps": steps,
        "step_ms": 1000.0 * (after.step_seconds - before.step_seconds) / steps,
        "mean_batch": (after.tokens - before.tokens) / steps,
    }


def _sweep(url: str, tts: TTS, plan: Plan) -> tuple[bench.BenchResult, list[dict[str, float | None]]]:
    """The sweep one level at a time, so the engine's counters can be read between levels."""
    config = bench.BenchConfig(
        urls=(url,), levels=tuple(float(n) for n in plan.levels), warmup=plan.warmup, duration_s=plan.duration_s,
        max_requests=plan.requests, max_tokens=plan.max_tokens, seed=plan.seed, timeout_s=plan.timeout_s,
    )
    levels: list[LevelResult] = []
    engine_figures = []
    for load in config.levels:
        before = tts.engine.stats()
        result = asyncio.run(bench.run_bench(replace(config, levels=(load,))))
        engine_figures.append({"concurrency": load, **_step_figures(before, tts.engine.stats())})
        levels += result.targets[0].levels
    target = TargetResult(url, levels, bench.headline([level.summary for level in levels], config.slo))
    return bench.BenchResult(config, [target]), engine_figures


def main(argv: list[str] | None = None) -> int:
    plan = _parse(argv)
    if plan.device == "cuda" and not torch.cuda.is_available():
        print("gpu.py: error: CUDA is not available here; run with --small for the CPU smoke run", file=sys.stderr)
        return 2
    machine = _machine(plan.device)
    print(f"machine: {machine}", flush=True)
    started = time.perf_counter()
    tts = _build_tts(plan)
    try:
        with _serving(tts, plan) as url:
            print(f"serving {url} after {time.perf_counter() - started:.1f} s", flush=True)
            result, engine_figures = _sweep(url, tts, plan)
    finally:
        tts.close()

    print(bench.format_table(result))
    for figures in engine_figures:
        step = "-" if figures["step_ms"] is None else f"{figures['step_ms']:.2f} ms"
        batch = "-" if figures["mean_batch"] is None else f"{figures['mean_batch']:.1f}"
        print(f"engine at {figures['concurrency']:g} streams: step {step}, mean batch {batch}, "
              f"{figures['steps']} steps")
    held = result.targets[0].headline
    largest = engine_figures[-1]
    largest_step = "-" if largest["step_ms"] is None else f"{largest['step_ms']:.2f} ms"
    memory_gib = torch.cuda.max_memory_allocated() / 2**30 if plan.device == "cuda" else None
    print(f"headline: {'no level held the SLO' if held is None else f'{held:g} concurrent streams'} "
          f"(p90 TTFA <= 250 ms, >= 99% viable); decode step at {largest['concurrency']:g} streams: "
          f"{largest_step}; peak GPU memory: {'-' if memory_gib is None else f'{memory_gib:.1f} GiB'}; "
          f"total {time.perf_counter() - started:.0f} s")

    document = bench.to_json(result)
    document["machine"] = machine
    document["engine"] = engine_figures
    document["gpu_max_memory_allocated_bytes"] = torch.cuda.max_memory_allocated() if plan.device == "cuda" else None
    plan.out.mkdir(parents=True, exist_ok=True)
    (plan.out / "bench.json").write_text(json.dumps(document, indent=1) + "\n")
    paths = [plan.out / "bench.json", *bench.write_plots(result, plan.out)]
    print("wrote " + ", ".join(str(path) for path in paths))
    if not any(level.summary.ok for level in result.targets[0].levels):
        print("gpu.py: error: no request completed", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
