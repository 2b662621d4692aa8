"""Host-overhead benchmark: the server's own CPU per generated token, with the model and the codec taken away.

THIS IS A MEASUREMENT HARNESS, NOT A WAY TO SERVE. It starts a real server
process (FastAPI, uvicorn, admission, the TTS pipeline, the engine's loop and
scheduler, the codec service, the encoders) in which two things are replaced
by precomputed outputs of the right shapes, at no compute cost:

- the model runner: each step returns one valid audio token per request
  (the id its frame position allows) after a fixed "device time"
  (``--step-ms``, what a GPU step would take; the engine thread sleeps it,
  holding no lock, exactly as it waits for a GPU);
- SNAC: each decode returns a slice of precomputed noise of its frames' length.

Everything else runs as in production. ``lyre bench`` then drives N
concurrent HTTP streams, and the harness reads the server process's CPU time
(/proc/PID/stat) and its token counter before and after each level:

    host CPU per token = server CPU seconds / tokens generated

and "streams one process can carry" = 1 / (CPU per token x 82 tokens/s),
the streams at which that process would use one whole core.

That leaves out the model runner's own host work (building each step's
inputs, launching every op), which is what a GPU step waits on. ``--runner
model`` puts the real `ModelRunner` back, over a random Llama of Orpheus-3B's
depth (28 layers) and a tiny width, so its step is almost all host work (op
dispatch, per-step tensors, sampling), and first times its step alone by batch:

    .venv/bin/python benchmarks/host_budget.py --concurrency 16 64 128
    .venv/bin/python benchmarks/host_budget.py --runner model --concurrency 16 64 128
    .venv/bin/python benchmarks/host_budget.py --json docs/bench/host_budget.json
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

import httpx
import numpy as np

from lyre import bench, orpheus
from lyre.bench.prometheus import parse_metrics

if TYPE_CHECKING:
    from lyre.engine import EngineConfig

REAL_TIME_TOKENS_PER_S = orpheus.FRAME_TOKENS * orpheus.SAMPLE_RATE / orpheus.SAMPLES_PER_FRAME  # 82.03
_CLK_TCK = os.sysconf("SC_CLK_TCK")
# --runner model: Orpheus-3B's depth and head layout (28 layers; 3 query heads per KV head) at a tiny width.
_DEPTH, _HIDDEN, _HEADS, _KV_HEADS, _HEAD_DIM, _MLP = 28, 64, 3, 1, 16, 128
_MODEL_SEQ_LEN = 1024  # a prompt and --max-tokens 420 fit; keeps the 28-layer KV cache under 0.5 GB at 128 slots


# ---- the server side (runs in the child process) ------------------------------------------------


class _PacedPending:
    def __init__(self, tokens: list[int], due: float) -> None:
        self._tokens, self._due = tokens, due
        self.forward_seconds = 0.0

    def tokens(self) -> list[int]:
        wait = self._due - time.perf_counter()
        if wait > 0:
            time.sleep(wait)  # the "device" is still busy: the engine thread waits, as for a GPU
        return self._tokens


class PacedRunner:
    """Stands in for ModelRunner: valid audio ids, one step per ``step_s``, no tensors."""

    def __init__(self, vocab_size: int, step_s: float, config: EngineConfig) -> None:
        self.vocab_size = vocab_size
        self.kv_cache_bytes = 0
        # The blocks the engine hands out: the real runner's default pool, with no tensors behind it.
        self.block_size = config.resolved_block_size
        self.kv_blocks = config.max_batch * -(-config.max_seq_len // self.block_size)
        self.forward_seconds = 0.0
        self._step_s = step_s

    def launch(self, prefill: list, decode: list) -> _PacedPending:  # type: ignore[type-arg]
        tokens = []
        for req in [chunk.req for chunk in prefill if chunk.final] + decode:  # only a prompt's last chunk samples
            n = len(req.output_ids)
            allowed = req.constraint.allowed(n)
            tokens.append(allowed.start + (n * 611 + 17) % (allowed.stop - allowed.start))
        return _PacedPending(tokens, time.perf_counter() + self._step_s)


class NoiseDecoder:
    """Stands in for SnacDecoder where the server reads its facts."""

    device = "cpu"
    dtype = "float32"
    cuda_graphs = False


class NoiseStreams:
    """Stands in for the streaming decoder (lyre.codec.streaming): precomputed noise, as many samples as the
    real one gives out (no lookahead: each frame's audio at once)."""

    lookahead = 0
    flush_frames = 0

    def __init__(self) -> None:
        rng = np.random.default_rng(0)
        self._noise = (0.3 * rng.standard_normal(16 * orpheus.SAMPLES_PER_FRAME)).astype(np.float32)
        self.slots, self._open = 1 << 20, set()  # type: ignore[var-annotated]

    def open(self, seed: int | None = 0) -> int:
        slot = next(i for i in itertools.count() if i not in self._open)
        self._open.add(slot)
        return slot

    def close(self, slot: int) -> None:
        self._open.discard(slot)

    def push(self, feeds: list) -> list[np.ndarray]:  # type: ignore[type-arg]
        return [self._noise[: len(frames) * orpheus.SAMPLES_PER_FRAME] for _, frames in feeds]

    def finish(self, slots: list[int]) -> list[np.ndarray]:
        for slot in slots:
            self.close(slot)
        return [self._noise[:0] for _ in slots]


def tiny_deep_model(vocab_size: int):  # type: ignore[no-untyped-def]
    """A Llama of Orpheus-3B's depth with random weights and a tiny width: its step is almost all host work."""
    import torch

    from lyre.models.config import LlamaConfig
    from lyre.models.llama import Llama

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=vocab_size, hidden_size=_HIDDEN, intermediate_size=_MLP,
                      num_hidden_layers=_DEPTH, num_attention_heads=_HEADS, num_key_value_heads=_KV_HEADS,
                      head_dim=_HEAD_DIM)
    return Llama(cfg, _MODEL_SEQ_LEN).requires_grad_(False).eval()


def runner_step_ms(batches: list[int], context: int = 256, steps: int = 20) -> dict[int, float]:
    """CPU ms per decode step of the real ModelRunner over `tiny_deep_model`, alone, by batch (rows at
    ``context``). CPU time, on one thread: what the step costs the host, whatever else the machine runs."""
    import torch

    from lyre.models.demo import demo_model
    from lyre.engine import EngineConfig, SamplingParams
    from lyre.engine.by_hand import ByHand
    from lyre.engine.runner import ModelRunner
    from lyre.engine.sequence import Request
    from lyre.models.folder import load_config
    from lyre.tts import AUDIO_CONSTRAINT

    torch.set_num_threads(1)  # see `serve`
    model = tiny_deep_model(int(load_config(demo_model().model)["vocab_size"]))
    config = EngineConfig(max_batch=max(batches), max_seq_len=_MODEL_SEQ_LEN)
    runner = ModelRunner(model, config, AUDIO_CONSTRAINT.family)
    out = {}
    for batch in batches:
        hand = ByHand(runner)  # a fresh pool's blocks: the last batch's rows are done with theirs
        reqs = []
        for slot in range(batch):  # rows placed at their context, with its blocks: no prefill
            req = Request(f"r{slot}", [orpheus.AUDIO_TOKEN_BASE] * (context - 1), SamplingParams(), seed=slot,
                          constraint=AUDIO_CONSTRAINT)
            req.output_ids = [orpheus.AUDIO_TOKEN_BASE]
            hand.place(req, slot)
            reqs.append(req)
        runner.step([], reqs)  # warm-up
        start = time.process_time()
        for _ in range(steps):
            runner.step([], reqs)
        out[batch] = 1000 * (time.process_time() - start) / steps
    return out


def serve(port: int, max_streams: int, step_ms: float, real_runner: bool = False) -> None:
    """The harness server: lyre's app over a paced runner (or the real one on `tiny_deep_model`) and a noise
    decoder."""
    import torch
    import uvicorn

    from lyre.codec import BatchPolicy, CodecService
    from lyre.models.demo import demo_model
    from lyre.engine import Engine, EngineConfig
    from lyre.models.folder import load_config, load_tokenizer
    from lyre.server import ServerConfig, create_app
    from lyre.tts import AUDIO_CONSTRAINT, TTS, ServingConfig, Voices

    if os.environ.get("LYRE_SWITCH_MS"):
        sys.setswitchinterval(float(os.environ["LYRE_SWITCH_MS"]) / 1000)
    demo = demo_model()
    vocab = int(load_config(demo.model)["vocab_size"])
    if real_runner:
        # One intra-op thread: at this width threads only add OpenMP hand-offs, and on a loaded machine their
        # spin-waits would be measured instead of the runner's host path.
        torch.set_num_threads(1)
        engine = Engine(tiny_deep_model(vocab), EngineConfig(max_batch=max_streams, max_seq_len=_MODEL_SEQ_LEN),
                        AUDIO_CONSTRAINT.family)
    else:
        config = EngineConfig(max_batch=max_streams, max_seq_len=2048)
        engine = Engine(None, config, runner=PacedRunner(vocab, step_ms / 1000, config))
    # A GPU deployment's codec policy: gather up to 64 streams for at most 15 ms.
    codec = CodecService(NoiseDecoder(), BatchPolicy(max_batch=64, max_wait_ms=15.0),  # type: ignore[arg-type]
                         streaming=NoiseStreams())  # type: ignore[arg-type]
    tts = TTS(engine, load_tokenizer(demo.model), codec, Voices.with_aliases(orpheus.VOICES))
    server = ServerConfig(port=port, serving=ServingConfig(max_streams=max_streams), max_queue=max_streams)
    uvicorn.run(create_app(server, tts=tts), host="127.0.0.1", port=port, log_level="warning")


# ---- the measuring side -------------------------------------------------------------------------


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _CLK_TCK  # utime + stime


def _counters(url: str) -> tuple[float, float]:
    """(tokens generated, engine steps) so far."""
    metrics = parse_metrics(httpx.get(f"{url}/metrics", timeout=10).text)
    return metrics.get("lyre_tokens_generated_total") or 0.0, metrics.get("lyre_engine_steps_total") or 0.0


def _start(port: int, max_streams: int, step_ms: float, runner: str) -> subprocess.Popen[bytes]:
    cmd = [sys.executable, __file__, "--serve", str(port), "--max-streams", str(max_streams), "--step-ms", str(step_ms),
           "--runner", runner]
    process = subprocess.Popen(cmd)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"harness server exited with {process.returncode}")
        try:
            if httpx.get(f"{url}/ready", timeout=2).status_code == 200:
                return process
        except httpx.TransportError:
            pass
        time.sleep(0.25)
    process.kill()
    raise RuntimeError("harness server did not become ready")


def measure(levels: list[int], step_ms: float, duration_s: float, max_tokens: int, port: int,
            runner: str = "paced") -> list[dict]:  # type: ignore[type-arg]
    process = _start(port, max(levels), step_ms, runner)
    url = f"http://127.0.0.1:{port}"
    config = bench.BenchConfig(urls=(url,), warmup=1, duration_s=duration_s, max_requests=100_000,
                               max_tokens=max_tokens, seed=0, timeout_s=300.0)
    rows = []
    try:
        for level in levels:
            cpu0, (tok0, steps0), t0 = _cpu_seconds(process.pid), _counters(url), time.perf_counter()
            client0 = _cpu_seconds(os.getpid())
            result = asyncio.run(bench.run_bench(replace(config, levels=(float(level),))))
            cpu1, (tok1, steps1), t1 = _cpu_seconds(process.pid), _counters(url), time.perf_counter()
            client1 = _cpu_seconds(os.getpid())
            summary = result.targets[0].levels[0].summary
            tokens, cpu = tok1 - tok0, cpu1 - cpu0
            us_per_token = 1e6 * cpu / tokens if tokens else None
            rows.append({
                "streams": level, "tokens": tokens, "seconds": t1 - t0, "server_cpu_s": cpu,
                "server_cpu_share": cpu / (t1 - t0), "us_per_token": us_per_token,
                "client_cpu_share": (client1 - client0) / (t1 - t0),
                "tokens_per_s": tokens / (t1 - t0), "steps_per_s": (steps1 - steps0) / (t1 - t0),
                "mean_batch": tokens / (steps1 - steps0) if steps1 > steps0 else None,
                "stream_tokens_per_s_p50": summary.tokens_per_s_p50,
                "viable_share": summary.viable_share, "ttfa_p90_ms": None if summary.ttfa_p90_s is None
                else 1000 * summary.ttfa_p90_s, "errors": dict(summary.errors),
                "streams_per_core": None if not us_per_token else 1e6 / (us_per_token * REAL_TIME_TOKENS_PER_S),
            })
            print(_row(rows[-1]), flush=True)
    finally:
        process.terminate()
        process.wait(30)
    return rows


def _fmt(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


_HEADER = (f"{'streams':>8}{'tokens/s':>10}{'steps/s':>9}{'batch':>7}{'server CPU':>11}{'client CPU':>11}"
           f"{'us/token':>10}{'stream tok/s p50':>18}{'viable':>8}{'TTFA p90 ms':>13}{'streams/core':>14}")


def _row(r: dict) -> str:  # type: ignore[type-arg]
    return (f"{r['streams']:>8}{r['tokens_per_s']:>10.0f}{r['steps_per_s']:>9.0f}{_fmt(r['mean_batch'], '.1f'):>7}"
            f"{100 * r['server_cpu_share']:>10.0f}%"
            f"{100 * r['client_cpu_share']:>10.0f}%"
            f"{_fmt(r['us_per_token'], '.1f'):>10}{_fmt(r['stream_tokens_per_s_p50'], '.0f'):>18}"
            f"{_fmt(None if r['viable_share'] is None else 100 * r['viable_share'], '.0f'):>7}%"
            f"{_fmt(r['ttfa_p90_ms'], '.0f'):>13}{_fmt(r['streams_per_core'], '.0f'):>14}")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--concurrency", type=int, nargs="+", default=[16, 64, 128], metavar="N")
    p.add_argument("--step-ms", type=float, default=10.0, help="the stand-in device time per engine step (paced)")
    p.add_argument("--runner", choices=("paced", "model"), default="paced",
                   help="paced: precomputed tokens after --step-ms; model: the real ModelRunner on a random Llama "
                        f"of {_DEPTH} layers and hidden size {_HIDDEN}")
    p.add_argument("--duration", type=float, default=20.0, help="measured seconds per level at most")
    p.add_argument("--max-tokens", type=int, default=420, help="per request (about 5 s of audio)")
    p.add_argument("--port", type=int, default=8411)
    p.add_argument("--json", type=Path)
    p.add_argument("--serve", type=int, metavar="PORT", help=argparse.SUPPRESS)
    p.add_argument("--max-streams", type=int, default=128, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.serve:
        serve(args.serve, args.max_streams, args.step_ms, real_runner=args.runner == "model")
        return 0
    load = Path("/proc/loadavg").read_text().split()[:3]
    figures: dict = {"runner": args.runner, "load_average_before": load}  # type: ignore[type-arg]
    if args.runner == "model":
        print(f"host-overhead harness: the real ModelRunner on a random Llama of {_DEPTH} layers, hidden {_HIDDEN} "
              f"(eager, sdpa); codec replaced by precomputed noise; {os.cpu_count()} CPUs; "
              f"load average {' '.join(load)}")
        figures["runner_step_ms"] = runner_step_ms(sorted({1, 16, *args.concurrency}))
        steps = figures["runner_step_ms"].items()
        print("runner step alone, CPU ms on one thread, by batch: " + ", ".join(f"{b}: {ms:.1f}" for b, ms in steps))
    else:
        figures["step_ms"] = args.step_ms
        print(f"host-overhead harness: model and codec replaced by precomputed outputs; stand-in device step "
              f"{args.step_ms:g} ms; {os.cpu_count()} CPUs; load average {' '.join(load)}")
    print(_HEADER, flush=True)
    figures["levels"] = measure(args.concurrency, args.step_ms, args.duration, args.max_tokens, args.port, args.runner)
    figures["load_average_after"] = Path("/proc/loadavg").read_text().split()[:3]
    print(f"load average after: {' '.join(figures['load_average_after'])}")
    if args.json:
        args.json.write_text(json.dumps(figures, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
