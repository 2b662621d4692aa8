"""The window planner replayed against measured decode costs: how often a listener would run dry, offline.

    .venv/bin/python benchmarks/window_replay.py --timeline TIMELINE.json [--spread 0 0.25 0.5 1]
        [--requests 400] [--frames 40] [--generate-ms 29] [--decode-ms 24] [--seed 0]

A model, not a measurement of the server: one stream, frames made every ``--generate-ms`` (log-normal, 15%
spread), each window's decode costing its frames x ``--decode-ms`` x a ratio drawn from the timeline's decodes
(each decode's cost per frame over its request's median: what `benchmarks/stream_timeline.py --json` recorded
on this device), the listener starting at the first chunk at real time. The planner is lyre's own
(lyre.tts.windows), handed the medians as its rates and woken as the stream wakes it: when it has the frames it
asked for, or its patience ends. It prints, for each ``WindowPolicy.spread``, the time to first audio (from the
first token) and the requests whose worst gap is over 20 ms: the trade the spread makes, on costs that spread
as this device's do. Cases: as measured, the codec 25% slower, generation 40% slower, and short utterances.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics

from lyre.orpheus import FRAME_SECONDS
from lyre.tts.windows import Rates, WindowPlanner, WindowPolicy


def ratios(path: str) -> list[float]:
    """Each recorded decode's cost per frame over its request's median."""
    with open(path) as f:
        requests = json.load(f)
    return [(end - start) / frames / r["decode_ms_per_frame"] for r in requests for start, end, frames in r["decodes"]]


def replay(rng: random.Random, spread: list[float], policy: WindowPolicy, generate_s: float, decode_s: float,
           frames: int) -> tuple[float, float]:
    """One request: (time to first audio, its worst gap), seconds."""
    rates = Rates(play_s=FRAME_SECONDS, generate_s=generate_s, decode_s=decode_s)
    made, t = [], 0.0
    for _ in range(frames):
        t += generate_s * rng.lognormvariate(0.0, 0.15)
        made.append(t)
    planner, pushed, now, dry, first, worst = WindowPlanner(policy), 0, 0.0, None, 0.0, 0.0

    def out(window) -> None:  # decoded one after another, as the stream awaits each
        nonlocal now, dry, first, worst
        now += window.n_frames * decode_s * rng.choice(spread)
        if dry is None:
            dry = first = now
        worst = max(worst, now - dry)
        dry = max(dry, now) + (window.keep[1] - window.keep[0]) * FRAME_SECONDS

    while True:
        while pushed < frames and made[pushed] <= now:
            planner.push((pushed,) * 7)
            pushed += 1
        ahead = 0.0 if dry is None else dry - now
        if (window := planner.next_window(ahead, rates)) is not None:
            out(window)
            continue
        if pushed == frames:
            break
        wanted = made[min(frames, pushed + planner.frames_wanted(ahead, rates)) - 1]
        patience = planner.patience(ahead, rates)
        now = max(now, wanted if patience is None else min(wanted, now + patience)) + 1e-6
    for window in planner.finish():
        out(window)
    return first, worst


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--timeline", required=True, help="benchmarks/stream_timeline.py --json output")
    p.add_argument("--spread", type=float, nargs="+", default=[0.0, 0.25, 0.5, 1.0])
    p.add_argument("--requests", type=int, default=400)
    p.add_argument("--frames", type=int, default=40, help="frames an utterance (40: the bench's ~3.4 s)")
    p.add_argument("--generate-ms", type=float, default=29.0)
    p.add_argument("--decode-ms", type=float, default=24.0)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    spread, g, d, n = ratios(args.timeline), args.generate_ms / 1000, args.decode_ms / 1000, args.frames
    print(f"{len(spread)} decodes' cost ratios; 5th/50th/95th percentile "
          + " / ".join(f"{q:.2f}" for q in statistics.quantiles(spread, n=20)[::9]) + f", max {max(spread):.2f}")
    cases = [("as measured", g, d, n), ("codec +25%", g, 1.25 * d, n), ("generation +40%", 1.4 * g, d, n),
             ("12 frames", g, d, 12), ("8 frames", g, d, 8)]
    print(f"{'spread':>6}  {'case':<16} {'ttfa p50 ms':>11}  {'gap > 20 ms':>11}  {'worst ms':>8}")
    for s in args.spread:
        policy = WindowPolicy(spread=s)
        for label, gs, ds, frames in cases:
            rng = random.Random(args.seed)
            runs = [replay(rng, spread, policy, gs, ds, frames) for _ in range(args.requests)]
            gapped = sum(w > 0.02 for _, w in runs)
            print(f"{s:>6.2f}  {label:<16} {1000 * statistics.median(f for f, _ in runs):>11.0f}  "
                  f"{gapped:>5}/{args.requests:<5}  {1000 * max(w for _, w in runs):>8.0f}")


if __name__ == "__main__":
    main()
