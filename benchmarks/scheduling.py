"""Scheduling on playback deadlines against first-come, on a scaled playback clock, and sentence gaps.

This CPU cannot keep even one stream in real time (a SNAC window decodes
slower than a frame plays), so listeners are taken to play at ``--rate`` times
real time: the server runs with ``--playback-rate R`` and the load generator
judges viability at the same R. The SLO's TTFA limit is scaled to 250 ms / R
(everything the listener notices is slowed by R).

1. ``lyre serve --scheduler fcfs`` and ``--scheduler deadline`` in turn, the
   same concurrency sweep against each: streams held at the (scaled) SLO and
   p90 time to first audio per level.
2. Sentence gaps on the WebSocket: one context whose three sentences are all
   sent at once; for a listener at rate R, the longest wait between chunks
   and the total time playback stalls (audio ran out before the next chunk).
   ``--ws-url`` measures another running server the same way (for example an
   older lyre, to compare).

    .venv/bin/python benchmarks/scheduling.py --out docs/bench
    .venv/bin/python benchmarks/scheduling.py --gaps-only --ws-url ws://127.0.0.1:8000
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import sys
import time
from pathlib import Path
from typing import Any

from websockets.asyncio.client import connect

from lyre import bench

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))  # the tests' server runner
from serving import running_server

SENTENCES = ("The weather today is mild, with a light breeze from the west. ",
             "Later in the afternoon the clouds will gather over the hills. ",
             "By the evening, expect a little rain and cooler air.")
_SAMPLE_BYTES_PER_S = 2 * 24_000


async def sentence_gaps(ws_url: str, rate: float, max_tokens: int, seed: int) -> dict[str, float]:
    """One three-sentence context; the listener's view of its chunks at ``rate`` times real time."""
    async with connect(ws_url + "/v1/tts/websocket", max_size=None) as ws:
        sent = time.perf_counter()
        for i, sentence in enumerate(SENTENCES):
            await ws.send(json.dumps({"context_id": "gaps", "voice": {"mode": "id", "id": "tara"},
                                      "transcript": sentence, "continue": i < len(SENTENCES) - 1,
                                      "max_tokens": max_tokens, "seed": seed}))
        arrivals: list[tuple[float, float]] = []  # (seconds since sent, audio seconds)
        while not (message := json.loads(await ws.recv()))["done"]:
            if message["type"] == "chunk":
                audio_s = len(base64.b64decode(message["data"])) / _SAMPLE_BYTES_PER_S
                arrivals.append((time.perf_counter() - sent, audio_s))
        if message["type"] == "error":
            raise RuntimeError(message["error"])
    stall, play_end = 0.0, arrivals[0][0]
    for arrival, audio_s in arrivals:
        stall += max(0.0, arrival - play_end)
        play_end = max(play_end, arrival) + audio_s / rate
    gaps = [b[0] - a[0] for a, b in zip(arrivals, arrivals[1:])]
    return {"ttfa_s": arrivals[0][0], "chunks": len(arrivals), "audio_s": sum(a for _, a in arrivals),
            "max_gap_s": max(gaps, default=0.0), "stall_s": stall}


def _gaps(ws_url: str, rate: float, runs: int, max_tokens: int) -> dict[str, Any]:
    rows = [asyncio.run(sentence_gaps(ws_url, rate, max_tokens, seed=100 + i)) for i in range(runs)]
    return {"runs": rows, "stall_s_mean": sum(r["stall_s"] for r in rows) / runs,
            "max_gap_s_mean": sum(r["max_gap_s"] for r in rows) / runs}


def _sweep(url: str, rate: float, levels: list[int], requests: int, max_tokens: int) -> bench.BenchResult:
    config = bench.BenchConfig(urls=(url,), levels=tuple(float(n) for n in levels), warmup=1, duration_s=120.0,
                               max_requests=requests, max_tokens=max_tokens, seed=0, playback_rate=rate,
                               slo=bench.Slo(ttfa_p90_ms=250.0 / rate))
    return asyncio.run(bench.run_bench(config))


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rate", type=float, default=0.25, help="listeners play at this times real time")
    p.add_argument("--concurrency", type=int, nargs="+", default=[1, 2, 3, 4, 6, 8])
    p.add_argument("--requests", type=int, default=12, help="measured requests per level")
    p.add_argument("--max-tokens", type=int, default=168, help="per request (168: 2 s of audio)")
    p.add_argument("--gap-runs", type=int, default=3)
    p.add_argument("--gaps-only", action="store_true", help="only the sentence gaps, against --ws-url")
    p.add_argument("--ws-url", help="measure the sentence gaps of this running server instead")
    p.add_argument("--out", type=Path)
    args = p.parse_args()
    report: dict[str, Any] = {"rate": args.rate}
    if args.ws_url:
        report["gaps"] = _gaps(args.ws_url, args.rate, args.gap_runs, 84)
    if not args.gaps_only:
        for scheduler in ("fcfs", "deadline"):
            with running_server("--scheduler", scheduler, "--playback-rate", f"{args.rate:g}",
                                "--max-streams", str(max(args.concurrency)), "--max-queue", "32") as server:
                if not args.ws_url and scheduler == "deadline":
                    report["gaps"] = _gaps(server.ws_url, args.rate, args.gap_runs, 84)
                result = _sweep(server.url, args.rate, args.concurrency, args.requests, args.max_tokens)
            print(f"== {scheduler}\n{bench.format_table(result)}", flush=True)
            report[scheduler] = bench.to_json(result)
    lines = []
    if "fcfs" in report:
        lines += [f"listeners at {args.rate:g}x real time; SLO p90 TTFA <= {250 / args.rate:g} ms, >= 99% viable",
                  "| streams | fcfs TTFA p90 ms | fcfs viable | deadline TTFA p90 ms | deadline viable |",
                  "|---:|---:|---:|---:|---:|"]
        fcfs, deadline = (report[s]["targets"][0] for s in ("fcfs", "deadline"))
        for a, b in zip(fcfs["levels"], deadline["levels"]):
            lines.append(f"| {a['load']:g} | {_ms(a['ttfa_p90_s'])} | {_pct(a['viable_share'])} "
                         f"| {_ms(b['ttfa_p90_s'])} | {_pct(b['viable_share'])} |")
        lines.append(f"streams held at the SLO: fcfs {_held(fcfs)}, deadline {_held(deadline)}")
    gaps = report["gaps"]
    lines.append(f"sentence gaps ({len(gaps['runs'])} three-sentence contexts, listener at {args.rate:g}x): "
                 f"mean longest wait between chunks {1000 * gaps['max_gap_s_mean']:.0f} ms, "
                 f"mean playback stall {1000 * gaps['stall_s_mean']:.0f} ms")
    print("\n".join(lines))
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "scheduling.json").write_text(json.dumps(report, indent=1) + "\n")
        (args.out / "scheduling.md").write_text("\n".join(lines) + "\n")
    return 0


def _ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{1000 * seconds:.0f}"


def _pct(share: float | None) -> str:
    return "-" if share is None else f"{100 * share:.0f}%"


def _held(target: dict[str, Any]) -> str:
    return "none" if target["headline"] is None else f"{target['headline']:g}"


if __name__ == "__main__":
    sys.exit(main())
