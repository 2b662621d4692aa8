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

``stall``: a real ``lyre serve --llm demo`` (the demo TTS model and SmolLM2 in
one process) with streams playing, 8 streamed chat completions on the chat
engine and 8 TTS streams on the TTS engine, while 2,000-token chat prompts
arrive one after another: the gaps between a stream's chunks while a long
prompt is in the engine (p50, p99, max) and each long prompt's time to first
token; once with chunked prefill (``--max-step-tokens`` 512, the default) and
once without (a budget no prompt reaches).

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


LONG = "Tell me everything about the history of the city, its rivers, bridges, markets and people. " * 110
SPOKEN = "The quick brown fox jumps over the lazy dog, and then it runs far away into the quiet green hills."


def _quantiles(gaps: list[float]) -> dict[str, float]:
    ordered = sorted(gaps) or [0.0]
    return {"n": len(gaps), "p50_ms": 1000 * ordered[len(ordered) // 2],
            "p99_ms": 1000 * ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))], "max_ms": 1000 * ordered[-1]}


async def _stall_run(url: str, prompts: int) -> dict[str, object]:
    import httpx

    busy = asyncio.Event()  # a long prompt is in the engine
    stop = asyncio.Event()
    gaps: dict[str, list[float]] = {"chat": [], "tts": []}
    ttfts: list[float] = []
    prompt_tokens: list[int] = []

    async def keep_playing(http: httpx.AsyncClient, kind: str, i: int) -> None:
        while not stop.is_set():
            if kind == "tts":
                request = http.stream("POST", "/v1/audio/speech", json={
                    "input": SPOKEN, "voice": "tara", "response_format": "pcm", "max_tokens": 700, "seed": i})
            else:
                request = http.stream("POST", "/v1/chat/completions", json={
                    "model": "demo", "messages": [{"role": "user", "content": f"Count to {50 + i} slowly."}],
                    "max_tokens": 200, "temperature": 0.7, "seed": i, "stream": True})
            async with request as r:
                last = None
                async for _ in r.aiter_bytes():
                    now = time.perf_counter()
                    if last is not None and busy.is_set():
                        gaps[kind].append(now - last)
                    last = now
                    if stop.is_set():
                        break

    async def long_prompts(http: httpx.AsyncClient) -> None:
        await asyncio.sleep(8)  # every stream playing
        for _ in range(prompts):
            body = {"model": "demo", "messages": [{"role": "user", "content": LONG}], "max_tokens": 4,
                    "stream": True, "stream_options": {"include_usage": True}}
            start, first = time.perf_counter(), None
            busy.set()
            async with http.stream("POST", "/v1/chat/completions", json=body) as r:
                async for line in r.aiter_lines():
                    if line.startswith("data: {") and first is None and '"content"' in line:
                        first = time.perf_counter()
                        busy.clear()
                    if '"usage"' in line and '"prompt_tokens"' in line:
                        prompt_tokens.append(json.loads(line[6:])["usage"]["prompt_tokens"])
            busy.clear()
            ttfts.append((first or time.perf_counter()) - start)
            await asyncio.sleep(2)
        stop.set()

    async with httpx.AsyncClient(base_url=url, timeout=300) as http:
        players = [asyncio.create_task(keep_playing(http, kind, i)) for kind in ("chat", "tts") for i in range(8)]
        await long_prompts(http)
        for task in players:
            task.cancel()
        await asyncio.gather(*players, return_exceptions=True)
    return {"gaps": {kind: _quantiles(g) for kind, g in gaps.items()}, "long_prompt_ttft_s": ttfts,
            "long_prompt_tokens": prompt_tokens}


def stall(chunked: bool, prompts: int = 3) -> dict[str, object]:
    flags = ["--llm", "demo", "--llm-max-batch", "10", "--llm-max-seq-len", "2560", "--max-streams", "8",
             "--max-queue", "16", "--max-seq-len", "1024"]
    with running_server(*flags, *([] if chunked else ["--max-step-tokens", "1000000"])) as server:
        return asyncio.run(_stall_run(server.url, prompts))


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
        figures = {"chunked": stall(True), "whole": stall(False)}
        for name, run in figures.items():  # type: ignore[attr-defined]
            print(f"{name}: long prompts of {run['long_prompt_tokens']} tokens, time to first token "
                  f"{', '.join(f'{t:.2f}' for t in run['long_prompt_ttft_s'])} s")
            for kind, q in run["gaps"].items():
                print(f"  {kind} streams' gaps while a long prompt is in: n={q['n']} p50 {q['p50_ms']:.0f} ms, "
                      f"p99 {q['p99_ms']:.0f} ms, max {q['max_ms']:.0f} ms")
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
