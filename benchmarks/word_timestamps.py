"""Does asking for word timestamps slow the audio? Time to first audio over the TTS WebSocket with and
without ``add_timestamps``, and how long after a context's last audio its last timestamps arrive.

    lyre serve --stt &            # or without --stt: the aligner loads on the first request that asks
    .venv/bin/python benchmarks/word_timestamps.py http://127.0.0.1:8000 [--rounds 12] [--concurrency 2]

Each round opens ``--concurrency`` contexts at once, alternately with and without timestamps (so load
and warm-up fall on both alike), each speaking one of the texts below; the first round is a warm-up
that also loads an aligner of its own. TTFA is measured at the client, from the context's one message
to its first chunk.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time

import numpy as np
from websockets.asyncio.client import connect

TEXTS = [
    "Sure, I can help with that. Your order shipped this morning and should arrive on Thursday.",
    "The pharmacy on Main Street closes at nine tonight, but the one by the station is open late.",
    "Let me check. You have two meetings tomorrow, one at ten and one just after lunch.",
    "Thanks for waiting. I found three flights to Boston, the earliest leaving at six fifteen.",
]


async def _context(url: str, context_id: str, text: str, timestamps: bool, max_tokens: int) -> dict[str, float]:
    async with connect(f"{url}/v1/tts/websocket", max_size=None) as ws:
        sent = time.perf_counter()
        await ws.send(json.dumps({"context_id": context_id, "voice": {"mode": "id", "id": "tara"},
                                  "transcript": text, "continue": False, "add_timestamps": timestamps,
                                  "max_tokens": max_tokens}))
        first = last_audio = last_words = None
        words = 0
        while True:
            message = json.loads(await asyncio.wait_for(ws.recv(), 300))
            now = time.perf_counter()
            if message["type"] == "chunk":
                first = first or now
                last_audio = now
            elif message["type"] == "timestamps":
                last_words = now
                words += len(message["word_timestamps"]["words"])
            elif message["type"] == "error":
                raise RuntimeError(message["error"])
            if message["done"]:
                break
    assert first is not None and last_audio is not None
    return {"ttfa": first - sent, "lag": (last_words - last_audio) if last_words else float("nan"), "words": words}


async def _main(args: argparse.Namespace) -> None:
    url = args.url.replace("http://", "ws://").replace("https://", "wss://").rstrip("/")
    results: dict[bool, list[dict[str, float]]] = {False: [], True: []}
    for round_ in range(args.rounds + 1):
        jobs = []
        for i in range(args.concurrency):
            timestamps = (round_ + i) % 2 == 1
            jobs.append((timestamps, _context(url, f"r{round_}c{i}", TEXTS[(round_ + i) % len(TEXTS)], timestamps,
                                              args.max_tokens)))
        done = await asyncio.gather(*(job for _, job in jobs))
        if round_ == 0:
            continue  # warm-up
        for (timestamps, _), result in zip(jobs, done):
            results[timestamps].append(result)
    print(f"{args.url}: {args.rounds} rounds of {args.concurrency} contexts, max_tokens {args.max_tokens}")
    for timestamps, rows in results.items():
        ttfa = 1000 * np.array([r["ttfa"] for r in rows])
        line = (f"add_timestamps={str(timestamps).lower():5s} n={len(rows):3d}  TTFA p50 {np.median(ttfa):6.0f} ms"
                f"  p90 {np.percentile(ttfa, 90):6.0f} ms")
        if timestamps:
            lag = 1000 * np.array([r["lag"] for r in rows])
            line += (f"  last timestamps after last audio: p50 {np.nanmedian(lag):.0f} ms,"
                     f" p90 {np.nanpercentile(lag, 90):.0f} ms; {sum(r['words'] for r in rows)} words")
        print(line)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("url")
    p.add_argument("--rounds", type=int, default=12)
    p.add_argument("--concurrency", type=int, default=2)
    p.add_argument("--max-tokens", type=int, default=350, help="audio tokens per sentence (350: about 4 s)")
    asyncio.run(_main(p.parse_args()))


if __name__ == "__main__":
    main()
