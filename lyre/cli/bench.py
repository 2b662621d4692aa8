"""``lyre bench``: load a running server level by level and report what its listeners got."""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from pathlib import Path

__all__ = ["add_parser", "run"]


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    bench = sub.add_parser(
        "bench", help="measure a running server under load: TTFA, streaming viability, streams held at the SLO",
        description="Load a running lyre server (over HTTP or the WebSocket) level by level and report "
                    "client-side TTFA, end-to-end time, RTF, viable streams and the server's own metrics.")
    bench.add_argument("url", help="server base URL, e.g. http://127.0.0.1:8000")
    bench.add_argument("--compare", metavar="URL2", help="run the same sweep against a second server (e.g. a baseline)")
    bench.add_argument("--labels", nargs="+", metavar="NAME", default=(),
                       help="names for the server (and the one compared) in the table and plots (default: A, B)")
    bench.add_argument("--api", choices=("http", "ws"), default="http",
                       help="POST /v1/audio/speech, or the streaming WebSocket (one socket per stream)")
    load = bench.add_mutually_exclusive_group()
    load.add_argument("--concurrency", type=int, nargs="+", metavar="N",
                      help="closed-loop sweep: N streams sending back to back (default: 1 2 4 8)")
    load.add_argument("--rate", type=float, nargs="+", metavar="R", help="open-loop sweep: R requests/s arriving")
    bench.add_argument("--burstiness", type=float, default=1.0,
                       help="gamma shape of --rate arrivals: 1 = Poisson, below 1 burstier (default: 1)")
    bench.add_argument("--warmup", type=int, default=2,
                       help="excluded per level: each stream's first N requests, or (with --rate) the first N s")
    bench.add_argument("--duration", type=float, default=30.0,
                       help="seconds of measured requests per level at most, warm-up excluded (default: 30)")
    bench.add_argument("--requests", type=int, default=64, help="measured requests per level at most (default: 64)")
    bench.add_argument("--max-tokens", type=int, default=280, help="per request (default: 280, about 3.4 s of audio)")
    bench.add_argument("--seed", type=int, default=None, help="request k gets seed + k (default: unseeded)")
    bench.add_argument("--voice", default="tara")
    bench.add_argument("--texts", type=Path, metavar="FILE", help="texts to speak, one per line (default: built-in)")
    bench.add_argument("--new-connection-per-request", action="store_true",
                       help="a new HTTP client per request instead of one pooled client, to see what pooling saves")
    bench.add_argument("--timeout", type=float, default=120.0, help="seconds per request (default: 120)")
    bench.add_argument("--api-key", default=os.environ.get("LYRE_API_KEY"), help="Bearer key (default: $LYRE_API_KEY)")
    bench.add_argument("--playback-rate", type=float, default=1.0,
                       help="listeners play at this times real time when judging viability: for experiments "
                            "against a server started with the same --playback-rate (default: 1)")
    bench.add_argument("--slo-ttfa-ms", type=float, default=250.0, help="SLO: p90 TTFA at most this (default: 250)")
    bench.add_argument("--slo-viable", type=float, default=0.99, help="SLO: viable share at least this (default: 0.99)")
    bench.add_argument("--json", type=Path, metavar="PATH", help="write every figure, request and setting here")
    bench.add_argument("--plots", type=Path, metavar="DIR", help="write ttfa.png and viable.png here")
    bench.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    import json

    from lyre import bench

    try:
        texts = bench.load_texts(args.texts) if args.texts else bench.BUILTIN_TEXTS
    except OSError as exc:
        raise ValueError(f"--texts: {exc}") from None
    config = bench.BenchConfig(
        urls=(args.url, args.compare) if args.compare else (args.url,),
        api=args.api,
        mode="rate" if args.rate else "concurrency",
        levels=tuple(args.rate or args.concurrency or (1, 2, 4, 8)),
        burstiness=args.burstiness,
        warmup=args.warmup,
        duration_s=args.duration,
        max_requests=args.requests,
        max_tokens=args.max_tokens,
        seed=args.seed,
        voice=args.voice,
        texts=texts,
        pooled=not args.new_connection_per_request,
        timeout_s=args.timeout,
        api_key=args.api_key or None,
        slo=bench.Slo(args.slo_ttfa_ms, args.slo_viable),
        labels=tuple(args.labels),
        playback_rate=args.playback_rate,
    )
    result = asyncio.run(bench.run_bench(config))
    print(bench.format_table(result))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(bench.to_json(result), indent=1) + "\n")
    if args.plots:
        for path in bench.write_plots(result, args.plots):
            print(f"lyre: wrote {path}", file=sys.stderr)
    if not any(level.summary.ok for target in result.targets for level in target.levels):
        print("lyre: error: no request completed (see the errors above)", file=sys.stderr)
        return 1
    return 0
