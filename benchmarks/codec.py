"""SNAC decode cost per emitted frame: the streaming decoder lyre serves with, against decoding windows.

lyre decodes each frame once (`lyre.codec.streaming`: each stream's state
kept, its audio the whole utterance's decode). This times it at each batch of
streams with 1, 2 and 4 new frames a call, each stream well into its
utterance, after warm-up, noise on, and prints the median over several runs.

For comparison it times the windows other Orpheus servers decode (and lyre
did before): a narrow window (1 new frame between 1 frame of context before
and 2 after: 4 frames, as the Orpheus reference decodes after every frame)
and a wide one (8 new frames: 11), batched as many as the streams.

Last, how far each way's audio is from the whole utterance's decode of the
same codes (SNR, dB: windows seam where their context runs out; the stream is
exact to float rounding).

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
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

from lyre.codec import BatchPolicy, CodecWindow, SnacDecoder, load_snac
from lyre.codec.streaming import StreamingSnac
from lyre.models.demo import demo_model
from lyre.common.device import resolve_device
from lyre.orpheus import SAMPLES_PER_FRAME, SAMPLE_RATE, codes_to_snac_levels

# Windows: frames of context before and after the new ones, and the new ones in a wide window.
LEFT, RIGHT, WIDE = 1, 2, 8
# (frames in the window, kept frames [a, b)).
WIDTHS = {"narrow": (LEFT + 1 + RIGHT, (LEFT, LEFT + 1)), "wide": (LEFT + WIDE + RIGHT, (LEFT, LEFT + WIDE))}


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


def median_seconds(call: Callable[[], object], warmup: int, runs: int) -> float:
    """The median wall seconds of ``call()`` over ``runs`` runs, after ``warmup`` more."""
    for _ in range(warmup):
        call()
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        call()
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
    if args.threads is not None:
        torch.set_num_threads(args.threads)

    # Timing needs no trained weights: SNAC's cost is its shape, so the demo's random codec is the default.
    decoder = SnacDecoder(load_snac(args.codec or demo_model().codec, device=resolve_device(args.device)))
    rng = random.Random(0)
    print(f"{platform.processor() or platform.machine()}, torch {torch.__version__}, {torch.get_num_threads()} threads")
    streaming(decoder, args.batches, args.warmup, args.runs, rng)
    print(f"streaming calls as the service makes them here: {BatchPolicy.for_device(args.device)}")
    print(f"{'width':>12} {'batch':>5} {'ms/call':>9} {'ms/window':>10} {'ms/frame':>9} {'x realtime':>10}")
    for name, (n_frames, keep) in WIDTHS.items():
        kept = keep[1] - keep[0]
        for batch in args.batches:
            windows = make_windows(batch, n_frames, keep, rng)
            seconds = median_seconds(lambda: decoder.decode_windows(windows), args.warmup, args.runs)
            audio_seconds = batch * kept * SAMPLES_PER_FRAME / SAMPLE_RATE
            label = f"{name} {n_frames}/{kept}"
            print(
                f"{label:>12} {batch:>5} {1000 * seconds:>9.1f} {1000 * seconds / batch:>10.1f}"
                f" {1000 * seconds / (batch * kept):>9.1f} {audio_seconds / seconds:>10.2f}"
            )
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
            seconds = median_seconds(lambda: stream.push(feeds), warmup + 3, runs)  # past the start: no masks
            for slot in slots:
                stream.close(slot)
            audio_seconds = batch * per_call * SAMPLES_PER_FRAME / SAMPLE_RATE
            print(f"{'streaming':>12} {batch:>5} {per_call:>11} {1000 * seconds:>9.1f}"
                  f" {1000 * seconds / (batch * per_call):>9.1f} {audio_seconds / seconds:>10.2f}")


def equality(decoder: SnacDecoder, rng: random.Random, n: int = 24) -> None:
    """SNR of each way's audio against the whole utterance's decode of the same 24 frames."""
    frames = tuple(tuple(rng.randrange(4096) for _ in range(7)) for _ in range(n))
    whole = decoder.decode(codes_to_snac_levels(frames), seed=1).astype(np.float64)

    def snr(audio: np.ndarray) -> float:
        return 10 * np.log10(np.sum(whole ** 2) / max(np.sum((audio - whole) ** 2), 1e-30))

    for name, new in (("narrow", 1), ("wide", WIDE)):
        pieces = []
        for first in range(0, n, new):
            last = min(n, first + new)
            lo, hi = max(0, first - LEFT), min(n, last + RIGHT)
            window = CodecWindow(frames=frames[lo:hi], start_frame=lo, keep=(first - lo, last - lo), seed=1)
            pieces += decoder.decode_windows([window])
        print(f"equality: {name} windows (left {LEFT}, right {RIGHT}): "
              f"{snr(np.concatenate(pieces)):.1f} dB")
    stream = StreamingSnac(decoder.model, slots=1)
    slot = stream.open(seed=1)
    pieces = [stream.push([(slot, frames[i:i + 1])])[0] for i in range(n)] + stream.finish([slot])
    print(f"equality: streaming, a frame a call: {snr(np.concatenate(pieces)):.1f} dB "
          f"(lookahead {stream.lookahead} samples)")


if __name__ == "__main__":
    main()
