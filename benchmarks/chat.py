"""Chat model throughput and latency on this machine: lyre's engine against transformers' generate.

On SmolLM2-135M-Instruct (the demo chat model, a Q4_1 GGUF file dequantised
to float32) it prints, at each batch size b (b requests of the same prompt
submitted at once), tokens/s and the time from submit to first token, for
lyre's engine and for ``LlamaForCausalLM.generate`` holding the same weights
with the same sampling (temperature 0.7, top_p 0.9): generate once with all b
prompts in one batch, and generate once per request, one after another (how a
server around generate serves requests that arrive on their own); then the
time to first token through a real ``lyre serve --no-tts --llm demo`` over
HTTP (streamed chat completions, one request at a time and 8 at once).

    .venv/bin/python benchmarks/chat.py
    .venv/bin/python benchmarks/chat.py --batches 1 8 --tokens 32 --json out.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import httpx
import torch

from lyre.engine import Engine, EngineConfig, RequestStream, SamplingParams
from lyre.models.gguf import load_gguf_llama, open_gguf
from lyre.models.llama import Llama
from lyre.llm import demo_gguf
from lyre.llm.chat_format import gguf_chat_format

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))  # the tests' server runner
from serving import running_server  # noqa: E402

QUESTION = "Tell me a story about a lighthouse keeper."
SAMPLING = {"temperature": 0.7, "top_p": 0.9}


async def _lyre_once(engine: Engine, prompt: list[int], batch: int, tokens: int) -> dict[str, float]:
    params = SamplingParams(max_tokens=tokens, repetition_penalty=1.0, **SAMPLING)  # no stop ids: all `tokens`
    start = time.perf_counter()
    streams = [engine.generate(prompt, params) for _ in range(batch)]

    async def drain(stream: RequestStream) -> float:
        first = None
        async for _ in stream:
            first = first or time.perf_counter()
        assert first is not None
        return first

    firsts = await asyncio.gather(*(drain(s) for s in streams))
    end = time.perf_counter()
    decode_tokens = sum(len(s.request.output_ids) - 1 for s in streams)
    return {"decode_tokens_per_s": decode_tokens / (end - max(firsts)), "first_token_ms": 1000 * (min(firsts) - start)}


def bench_lyre(model: Llama, prompt: list[int], batches: list[int], tokens: int) -> dict[int, dict[str, float]]:
    engine = Engine(model, EngineConfig(max_batch=max(batches), max_seq_len=len(prompt) + tokens))
    try:
        asyncio.run(_lyre_once(engine, prompt, 1, 4))  # warm-up
        return {b: asyncio.run(_lyre_once(engine, prompt, b, tokens)) for b in batches}
    finally:
        engine.shutdown()


class _FirstToken:
    """A generate() streamer that notes when the first new token arrives (the first put is the prompt)."""

    def __init__(self) -> None:
        self.puts = 0
        self.at: float | None = None

    def put(self, value: torch.Tensor) -> None:
        self.puts += 1
        if self.puts == 2:
            self.at = time.perf_counter()

    def end(self) -> None:
        pass


@torch.inference_mode()
def bench_transformers(model: Llama, prompt: list[int], batches: list[int],
                       tokens: int) -> dict[str, dict[int, dict[str, float]]]:
    """Two ways to serve b requests with generate: all in one padded batch (they must arrive together),
    or one after another as they come (what a server around generate does with independent requests)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    c = model.config
    reference = LlamaForCausalLM(LlamaConfig(
        vocab_size=c.vocab_size, hidden_size=c.hidden_size, intermediate_size=c.intermediate_size,
        num_hidden_layers=c.num_hidden_layers, num_attention_heads=c.num_attention_heads,
        num_key_value_heads=c.num_key_value_heads, head_dim=c.head_dim, rope_theta=c.rope_theta,
        rms_norm_eps=c.rms_norm_eps, tie_word_embeddings=True)).eval()
    reference.load_state_dict(model.state_dict(), strict=False)  # the same dequantised weights; lm_head is tied

    def generate(batch: int, n: int, streamer: _FirstToken | None = None) -> float:
        ids = torch.tensor([prompt] * batch)
        start = time.perf_counter()
        reference.generate(ids, attention_mask=torch.ones_like(ids), do_sample=True, max_new_tokens=n,
                           min_new_tokens=n, eos_token_id=None, pad_token_id=0, streamer=streamer, **SAMPLING)
        return time.perf_counter() - start

    generate(1, 4)  # warm-up
    batched, serial = {}, {}
    for b in batches:
        first = generate(b, 1)
        total = generate(b, tokens)
        batched[b] = {"decode_tokens_per_s": b * (tokens - 1) / (total - first), "first_token_ms": 1000 * first}
        start = time.perf_counter()
        firsts = []
        for _ in range(b):
            streamer = _FirstToken()
            generate(1, tokens, streamer)
            assert streamer.at is not None
            firsts.append(streamer.at - start)
        serial[b] = {"decode_tokens_per_s": b * tokens / (time.perf_counter() - start),
                     "first_token_ms": 1000 * statistics.mean(firsts)}
    return {"transformers generate, batched": batched, "transformers generate, per request": serial}


def bench_server(requests: int, concurrency: tuple[int, ...]) -> dict[int, dict[str, float]]:
    """Client-side time to the first content chunk of a streamed chat completion."""
    body = {"messages": [{"role": "user", "content": QUESTION}], "max_tokens": 16, "stream": True, **SAMPLING}

    async def one(client: httpx.AsyncClient, url: str) -> float:
        start = time.perf_counter()
        async with client.stream("POST", f"{url}/v1/chat/completions", json=body) as r:
            lines = r.aiter_lines()
            async for line in lines:
                if line.startswith("data: {") and '"content": "' in line and '"content": ""' not in line:
                    first = time.perf_counter() - start
                    break
            else:
                raise RuntimeError("no content chunk")
            async for _ in lines:  # the rest of the answer
                pass
        return first

    async def level(url: str, n: int) -> list[float]:
        async with httpx.AsyncClient(timeout=120) as client:
            await one(client, url)  # warm the connection
            out: list[float] = []
            for _ in range(requests):
                out += await asyncio.gather(*(one(client, url) for _ in range(n)))
            return out

    results = {}
    with running_server("--no-tts", "--llm", "demo", "--llm-max-batch", str(max(concurrency))) as server:
        for n in concurrency:
            ttft = sorted(asyncio.run(level(server.url, n)))
            results[n] = {"p50_ms": 1000 * statistics.median(ttft), "p90_ms": 1000 * ttft[int(0.9 * (len(ttft) - 1))]}
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 8, 32])
    parser.add_argument("--tokens", type=int, default=64, help="tokens generated per request")
    parser.add_argument("--server-requests", type=int, default=10, help="rounds per server concurrency level")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()

    reader = open_gguf(demo_gguf())
    model = load_gguf_llama(reader, 2048, "cpu", "float32")
    prompt = gguf_chat_format(reader, "smollm2").prompt_ids([{"role": "user", "content": QUESTION}])
    results = {"lyre engine": bench_lyre(model, prompt, args.batches, args.tokens),
               **bench_transformers(model, prompt, args.batches, args.tokens)}
    server = bench_server(args.server_requests, (1, 8))
    print(f"SmolLM2-135M-Instruct (Q4_1 GGUF -> float32), {len(prompt)}-token prompt, {args.tokens} tokens per "
          f"request, torch {torch.__version__}, {os.cpu_count()} CPUs ({platform.processor() or platform.machine()}), "
          f"{torch.get_num_threads()} threads")
    print(f"{'engine':<36}{'batch':>6}{'decode tok/s':>14}{'first token ms':>16}")
    for name, rows in results.items():
        for batch, r in rows.items():
            print(f"{name:<36}{batch:>6}{r['decode_tokens_per_s']:>14.0f}{r['first_token_ms']:>16.1f}")
    ours = results["lyre engine"]
    for name in ("transformers generate, batched", "transformers generate, per request"):
        ratios = ", ".join(f"batch {b}: {ours[b]['decode_tokens_per_s'] / results[name][b]['decode_tokens_per_s']:.1f}x"
                           for b in args.batches)
        print(f"lyre vs {name}, tokens/s: {ratios}")
    print("time to first token through lyre serve (streamed /v1/chat/completions, client side):")
    for n, r in server.items():
        print(f"  {n} at once: p50 {r['p50_ms']:.0f} ms, p90 {r['p90_ms']:.0f} ms")
    if args.json:
        args.json.write_text(json.dumps({"tokens": args.tokens, "results": results, "server": server}, indent=2))


if __name__ == "__main__":
    main()
