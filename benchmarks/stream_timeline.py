"""One streamed request's timeline, in process: where the time goes between the text and each chunk.

    flock -x /work/cpu.lock .venv/bin/python benchmarks/stream_timeline.py [--requests 3] [--engine-threads N]
        [--codec-threads N] [--concurrency 1] [--json PATH]

Loads the demo model (or --model), warms up, then speaks the bench's built-in texts one at a time (280 tokens,
seed k) and prints, per request: the prefill, every engine step (its length, whether the codec was decoding
meanwhile), every codec call (frames, queue wait, cost) and every chunk (when it left, its frames, the
listener's buffer just before it and the gap it ended). It reads the engine's and the codec's own timings
by wrapping their recorder and decoder (instrumentation only: nothing else changes). ``--engine-threads`` and
``--codec-threads`` are ServingConfig's (default: as served; 2 and 2 is how it ran before the split).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time

import torch

from lyre.bench.texts import BUILTIN_TEXTS
from lyre.orpheus import SAMPLES_PER_FRAME
from lyre.tts import TTS, ServingConfig, SpeechOptions


def instrument(tts: TTS, log: dict) -> None:
    recorder, decoder = tts.engine.recorder, tts.codec.streaming
    record_step, push = recorder.record_step, decoder.push

    def step(batch, seconds):  # called on the engine's thread right after the step
        log["engine_threads"] = torch.get_num_threads()
        end = time.monotonic()
        log["steps"].append((end - seconds, end, len(batch.prefill), len(batch.decode)))
        return record_step(batch, seconds)

    def decode(feeds):  # on the codec's thread
        log["codec_threads"] = torch.get_num_threads()
        start = time.monotonic()
        out = list(push(feeds))
        log["decodes"].append((start, time.monotonic(), sum(len(frames) for _, frames in feeds)))
        return out

    recorder.record_step, decoder.push = step, decode


async def one(tts: TTS, text: str, seed: int) -> dict:
    opts = SpeechOptions(max_tokens=280, seed=seed)
    codec, stats = tts.codec, tts.engine.stats()
    rates = (1000 * codec.recent_seconds_per_frame, 1000 * codec.recent_wait_s, 7000 * stats.recent_step_seconds)
    t0 = time.monotonic()
    stream = tts.stream(text, voice="tara", options=opts)
    chunks = []
    async for pcm in stream:
        now = time.monotonic()
        chunks.append((now, len(pcm) / SAMPLES_PER_FRAME, stream.clock.gaps[-1] if stream.clock.gaps else 0.0,
                       len(stream.clock.gaps)))
    return {"t0": t0, "chunks": chunks, "gaps": list(stream.clock.gaps), "ttfa": stream.ttfa_s, "rates": rates}


async def together(tts: TTS, ks: range) -> list[dict]:
    return await asyncio.gather(*(one(tts, BUILTIN_TEXTS[k % len(BUILTIN_TEXTS)], k) for k in ks))


def report(name: str, res: dict, log: dict) -> dict:
    t0 = res["t0"]
    steps = [s for s in log["steps"] if s[0] >= t0 - 0.01]
    decodes = [d for d in log["decodes"] if d[0] >= t0 - 0.01]
    busy = [(d[0], d[1]) for d in decodes]

    def overlaps(a, b):
        return any(s < b and a < e for s, e in busy)

    prefill = [s for s in steps if s[2]]
    plain = [1000 * (e - s) for s, e, p, d in steps if not p and not overlaps(s, e)]
    shared = [1000 * (e - s) for s, e, p, d in steps if not p and overlaps(s, e)]
    costs = [(1000 * (e - s), f) for s, e, f in decodes]
    print(f"== {name}: ttfa {1000 * res['ttfa']:.0f} ms, gaps {[round(1000 * g) for g in res['gaps']]} ms")
    print("   rates at the start (ms): decode per frame %.1f, queue wait %.1f, generation per frame %.1f" % res["rates"])
    if prefill:
        print(f"   prefill {1000 * (prefill[0][1] - prefill[0][0]):.0f} ms (ends at +{1000 * (prefill[0][1] - t0):.0f})")
    med = lambda xs: statistics.median(xs) if xs else float("nan")  # noqa: E731
    print(f"   decode steps: {len(plain)} alone, median {med(plain):.1f} ms; {len(shared)} while the codec ran, "
          f"median {med(shared):.1f} ms (frame = 7 steps)")
    print(f"   codec: {len(costs)} calls, ms per frame median "
          f"{med([c / f for c, f in costs]):.1f}; calls (frames:ms) {[f'{f}:{c:.0f}' for c, f in costs]}")
    print("   chunks: +ms frames gap_ms")
    print("   " + " ".join(f"+{1000 * (t - t0):.0f}/{f:.0f}" for t, f, _, _ in res["chunks"]))
    return {"ttfa_ms": 1000 * res["ttfa"], "gaps_ms": [1000 * g for g in res["gaps"]],
            "step_alone_ms": med(plain), "step_with_codec_ms": med(shared),
            "decode_ms_per_frame": med([c / f for c, f in costs]),
            "chunks": [(1000 * (t - t0), f) for t, f, _, _ in res["chunks"]],
            "decodes": [(1000 * (s - t0), 1000 * (e - t0), f) for s, e, f in decodes],
            "steps": [(1000 * (s - t0), 1000 * (e - t0), p, d) for s, e, p, d in steps]}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model")
    p.add_argument("--requests", type=int, default=3)
    p.add_argument("--concurrency", type=int, default=1, help="requests started together")
    p.add_argument("--engine-threads", type=int)
    p.add_argument("--codec-threads", type=int)
    p.add_argument("--json")
    args = p.parse_args()
    tts = TTS.load(args.model, None, ServingConfig(engine_threads=args.engine_threads, codec_threads=args.codec_threads))
    log: dict = {"steps": [], "decodes": []}
    instrument(tts, log)
    out = []
    try:
        asyncio.run(one(tts, BUILTIN_TEXTS[0], 0))  # warm-up
        for k in range(0, args.requests, args.concurrency):
            ks = range(k + 1, min(args.requests, k + args.concurrency) + 1)
            results = asyncio.run(together(tts, ks))
            out += [report(f"request {j}", res, log) for j, res in zip(ks, results)]
        print(f"torch threads: engine {log.get('engine_threads')}, codec {log.get('codec_threads')}")
    finally:
        tts.close()
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f)


if __name__ == "__main__":
    main()
