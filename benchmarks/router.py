"""What ``lyre route`` costs and what its ring does: the figures docs/benchmarks.md quotes.

1. The ring (no processes): the share of routing identities that move when a
   server joins or leaves, against the ideal 1/N; and max/average load when
   concurrent streams with a Zipf voice mix are placed with and without the
   load bound.
2. The hop (real processes on loopback: redis-server, one registered
   ``lyre serve`` on the demo model, one ``lyre route``): speech requests
   alternating through the router and direct (TTFA p50/p90 each way and the
   difference: pairs back to back see the same machine), ``lyre bench``
   through the router and direct in one run (two sweeps, one after the
   other), the router's CPU time per request, and the latency of a tiny
   request (GET /v1/models) through the router and direct, interleaved, which
   isolates the hop from the model's own variance.
3. The fronts: ``lyre route``, HAProxy and nginx side by side on the same keys
   and servers (benchmarks/router_fronts.py): keys moved when one of N servers
   leaves, the most-loaded server's share under a Zipf mix with and without a
   load bound, added latency (HTTP first byte, WebSocket first audio) and CPU
   per 1,000 requests.

    .venv/bin/python benchmarks/router.py                    # about 10 minutes on 2 cores
    .venv/bin/python benchmarks/router.py --requests 10 --tiny 100
    .venv/bin/python benchmarks/router.py --only fronts      # the comparison alone
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import statistics
import sys
import time
from collections import Counter
from pathlib import Path

import httpx

from lyre import bench
from lyre.fleet.records import ServerRecord
from lyre.fleet.router.ring import Ring

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))  # the tests' process runners
from fleet_processes import Redis, route, serve, wait_ready
from router_fronts import hop_table, ring_tables


_IDLE_S = 10.0  # the router's idle CPU is measured over this long, and taken off the busy figure


def _fleet(n: int) -> list[ServerRecord]:
    return [ServerRecord(url=f"http://10.0.0.{i}:8000", capacity=32) for i in range(n)]


def remap_table(ids: int) -> list[str]:
    keys = [f"session:{i}" for i in range(ids)]
    lines = ["| servers N | moved on leave | moved on join (N to N+1) | ideal 1/N, 1/(N+1) |", "|---|---|---|---|"]
    for n in (3, 4, 8, 16):
        servers = _fleet(n + 1)
        full, fewer, more = Ring(servers[:n]), Ring(servers[:n - 1]), Ring(servers)
        homes = {k: full.home(k) for k in keys}
        left = sum(homes[k] != fewer.home(k) for k in keys) / ids
        joined = sum(homes[k] != more.home(k) for k in keys) / ids
        lines.append(f"| {n} | {left:.3f} | {joined:.3f} | {1 / n:.3f}, {1 / (n + 1):.3f} |")
    return lines


def zipf_table(seeds: int) -> list[str]:
    lines = ["| servers | streams | voices (Zipf s=1.1) | max/avg, no bound | max/avg, c=1.25 | max/avg, c=1.1 |",
             "|---|---|---|---|---|---|"]
    for n, streams, voices in ((4, 64, 50), (8, 256, 200), (16, 512, 500)):
        ring = Ring(_fleet(n))
        row = []
        for c in (1e9, 1.25, 1.1):
            worst = []
            for seed in range(seeds):
                rng = random.Random(seed)
                names = [f"voice:v{i}" for i in range(voices)]
                weights = [1 / (r + 1) ** 1.1 for r in range(voices)]
                loads: Counter[str] = Counter()
                for voice in rng.choices(names, weights, k=streams):
                    loads[ring.route(voice, loads, load_factor=c).server] += 1  # type: ignore[union-attr]
                worst.append(max(loads.values()) / (streams / n))
            row.append(f"{statistics.mean(worst):.2f} (worst {max(worst):.2f})")
        lines.append(f"| {n} | {streams} | {voices} | " + " | ".join(row) + " |")
    return lines


def _cpu_s(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime


def _tiny(router: str, direct: str, n: int) -> tuple[list[float], list[float]]:
    """GET /v1/models n times each way, interleaved, on pooled connections; latencies in seconds."""
    through, straight = [], []
    with httpx.Client(timeout=10) as client:
        for url in (router, direct):  # warm the pools
            client.get(url + "/v1/models")
        for _ in range(n):
            for url, out in ((router, through), (direct, straight)):
                start = time.perf_counter()
                assert client.get(url + "/v1/models").status_code == 200
                out.append(time.perf_counter() - start)
    return through, straight


def _interleaved_ttfa(router: str, direct: str, n: int, max_tokens: int) -> tuple[list[float], list[float]]:
    """Speech requests alternating through the router and direct: time to the first audio byte, in seconds.

    Pairs taken back to back see the same machine, where two sweeps one after the other may not.
    """
    through, straight = [], []
    body = {"input": "Hello there, how are you?", "voice": "tara", "response_format": "pcm",
            "max_tokens": max_tokens, "seed": 0}
    with httpx.Client(timeout=60) as client:
        for i in range(n):
            for url, out in ((router, through), (direct, straight))[:: 1 if i % 2 else -1]:
                start = time.perf_counter()
                with client.stream("POST", url + "/v1/audio/speech", json=body) as r:
                    assert r.status_code == 200
                    chunks = r.iter_raw()
                    next(chunks)
                    out.append(time.perf_counter() - start)
                    for _ in chunks:  # the rest of the answer, so the connection goes back to the pool
                        pass
    return through, straight


def _pct(values: list[float], q: float) -> float:
    value = bench.percentile(values, q)
    assert value is not None
    return value


def hop_figures(requests: int, tiny: int, max_tokens: int) -> list[str]:
    redis = Redis().start()
    server = serve(redis.url, "--max-streams", "4", ttl_s=3.0)
    router = route(redis.url)
    try:
        wait_ready([server])
        wait_ready([router])
        time.sleep(1.5)  # the router's first polls have the server
        through, straight = _tiny(router.url, server.url, tiny)
        idle0 = _cpu_s(router.process.pid)
        time.sleep(_IDLE_S)
        idle_per_s = (_cpu_s(router.process.pid) - idle0) / _IDLE_S  # polling Redis, heartbeat events
        cpu0 = _cpu_s(router.process.pid)
        t0 = time.perf_counter()
        speech_via, speech_direct = _interleaved_ttfa(router.url, server.url, requests, max_tokens)
        config = bench.BenchConfig(urls=(router.url, server.url), labels=("router", "direct"), levels=(1,),
                                   warmup=2, max_requests=requests, max_tokens=max_tokens, seed=0, duration_s=120)
        result = asyncio.run(bench.run_bench(config))
        wall = time.perf_counter() - t0
        cpu = _cpu_s(router.process.pid) - cpu0
        routed = requests + (requests + config.warmup)  # the interleaved ones, then the bench's (warm-up included)
    finally:
        router.close()
        server.close()
        redis.stop()
    via, direct = (t.levels[0].summary for t in result.targets)
    ms = 1000
    lines = [bench.format_table(result), "",
             "| figure | through the router | direct | added |", "|---|---|---|---|"]
    for name, a, b in (("TTFA p50", via.ttfa_p50_s, direct.ttfa_p50_s), ("TTFA p90", via.ttfa_p90_s,
                                                                           direct.ttfa_p90_s)):
        lines.append(f"| {name} (ms, {requests} requests, {max_tokens} tokens) | {a * ms:.2f} | {b * ms:.2f} | "
                     f"{(a - b) * ms:+.2f} |")
    for q in (50, 90):
        a, b = _pct(speech_via, q), _pct(speech_direct, q)
        lines.append(f"| speech TTFA p{q} (ms, {requests} interleaved pairs) | {a * ms:.2f} | {b * ms:.2f} | "
                     f"{(a - b) * ms:+.2f} |")
    for q in (50, 90):
        a, b = _pct(through, q), _pct(straight, q)
        lines.append(f"| GET /v1/models p{q} (ms, {tiny} interleaved) | {a * ms:.3f} | {b * ms:.3f} | "
                     f"{(a - b) * ms:+.3f} |")
    busy = cpu - idle_per_s * wall
    lines.append(f"\nrouter CPU: {cpu * ms:.0f} ms over {wall:.1f} s and {routed} speech requests; idle it spends "
                 f"{idle_per_s * ms:.1f} ms/s (reading the fleet); the rest, {busy * ms:.0f} ms, is "
                 f"{busy * ms / routed:.2f} ms per speech request")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ids", type=int, default=20000, help="routing identities for the remap figures")
    parser.add_argument("--seeds", type=int, default=5, help="voice mixes drawn per Zipf row")
    parser.add_argument("--requests", type=int, default=40, help="measured speech requests each way")
    parser.add_argument("--max-tokens", type=int, default=28, help="per speech request (28: 4 frames)")
    parser.add_argument("--tiny", type=int, default=300, help="GET /v1/models requests each way")
    parser.add_argument("--fronts-servers", type=int, default=8, help="stand-in servers behind the fronts")
    parser.add_argument("--fronts-keys", type=int, default=2000, help="session keys for the fronts' remap figure")
    parser.add_argument("--fronts-streams", type=int, default=64, help="streams held at once in the Zipf figure")
    parser.add_argument("--fronts-sockets", type=int, default=20, help="TTS WebSockets per target")
    parser.add_argument("--only", choices=("ring", "hop", "fronts"), help="run one part (default: all)")
    args = parser.parse_args()
    sys.stdout.reconfigure(line_buffering=True)  # type: ignore[union-attr]
    if args.only in (None, "ring"):
        print("## Remapped identities when a server leaves or joins", *remap_table(args.ids), sep="\n")
        print("\n## Max/average load under a Zipf voice mix", *zipf_table(args.seeds), sep="\n")
    if args.only in (None, "hop"):
        print("\n## The hop: one server, through the router and direct",
              *hop_figures(args.requests, args.tiny, args.max_tokens), sep="\n")
    if args.only in (None, "fronts"):
        print(f"\n## lyre route, HAProxy and nginx: {args.fronts_servers} stand-in servers",
              *ring_tables(args.fronts_servers, args.fronts_keys, args.fronts_streams, 50, 3), sep="\n")
        print("\n## lyre route, HAProxy and nginx: the hop in front of one lyre serve",
              *hop_table(args.tiny, args.fronts_sockets), sep="\n")


if __name__ == "__main__":
    main()
