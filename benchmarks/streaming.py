"""Streaming-audio figures on this machine, on the demo model (or --model, with the codec it needs, or --codec).

1. Codec work: emitted audio seconds per codec CPU second, for the reference
   scheme (decode the last 4 frames after every frame, keep one) and for
   lyre's streaming decoder (each frame once: 1 frame a call, or 4).
2. Time to first audio in process: one request alone, and 4 at once.
3. Concurrent real-time streams: N streams at once; a stream is viable when
   every chunk arrives before the audio before it has played out (chunk i,
   i >= 2, arrives at t_i - t_1 <= duration of chunks 1..i-1).

    .venv/bin/python benchmarks/streaming.py
    .venv/bin/python benchmarks/streaming.py --levels 1 2 4 --tokens 210
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time

import numpy as np

from lyre.codec import CodecWindow, SnacDecoder, load_snac
from lyre.codec.streaming import StreamingSnac
from lyre.models.choice import choose_weights
from lyre.orpheus import SAMPLE_RATE, SAMPLES_PER_FRAME, TOKENS_PER_SECOND
from lyre.tts import TTS, PacingPolicy, ServingConfig, SpeechOptions, TTSConfig

TEXT = "Hello there, it is good to hear from you again today."


def codec_efficiency(decoder: SnacDecoder, n: int = 60) -> dict[str, float]:
    """Emitted audio seconds per CPU second of decoding, per scheme."""
    rng = np.random.default_rng(0)
    frames = [tuple(int(c) for c in rng.integers(0, 4096, 7)) for _ in range(n)]
    reference = [CodecWindow(tuple(frames[i - 3 : i + 1]), i - 3, (1, 2)) for i in range(3, n)]
    decoder.decode_windows([reference[0]])  # warm-up
    cpu = time.process_time()
    samples = sum(len(decoder.decode_windows([w])[0]) for w in reference)
    out = {"reference (4-frame window per frame)": samples / SAMPLE_RATE / (time.process_time() - cpu)}
    stream = StreamingSnac(decoder.model, slots=1)
    for per_call in (1, 4):
        slot = stream.open(seed=0)
        stream.push([(slot, frames[:per_call])])  # warm-up
        cpu, samples = time.process_time(), 0
        for at in range(per_call, n - per_call + 1, per_call):
            samples += len(stream.push([(slot, frames[at:at + per_call])])[0])
        samples += len(stream.finish([slot])[0])
        out[f"lyre streaming ({per_call} frame{'s' if per_call > 1 else ''} a call)"] = (
            samples / SAMPLE_RATE / (time.process_time() - cpu))
    return out


async def _one(tts: TTS, seed: int, tokens: int) -> tuple[float, list[float], list[float]]:
    """TTFA (s), and each chunk's arrival time and duration."""
    start = time.perf_counter()
    arrivals, durations = [], []
    async for chunk in tts.stream(TEXT, "tara", SpeechOptions(seed=seed, max_tokens=tokens), trim=False):
        arrivals.append(time.perf_counter())
        durations.append(len(chunk) / SAMPLE_RATE)
    return arrivals[0] - start, arrivals, durations


def viable(arrivals: list[float], durations: list[float]) -> bool:
    """Every chunk arrived before the audio received before it had played out."""
    played = 0.0
    for i in range(1, len(arrivals)):
        played += durations[i - 1]
        if arrivals[i] - arrivals[0] > played:
            return False
    return True


async def load_level(tts: TTS, n: int, tokens: int) -> dict[str, float]:
    results = await asyncio.gather(*(_one(tts, 1000 + i, tokens) for i in range(n)))
    ttfa = sorted(r[0] for r in results)
    return {
        "streams": n,
        "ttfa_p50_ms": 1000 * statistics.median(ttfa),
        "ttfa_max_ms": 1000 * ttfa[-1],
        "viable_share": sum(viable(r[1], r[2]) for r in results) / n,
        "audio_s": sum(r[2]) if (r := results[0]) else 0.0,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", help="Orpheus folder or hub id (default: the demo model, random weights)")
    parser.add_argument("--codec", help="SNAC 24 kHz folder or hub id, or demo (default: the codec the model needs)")
    parser.add_argument("--levels", type=int, nargs="+", default=[1, 2, 4, 6, 8])
    parser.add_argument("--tokens", type=int, default=280, help="max tokens per stream (7 per frame)")
    parser.add_argument("--max-first-frames", type=int, default=None,
                        help="frames of audio in each stream's first chunk, at most (default: as the rates ask)")
    args = parser.parse_args()
    codec = choose_weights(args.model, args.codec).codec.local()  # says on stderr what it took, and from where

    print("1. codec work: emitted audio s per codec CPU s")
    for label, value in codec_efficiency(SnacDecoder(load_snac(codec))).items():
        print(f"   {label:<40}{value:8.2f}")

    config = TTSConfig(pacing=PacingPolicy(first_most=args.max_first_frames or PacingPolicy.first_most))
    serving = ServingConfig(max_streams=max(max(args.levels), 4), max_seq_len=1024)
    tts = TTS.load(args.model, args.codec, serving, config)
    try:
        asyncio.run(_one(tts, 0, 21))  # warm-up
        alone = [asyncio.run(_one(tts, s, 70))[0] for s in range(5)]
        four = asyncio.run(load_level(tts, 4, 70))
        print("2. time to first audio, in process")
        print(f"   1 request:   median {1000 * statistics.median(alone):.0f} ms over 5")
        print(f"   4 at once:   p50 {four['ttfa_p50_ms']:.0f} ms, max {four['ttfa_max_ms']:.0f} ms")
        print(f"3. concurrent streams, {args.tokens // 7} frames ({args.tokens // 7 * SAMPLES_PER_FRAME / SAMPLE_RATE:.1f} s) each")
        print(f"   {'streams':>8}{'TTFA p50 ms':>13}{'TTFA max ms':>13}{'viable':>8}")
        held = 0
        for n in args.levels:
            r = asyncio.run(load_level(tts, n, args.tokens))
            print(f"   {n:>8}{r['ttfa_p50_ms']:>13.0f}{r['ttfa_max_ms']:>13.0f}{100 * r['viable_share']:>7.0f}%")
            if r["viable_share"] == 1.0:
                held = n
        print(f"   most streams with every stream viable: {held}")
        codec_stats, engine_stats = tts.codec.stats(), tts.engine.stats()
        audio = engine_stats.tokens / TOKENS_PER_SECOND  # every token is 1/7 of an 85 ms frame
        print(f"   codec: {codec_stats.frames} frames in {codec_stats.batches} calls "
              f"(mean {codec_stats.mean_batch:.2f}), queue wait max {1000 * codec_stats.queue_wait_max_s:.0f} ms")
        print(f"   wall seconds per audio second: engine steps {engine_stats.step_seconds / audio:.2f}, "
              f"codec decodes {codec_stats.decode_seconds / audio:.2f} (both share the same cores)")
    finally:
        tts.close()


if __name__ == "__main__":
    main()
