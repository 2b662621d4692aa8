"""The block KV cache: streams per memory (computed), and a conversation's turns with and without prefix caching.

``streams``: the KV pool of a 48 GB card for Orpheus 3B's shape (28 layers,
8 kv heads of 128, bf16: 112 KiB a position), what is left of 48 GB after
the weights and working memory (``--pool-gb``, 39 by default); replies drawn
as the issue describes them (prompts of 30-60 tokens, 200-800 audio tokens).
Slots of ``max_seq_len`` 2048 hold a fixed count; blocks of 16 hold streams
by what each has said. Counted two ways: every stream at its longest (what
the pool must hold if all end at once), and streams at a uniformly random
point of their reply (a server in steady state). Nothing is allocated.

``turns``: a real ``lyre serve --no-tts --llm demo`` (SmolLM2 on this CPU), a
6-turn conversation through ``/v1/chat/completions`` with a 300-token system
prompt, each turn's time to first streamed token; once with prefix caching,
once with ``--no-prefix-caching``.

``stall``: SmolLM2's engine in this process, 4 requests decoding when a
2,100-token prompt arrives: that prompt's time to first token and the gaps
between the other requests' tokens (p50, p99, max); once with chunked
prefill (a step budget of 512 tokens, the default) and once without (a
budget no prompt reaches). Chunking bounds a step on the engine the long
prompt is in; the TTS engine is another engine, which no chat prompt can
hold up except by sharing the CPU.

    .venv/bin/python benchmarks/kv_cache.py streams
    .venv/bin/python benchmarks/kv_cache.py turns --json out.json
    .venv/bin/python benchmarks/kv_cache.py stall
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import sys
import time
from pathlib import Path

import httpx

from lyre.engine.block_manager import BlockManager

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))  # the tests' server runner
from serving import running_server  # noqa: E402

POSITION_BYTES = 2 * 28 * 8 * 128 * 2  # keys and values, layers, kv heads, head_dim, bf16: 112 KiB
SYSTEM = ("You are the voice of a helpful assistant on a phone line. Answer in one or two short sentences, "
          "spoken aloud, with no lists, no markdown and no numbers written as digits. ") * 6
QUESTIONS = ["What is the capital of France?", "And how many people live there?", "What river runs through it?",
             "Name a famous museum there.", "What is it known for?", "Thank you, goodbye."]


def streams(pool_gb: float, seed: int = 0, block_size: int = 16, max_seq_len: int = 2048) -> dict[str, float]:
    pool = int(pool_gb * 1e9)
    slots = pool // (max_seq_len * POSITION_BYTES)
    rng = random.Random(seed)

    def fill(at_end: bool) -> int:
        blocks = BlockManager(pool // (block_size * POSITION_BYTES), block_size, caching=False)
        count = 0
        while True:
            prompt, reply = rng.randint(30, 60), rng.randint(200, 800)
            said = reply if at_end else rng.randint(1, reply)
            if blocks.admit([0] * (prompt + said), "") is None:
                return count
            count += 1

    return {"slots": slots, "blocks_all_at_longest": fill(True), "blocks_steady_state": fill(False)}


def turns(no_prefix_caching: bool, max_tokens: int = 16) -> list[dict[str, float]]:
    flags = ["--no-tts", "--llm", "demo", "--llm-max-batch", "2", "--llm-max-seq-len", "2048"]
    with running_server(*flags, *(["--no-prefix-caching"] if no_prefix_caching else [])) as server:
        messages = [{"role": "system", "content": SYSTEM}]
        out = []
        with httpx.Client(base_url=f"{server.url}/v1", timeout=120) as http:
            for question in QUESTIONS:
                messages.append({"role": "user", "content": question})
                body = {"model": "demo", "messages": messages, "max_tokens": max_tokens, "temperature": 0,
                        "stream": True, "stream_options": {"include_usage": True}}
                start, first, answer, prompt_tokens = time.perf_counter(), None, "", 0
                with http.stream("POST", "/chat/completions", json=body) as r:
                    r.raise_for_status()
                    for line in r.iter_lines():
                        if not line.startswith("data: ") or line == "data: [DONE]":
                            continue
                        chunk = json.loads(line[6:])
                        if chunk.get("usage"):
                            prompt_tokens = chunk["usage"]["prompt_tokens"]
                        for choice in chunk.get("choices", []):
                            if choice["delta"].get("content"):
                                first = first or time.perf_counter()
                                answer += choice["delta"]["content"]
                assert first is not None, "no token came back"
                out.append({"prompt_tokens": prompt_tokens, "ttft_s": first - start})
                messages.append({"role": "assistant", "content": answer})
        hits = server.metric("lyre_chat_engine_prefix_cache_hits_total")
        out.append({"prefix_cache_hits": hits})
    return out


def stall(budget: int, streams: int = 4, prompt_tokens: int = 2100) -> dict[str, float]:
    """SmolLM2's engine with ``streams`` decoding when a ``prompt_tokens`` prompt arrives: its time to first
    token, and the gaps between the decoding streams' tokens (p50, p99, max), at a step budget of ``budget``."""
    from lyre.engine import Engine, EngineConfig, SamplingParams
    from lyre.models.gguf import load_gguf_llama, open_gguf
    from lyre.llm import demo_gguf

    model = load_gguf_llama(open_gguf(demo_gguf()), 2560, "cpu", "float32")
    engine = Engine(model, EngineConfig(max_batch=8, max_seq_len=2560, max_step_tokens=budget, seed=1))
    long = [1 + (i * 7919) % 40000 for i in range(prompt_tokens)]  # shares no block with anything cached

    async def run() -> dict[str, float]:
        gaps: list[float] = []

        async def decode(i: int) -> None:
            last = None
            async for _ in engine.generate([5, 6, 7, 8 + i] * 8, SamplingParams(max_tokens=300, temperature=0.7)):
                now = time.perf_counter()
                if last is not None:
                    gaps.append(now - last)
                last = now

        tasks = [asyncio.create_task(decode(i)) for i in range(streams)]
        await asyncio.sleep(2)  # every stream decoding
        start, first = time.perf_counter(), None
        async for _ in engine.generate(long, SamplingParams(max_tokens=2)):
            first = first or time.perf_counter()
        await asyncio.gather(*tasks)
        gaps.sort()
        assert first is not None
        return {"long_prompt_ttft_s": first - start, "gap_p50_ms": 1000 * gaps[len(gaps) // 2],
                "gap_p99_ms": 1000 * gaps[int(0.99 * len(gaps))], "gap_max_ms": 1000 * gaps[-1]}

    try:
        return asyncio.run(run())
    finally:
        engine.shutdown()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("what", choices=("streams", "turns", "stall"))
    parser.add_argument("--pool-gb", type=float, default=39.0, help="the KV pool for `streams` (default: 39)")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()
    if args.what == "streams":
        figures: object = streams(args.pool_gb)
        print(f"KV pool {args.pool_gb:g} GB, Orpheus 3B shape (112 KiB a position): {figures}")
    elif args.what == "stall":
        figures = {"chunks of 512": stall(512), "whole": stall(10**6)}
        for name, run in figures.items():  # type: ignore[attr-defined]
            print(f"{name:<14} long prompt's first token {run['long_prompt_ttft_s']:.2f} s; the other streams' "
                  f"gaps p50 {run['gap_p50_ms']:.0f} ms, p99 {run['gap_p99_ms']:.0f} ms, max {run['gap_max_ms']:.0f} ms")
    else:
        figures = {"prefix caching": turns(False), "no prefix caching": turns(True)}
        print("turn  prompt tokens  TTFT with caching  TTFT without")
        with_, without = figures["prefix caching"], figures["no prefix caching"]  # type: ignore[index]
        for i, (a, b) in enumerate(zip(with_[:-1], without[:-1]), start=1):
            print(f"{i:>4}{a['prompt_tokens']:>15}{a['ttft_s']:>19.3f}{b['ttft_s']:>14.3f}")
        print(f"prefix cache hits (blocks): {with_[-1]['prefix_cache_hits']:.0f} with, "
              f"{without[-1]['prefix_cache_hits']:.0f} without")
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
