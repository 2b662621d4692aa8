"""Engine throughput and latency on this machine, against transformers' generate.

For the demo model (or --model) at each batch size it prints decode tokens/s,
the share of a step spent outside the runner (scheduling, bookkeeping, handing tokens
over; the runner times forward, projection and sampling together), and the time from submit
to first token; then the same for ``LlamaForCausalLM.generate`` with the same
sampling settings (temperature 0.6, top_p 0.8, repetition_penalty 1.3), the
peer most users start from.

lyre runs twice: constrained to Orpheus's audio ids, the way TTS requests run
(the output projection and sampling see 4,097 ids per step), and unconstrained
over the full 156,940-id vocabulary, the like-for-like comparison.

Then the decode step alone (at batch 32, or each of ``--context-batches``) for
contexts of 128 to 2048 tokens, each path side by side (`PATHS`): ``spans``
(the CPU's default: one masked call per group of rows over the span of the
pool their blocks lie in, up to 8 rows; block by block above), ``runs`` (row by
row over a view of each row's blocks, as the old slot cache read them),
``blocks`` (block by block over the spans the rows' blocks lie in, whatever the
rows), ``gathered/2048`` and ``gathered/8192`` (the fixed-shape step a CUDA
graph replays, which copies each row's K/V up to the step's context bucket, at
two ``max_seq_len``: the same cost at a given context), and with ``--flex`` compiled FlexAttention (reads the
blocks in place; about 20 s of compiling per context on a CPU).

    .venv/bin/python benchmarks/engine.py
    .venv/bin/python benchmarks/engine.py --batches 1 8 --tokens 64 --context-batches 8 32 --json out.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import time
from pathlib import Path

import torch

from lyre.models.choice import choose_model
from lyre.engine import Engine, EngineConfig, RequestStream, SamplingParams
from lyre.engine.by_hand import ByHand
from lyre.models.loader import load_llama
from lyre.engine.runner import ModelRunner
from lyre.engine.sequence import Request
from lyre.tts import AUDIO_CONSTRAINT

# "tara: Hello there, how are you?" in Orpheus's prompt layout
PROMPT = [128259, 128000, 83, 5169, 25, 22691, 1070, 11, 1268, 527, 499, 30, 128009, 128260, 128261, 128257]
SAMPLING = {"temperature": 0.6, "top_p": 0.8, "repetition_penalty": 1.3}


async def _lyre_once(engine: Engine, batch: int, tokens: int, constrained: bool) -> dict[str, float]:
    params = SamplingParams(max_tokens=tokens, **SAMPLING)
    before = engine.stats()
    start = time.perf_counter()
    streams = [
        engine.generate(PROMPT, params, constraint=AUDIO_CONSTRAINT if constrained else None) for _ in range(batch)
    ]

    async def drain(stream: RequestStream) -> float:
        first = None
        async for _ in stream:
            first = first or time.perf_counter()
        assert first is not None
        return first

    firsts = await asyncio.gather(*(drain(s) for s in streams))
    end = time.perf_counter()
    after = engine.stats()
    decode_tokens = sum(len(s.request.output_ids) - 1 for s in streams)
    steps = after.step_seconds - before.step_seconds
    return {
        # after every request has its first token, all of them decode together
        "decode_tokens_per_s": decode_tokens / (end - max(firsts)),
        "first_token_ms": 1000 * (min(firsts) - start),
        "outside_runner_share": 1 - (after.forward_seconds - before.forward_seconds) / steps,
        "step_ms": 1000 * steps / (after.steps - before.steps),
    }


def bench_lyre(folder: Path, batches: list[int], tokens: int, constrained: bool) -> dict[int, dict[str, float]]:
    model = load_llama(folder, 1024, "cpu", "float32")
    engine = Engine(model, EngineConfig(max_batch=max(batches), max_seq_len=1024))
    try:
        asyncio.run(_lyre_once(engine, 1, 8, constrained))  # warm-up
        return {b: asyncio.run(_lyre_once(engine, b, tokens, constrained)) for b in batches}
    finally:
        engine.shutdown()


@torch.inference_mode()
def bench_transformers(folder: Path, batches: list[int], tokens: int) -> dict[int, dict[str, float]]:
    from transformers import LlamaForCausalLM

    model = LlamaForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()

    def generate(batch: int, n: int) -> float:
        ids = torch.tensor([PROMPT] * batch)
        start = time.perf_counter()
        model.generate(
            ids,
            attention_mask=torch.ones_like(ids),
            do_sample=True,
            max_new_tokens=n,
            min_new_tokens=n,
            eos_token_id=None,
            pad_token_id=0,
            **SAMPLING,
        )
        return time.perf_counter() - start

    generate(1, 4)  # warm-up
    results = {}
    for b in batches:
        first = generate(b, 1)
        total = generate(b, tokens)
        results[b] = {
            "decode_tokens_per_s": b * (tokens - 1) / (total - first),
            "first_token_ms": 1000 * first,
        }
    return results


# Decode-step paths timed side by side, each as (runner options, rows row by row at most): the CPU's in-place
# paths forced one way, the fixed-shape path (what a CUDA graph replays: K/V gathered up to the step's context
# bucket) at two max_seq_len, and compiled FlexAttention (reads blocks in place; ~20 s of compiling per context).
PATHS = {
    "spans": ({}, "spans"),  # a masked call per group of rows over the span of the pool they lie in (the default)
    "runs": ({}, "runs"),  # row by row over a view of each row's run of blocks: the old slot path's reading
    "blocks": ({}, "blocks"),  # block by block over the spans the rows' blocks lie in
    "gathered/2048": ({"fixed_shape": True, "max_seq_len": 2048}, None),
    "gathered/8192": ({"fixed_shape": True, "max_seq_len": 8192}, None),
    "flex": ({"attention": "flex"}, None),
}


def bench_context(folder: Path, contexts: list[int], batch: int, paths: list[str],
                  steps: int = 20, block_sizes: tuple[int | None, ...] = (None,)) -> dict[str, dict[int, float]]:
    """Mean decode-step milliseconds at ``batch`` rows of ``context`` keys each, per path of `PATHS`.

    The rows are placed straight at their context length, with blocks for
    every key (the cache's contents do not change the cost), so no prefill
    is timed.
    """
    longest = max(8192, max(contexts) + 64)
    model = load_llama(folder, longest, "cpu", "float32")
    results: dict[str, dict[int, float]] = {}
    for path, size in ((p, s) for p in paths for s in (block_sizes if p != "flex" else (None,))):
        options, cpu_path = PATHS[path]
        fixed = options.get("fixed_shape", False)
        config = EngineConfig(max_batch=batch, max_seq_len=options.get("max_seq_len", max(contexts) + 64),
                              attention=options.get("attention"), block_size=size)
        runner = ModelRunner(model, config, AUDIO_CONSTRAINT.family, fixed_shape=fixed)
        if cpu_path is not None:
            runner.cpu_decode = cpu_path
        name = f"{path}/{config.resolved_block_size}" if len(block_sizes) > 1 else path
        results[name] = {}
        for context in (c for c in contexts if c < config.max_seq_len):
            hand = ByHand(runner)  # a fresh pool's blocks: the last context's rows are done with theirs
            reqs = []
            for slot in range(batch):
                req = Request(f"r{slot}", PROMPT[:1] * (context - 1), SamplingParams(), seed=slot,
                              constraint=AUDIO_CONSTRAINT)
                req.output_ids = [128266]
                hand.place(req, slot)
                reqs.append(req)
            runner.step([], reqs)  # warm-up (and the compile, for flex)
            start = time.perf_counter()
            for _ in range(steps):
                runner.step([], reqs)  # the rows stay at their length: no token is appended
            results[name][context] = 1000 * (time.perf_counter() - start) / steps
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", type=Path, help="Llama checkpoint folder (default: the demo model)")
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 8, 32])
    parser.add_argument("--tokens", type=int, default=128, help="tokens generated per request")
    parser.add_argument("--contexts", type=int, nargs="+", default=[128, 512, 1024, 2048])
    parser.add_argument("--flex", action="store_true", help="also time compiled FlexAttention decode")
    parser.add_argument("--context-batches", type=int, nargs="+", default=[32],
                        help="batch sizes of the decode step timed by context (default: 32)")
    parser.add_argument("--block-sizes", type=int, nargs="+",
                        help="time the sdpa decode step with KV-cache blocks of each size (default: the engine's)")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()
    folder = choose_model(args.model).local()  # None: the demo, said on stderr
    paths = [p for p in PATHS if p != "flex"] + (["flex"] if args.flex else [])
    contexts = {b: bench_context(folder, args.contexts, b, paths, block_sizes=tuple(args.block_sizes or [None]))
                for b in args.context_batches}

    results = {
        "lyre (audio-constrained)": bench_lyre(folder, args.batches, args.tokens, constrained=True),
        "lyre (full vocabulary)": bench_lyre(folder, args.batches, args.tokens, constrained=False),
        "transformers generate": bench_transformers(folder, args.batches, args.tokens),
    }
    print(f"model {folder}, {args.tokens} tokens per request, torch {torch.__version__}, "
          f"{os.cpu_count()} CPUs ({platform.processor() or platform.machine()}), {torch.get_num_threads()} threads")
    print(f"{'engine':<26}{'batch':>6}{'decode tok/s':>14}{'first token ms':>16}{'outside runner':>16}{'step ms':>9}")
    for name, rows in results.items():
        for batch, r in rows.items():
            outside = f"{100 * r['outside_runner_share']:.0f}%" if "outside_runner_share" in r else "-"
            step = f"{r['step_ms']:.1f}" if "step_ms" in r else "-"
            print(f"{name:<26}{batch:>6}{r['decode_tokens_per_s']:>14.0f}{r['first_token_ms']:>16.1f}{outside:>16}{step:>9}")
    peer = results["transformers generate"]
    for name in ("lyre (audio-constrained)", "lyre (full vocabulary)"):
        ratios = ", ".join(
            f"batch {b}: {results[name][b]['decode_tokens_per_s'] / peer[b]['decode_tokens_per_s']:.1f}x"
            for b in args.batches
        )
        print(f"{name} vs transformers: {ratios}")
    for batch, by_path in contexts.items():
        print(f"decode step at batch {batch}, ms, by context (keys per row): "
              + "".join(f"{c:>8}" for c in args.contexts))
        for path, row in by_path.items():
            print(f"  {path:<16}" + "".join(f"{row[c]:>8.2f}" if c in row else f"{'-':>8}" for c in args.contexts))
    if args.json:
        args.json.write_text(json.dumps({"tokens": args.tokens, "results": results,
                                         "decode_step_ms": {str(b): c for b, c in contexts.items()}}, indent=2))


if __name__ == "__main__":
    main()
