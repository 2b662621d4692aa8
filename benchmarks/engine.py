"""Engine throughput and latency on this machine, against transformers' generate.

For the demo model (or --model) at each batch size it prints decode tokens/s,
the share of a step spent outside the model forward, and the time from submit
to first token; then the same for ``LlamaForCausalLM.generate`` with the same
sampling settings (temperature 0.6, top_p 0.8, repetition_penalty 1.3), the
peer most users start from.

lyre runs twice: constrained to Orpheus's audio ids, the way TTS requests run
(the output projection and sampling see 4,097 ids per step), and unconstrained
over the full 156,940-id vocabulary, the like-for-like comparison.

    .venv/bin/python benchmarks/engine.py
    .venv/bin/python benchmarks/engine.py --batches 1 8 --tokens 64 --json out.json
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

from lyre.demo_model import demo_model
from lyre.engine import Engine, EngineConfig, RequestStream, SamplingParams
from lyre.engine.loader import load_llama
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
        "outside_forward_share": 1 - (after.forward_seconds - before.forward_seconds) / steps,
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", type=Path, help="Llama checkpoint folder (default: the demo model)")
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 8, 32])
    parser.add_argument("--tokens", type=int, default=128, help="tokens generated per request")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()
    folder = args.model or demo_model().model

    results = {
        "lyre (audio-constrained)": bench_lyre(folder, args.batches, args.tokens, constrained=True),
        "lyre (full vocabulary)": bench_lyre(folder, args.batches, args.tokens, constrained=False),
        "transformers generate": bench_transformers(folder, args.batches, args.tokens),
    }
    print(f"model {folder}, {args.tokens} tokens per request, torch {torch.__version__}, "
          f"{os.cpu_count()} CPUs ({platform.processor() or platform.machine()}), {torch.get_num_threads()} threads")
    print(f"{'engine':<26}{'batch':>6}{'decode tok/s':>14}{'first token ms':>16}{'outside fwd':>13}{'step ms':>9}")
    for name, rows in results.items():
        for batch, r in rows.items():
            outside = f"{100 * r['outside_forward_share']:.0f}%" if "outside_forward_share" in r else "-"
            step = f"{r['step_ms']:.1f}" if "step_ms" in r else "-"
            print(f"{name:<26}{batch:>6}{r['decode_tokens_per_s']:>14.0f}{r['first_token_ms']:>16.1f}{outside:>13}{step:>9}")
    peer = results["transformers generate"]
    for name in ("lyre (audio-constrained)", "lyre (full vocabulary)"):
        ratios = ", ".join(
            f"batch {b}: {results[name][b]['decode_tokens_per_s'] / peer[b]['decode_tokens_per_s']:.1f}x"
            for b in args.batches
        )
        print(f"{name} vs transformers: {ratios}")
    if args.json:
        args.json.write_text(json.dumps({"tokens": args.tokens, "results": results}, indent=2))


if __name__ == "__main__":
    main()
