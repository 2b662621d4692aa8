"""SNAC decode cost per window and per emitted frame, by batch size and window width.

A streaming request decodes windows of frames and keeps the middle: a
narrow window (1 new frame between its context: 4 frames with the default
`WindowPolicy`) while the stream is barely ahead of playback, a wide one
(``max_new`` new frames: 11) once it is ahead. For each width and batch size this times
`SnacDecoder.decode_windows` with noise on, after warm-up, and prints the
median over several runs, then the CPU batch policy the numbers imply
(`lyre.codec.service.CPU_MAX_BATCH`).

Then the same for the streaming decoder (`lyre.codec.streaming`), which
decodes each frame once with each stream's state kept: ms per emitted frame
at each batch of streams with 1, 2 and 4 new frames a call; and how far
each way's audio is from the whole utterance's decode of the same codes
(SNR, dB: windows seam where their context runs out; the stream is exact to
float rounding).

    .venv/bin/python benchmarks/codec.py
    .venv/bin/python benchmarks/codec.py --batches 1 4 --runs 3 --threads 1 --codec path/to/snac_24khz
    .venv/bin/python benchmarks/codec.py --threads 1 --batches 1 2 4 8 16
"""

from __future__ import annotations

import argparse
import platform
import random
import statistics
import time
from pathlib import Path

import numpy as np
import torch

from lyre.codec import BatchPolicy, CodecWindow, SnacDecoder, load_snac
from lyre.codec.streaming import StreamingSnac
from lyre.models.demo import demo_model
from lyre.common.device import resolve_device
from lyre.orpheus import SAMPLES_PER_FRAME, SAMPLE_RATE, codes_to_snac_levels
from lyre.tts import WindowPolicy

# (frames in the window, kept frames [a, b)), as lyre's planner cuts them by default.
_POLICY = WindowPolicy()
WIDTHS = {
    "narrow": (_POLICY.left + 1 + _POLICY.right, (_POLICY.left, _POLICY.left + 1)),
    "wide": (_POLICY.left + _POLICY.max_new + _POLICY.right, (_POLICY.left, _POLICY.left + _POLICY.max_new)),
}
# A batch must beat single decodes by this much per window to be worth it.
MIN_GAIN = 0.05


def make_windows(batch: int, n_frames: int, keep: tuple[int, int], rng: random.Random) -> list[CodecWindow]:
    return [
        CodecWindow(
            frames=tuple(tuple(rng.randrange(4096) for _ in range(7)) for _ in range(n_frames)),
            start_frame=rng.randrange(1000),
            keep=keep,
            seed=rng.randrange(2**63),
        )
        for _ in range(batch)
    ]


def median_seconds(decoder: SnacDecoder, windows: list[CodecWindow], warmup: int, runs: int) -> float:
    for _ in range(warmup):
        decoder.decode_windows(windows)
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        decoder.decode_windows(windows)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--codec", type=Path, default=None, help="SNAC folder or hub id (default: the demo codec)")
    parser.add_argument("--device", default="cpu", help="cpu, cuda[:N] or auto (default: cpu)")
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 2, 4, 8])
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--threads", type=int, default=None, help="torch intra-op threads (default: torch's)")
    args = parser.parse_args()
    if 1 not in args.batches:
        parser.error("--batches must include 1: other sizes are compared against it")
    if args.threads is not None:
        torch.set_num_threads(args.threads)

    # Timing needs no trained weights: SNAC's cost is its shape, so the demo's random codec is the default.
    decoder = SnacDecoder(load_snac(args.codec or demo_model().codec, device=resolve_device(args.device)))
    rng = random.Random(0)
    print(f"{platform.processor() or platform.machine()}, torch {torch.__version__}, {torch.get_num_threads()} threads")
    print(f"{'width':>12} {'batch':>5} {'ms/call':>9} {'ms/window':>10} {'ms/frame':>9} {'x realtime':>10}")
    per_window: dict[str, dict[int, float]] = {}
    for name, (n_frames, keep) in WIDTHS.items():
        kept = keep[1] - keep[0]
        per_window[name] = {}
        for batch in args.batches:
            seconds = median_seconds(decoder, make_windows(batch, n_frames, keep, rng), args.warmup, args.runs)
            per_window[name][batch] = seconds / batch
            audio_seconds = batch * kept * SAMPLES_PER_FRAME / SAMPLE_RATE
            label = f"{name} {n_frames}/{kept}"
            print(
                f"{label:>12} {batch:>5} {1000 * seconds:>9.1f} {1000 * seconds / batch:>10.1f}"
                f" {1000 * seconds / (batch * kept):>9.1f} {audio_seconds / seconds:>10.2f}"
            )
    print(f"implied CPU policy: {implied_policy(per_window)}")
    print(f"BatchPolicy.for_device('cpu') now: {BatchPolicy.for_device('cpu')}")
    streaming(decoder, args.batches, args.warmup, args.runs, rng)
    equality(decoder, rng)


def streaming(decoder: SnacDecoder, batches: list[int], warmup: int, runs: int, rng: random.Random) -> None:
    """ms per emitted frame of the streaming decoder, each stream well into its utterance."""
    print(f"{'streaming':>12} {'batch':>5} {'frames/call':>11} {'ms/call':>9} {'ms/frame':>9} {'x realtime':>10}")
    stream = StreamingSnac(decoder.model, slots=max(batches))
    for batch in batches:
        for per_call in (1, 2, 4):
            slots = [stream.open(seed=rng.randrange(2**63)) for _ in range(batch)]
            frames = [tuple(rng.randrange(4096) for _ in range(7)) for _ in range(per_call)]
            feeds = [(slot, frames) for slot in slots]
            for _ in range(warmup + 3):  # past the start, where the masks work
                stream.push(feeds)
            times = []
            for _ in range(runs):
                start = time.perf_counter()
                stream.push(feeds)
                times.append(time.perf_counter() - start)
            for slot in slots:
                stream.close(slot)
            seconds = statistics.median(times)
            audio_seconds = batch * per_call * SAMPLES_PER_FRAME / SAMPLE_RATE
            print(f"{'streaming':>12} {batch:>5} {per_call:>11} {1000 * seconds:>9.1f}"
                  f" {1000 * seconds / (batch * per_call):>9.1f} {audio_seconds / seconds:>10.2f}")


def equality(decoder: SnacDecoder, rng: random.Random, n: int = 24) -> None:
    """SNR of each way's audio against the whole utterance's decode of the same 24 frames."""
    frames = tuple(tuple(rng.randrange(4096) for _ in range(7)) for _ in range(n))
    whole = decoder.decode(codes_to_snac_levels(frames), seed=1).astype(np.float64)

    def snr(audio: np.ndarray) -> float:
        return 10 * np.log10(np.sum(whole ** 2) / max(np.sum((audio - whole) ** 2), 1e-30))

    for name, new in (("narrow", 1), ("wide", _POLICY.max_new)):
        pieces = []
        for first in range(0, n, new):
            last = min(n, first + new)
            lo, hi = max(0, first - _POLICY.left), min(n, last + _POLICY.right)
            window = CodecWindow(frames=frames[lo:hi], start_frame=lo, keep=(first - lo, last - lo), seed=1)
            pieces += decoder.decode_windows([window])
        print(f"equality: {name} windows (left {_POLICY.left}, right {_POLICY.right}): "
              f"{snr(np.concatenate(pieces)):.1f} dB")
    stream = StreamingSnac(decoder.model, slots=1)
    slot = stream.open(seed=1)
    pieces = [stream.push([(slot, frames[i:i + 1])])[0] for i in range(n)] + stream.finish([slot])
    print(f"equality: streaming, a frame a call: {snr(np.concatenate(pieces)):.1f} dB "
          f"(lookahead {stream.lookahead} samples)")


def implied_policy(per_window: dict[str, dict[int, float]]) -> BatchPolicy:
    """The batch size with the best worst-case per-window time relative to
    single decodes, if it beats them by MIN_GAIN at every width; else 1.

    On a CPU a batch only saves per-call overhead, and a window waiting for
    company loses more than that, so the wait is always 0: the worker takes
    whatever is already queued.
    """
    batches = sorted(next(iter(per_window.values())))
    worst = {b: max(times[b] / times[batches[0]] for times in per_window.values()) for b in batches}
    best = min(batches, key=worst.__getitem__)
    return BatchPolicy(max_batch=best if worst[best] <= 1 - MIN_GAIN else 1, max_wait_ms=0.0)


if __name__ == "__main__":
    main()
