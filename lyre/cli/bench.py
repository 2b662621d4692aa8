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
    bench.add_argument("url", nargs="?", help="server base URL, e.g. http://127.0.0.1:8000 (or --serve)")
    trials = bench.add_argument_group("trials on fresh servers")
    trials.add_argument("--serve", metavar="COMMAND",
                        help="start this server for every trial instead of loading a running one, e.g. "
                             "'lyre serve --port {port}' ({port}: a free port); waited for until /ready, stopped "
                             "after its sweep")
    trials.add_argument("--trials", type=int, default=1, help="sweeps per seed, each on a fresh server (default: 1)")
    trials.add_argument("--seeds", type=int, nargs="+", metavar="S",
                        help="repeat the trials for each seed (request k gets seed + k; default: --seed)")
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
    bench.add_argument("--max-tokens", type=int, default=280,
                       help="per segment: the built-in texts are one each (default: 280, about 3.4 s of audio)")
    bench.add_argument("--seed", type=int, default=None, help="request k gets seed + k (default: unseeded)")
    bench.add_argument("--voice", default="tara")
    bench.add_argument("--texts", metavar="FILE_OR_SET",
                       help="texts to speak: a file of one per line, or a prompt set built with --build-texts "
                            "(seed-tts-en) (default: built-in)")
    bench.add_argument("--build-texts", nargs=2, metavar=("SET", "META"),
                       help="build a prompt set from a local copy of its test set and stop: seed-tts-en from "
                            "seed-tts-eval's en/meta.lst")
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
    bench.add_argument("--plots", type=Path, metavar="DIR", help="write ttfa.png, viable.png and audible.png here")
    bench.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from lyre import bench
    from lyre.bench.texts import build_prompt_set, named_or_file

    if args.build_texts:
        path, count = build_prompt_set(args.build_texts[0], Path(args.build_texts[1]))
        print(f"lyre: {count} texts of {args.build_texts[0]} in {path}", file=sys.stderr)
        return 0
    if (args.url is None) == (args.serve is None):
        raise ValueError("give the server's URL, or --serve COMMAND to start one for each trial (not both)")
    if args.serve and args.compare:
        raise ValueError("--compare runs against a running server; with --serve, run each command on its own")
    try:
        texts = named_or_file(args.texts) if args.texts else bench.BUILTIN_TEXTS
    except OSError as exc:
        raise ValueError(f"--texts: {exc}") from None
    url = args.url or "http://127.0.0.1"  # each trial's own server replaces it
    config = bench.BenchConfig(
        urls=(url, args.compare) if args.compare else (url,),
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
    if args.serve:
        return _trials(args, config)
    result = asyncio.run(bench.run_bench(config))
    print(bench.format_table(result))
    _write(args, bench.to_json(result), result)
    if not any(level.summary.ok for target in result.targets for level in target.levels):
        print("lyre: error: no request completed (see the errors above)", file=sys.stderr)
        return 1
    return 0


def _trials(args: argparse.Namespace, config: object) -> int:
    from lyre import bench

    plan = bench.TrialPlan(args.serve, args.trials, tuple(args.seeds) if args.seeds else (args.seed,))
    runs = asyncio.run(bench.run_trials(plan, config))  # type: ignore[arg-type]
    for run in runs:
        print(f"== trial {run.trial + 1}, seed {run.seed}: {run.command}")
        print(bench.format_table(run.result))
    rows = bench.spread(runs)
    print(bench.format_spread(rows, "streams" if args.concurrency or not args.rate else "req/s"))
    document = {"spread": rows, "trials": [{"seed": run.seed, "trial": run.trial, "command": run.command,
                                            **bench.to_json(run.result)} for run in runs]}
    _write(args, document, runs[-1].result)
    if not any(level.summary.ok for run in runs for level in run.result.targets[0].levels):
        print("lyre: error: no request completed (see the errors above)", file=sys.stderr)
        return 1
    return 0


def _write(args: argparse.Namespace, document: dict[str, object], result: object) -> None:
    import json

    from lyre import bench

    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(document, indent=1) + "\n")
    if args.plots:
        for path in bench.write_plots(result, args.plots):  # type: ignore[arg-type]
            print(f"lyre: wrote {path}", file=sys.stderr)
