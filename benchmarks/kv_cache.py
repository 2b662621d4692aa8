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

    .venv/bin/python benchmarks/kv_cache.py streams
    .venv/bin/python benchmarks/kv_cache.py turns --json out.json
"""

from __future__ import annotations

import argparse
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("what", choices=("streams", "turns"))
    parser.add_argument("--pool-gb", type=float, default=39.0, help="the KV pool for `streams` (default: 39)")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()
    if args.what == "streams":
        figures: object = streams(args.pool_gb)
        print(f"KV pool {args.pool_gb:g} GB, Orpheus 3B shape (112 KiB a position): {figures}")
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
