"""``lyre route``, HAProxy and nginx side by side, on the same keys and the same servers: benchmarks/router.py's
comparison (deploy/haproxy/haproxy.cfg and deploy/nginx/lyre.conf as shipped, via tests/proxy_processes.py).

1. The ring, over N stand-in servers (tests/fleet/upstream_stub.py: they register in Redis as servers do and
   answer at once, so only the front's own choices show): the share of session keys that move when one of
   the N leaves (SIGTERM: it leaves Redis, closes its listener and fails HAProxy's check), against the ideal
   1/N; and the most-loaded server's share of streams held open at once under a Zipf voice mix (``?voice=``,
   a key all three read), with and without each front's load bound.
2. The hop, in front of one real ``lyre serve``: added latency (p50 and p99 against the server direct, the
   targets taken in turn) of an HTTP request's first byte (GET /v1/models) and of a TTS WebSocket's first
   audio (connect, send a context, the first chunk back); and each front's CPU per 1,000 of those requests.
"""

from __future__ import annotations

import asyncio
import json
import random
import signal
import statistics
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import httpx
import psutil
from websockets.asyncio.client import connect

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))  # the tests' process runners
from fleet_processes import Process, Redis, close_all, route, serve, wait_ready
from proxy_processes import start_proxy
from serving import _free_port

from lyre import bench

__all__ = ["hop_table", "ring_tables"]

_STUB = Path(__file__).resolve().parent.parent / "tests" / "fleet" / "upstream_stub.py"
_UNBOUNDED = 1e6  # lyre route's --load-factor with no bound in effect


class Front:
    """One front end: its process, and how it names the server that answered."""

    def __init__(self, name: str, process: Process, server_of: Callable[[httpx.Headers], str]) -> None:
        self.name, self.process, self.server_of = name, process, server_of

    @property
    def url(self) -> str:
        return self.process.url

    def cpu_s(self) -> float:
        """CPU seconds of the front's process and its children (nginx's workers)."""
        top = psutil.Process(self.process.process.pid)
        return sum(sum(p.cpu_times()[:2]) for p in [top, *top.children(recursive=True)])


def _fronts(redis_url: str, servers: list[str], folder: Path, bounds: bool) -> list[Front]:
    """lyre route, HAProxy and nginx (and, with ``bounds``, lyre route and HAProxy without their load bound)."""
    fronts = [Front("lyre route", route(redis_url, "--load-factor", "1.25"), lambda h: h["x-lyre-server"])]
    if bounds:
        fronts.append(Front("lyre route, no bound", route(redis_url, "--load-factor", str(_UNBOUNDED)),
                            lambda h: h["x-lyre-server"]))
    variants = [("haproxy", "HAProxy", True), ("nginx", "nginx (has no bound)" if bounds else "nginx", True)]
    if bounds:
        variants.insert(1, ("haproxy", "HAProxy, no bound", False))
    for kind, name, bounded in variants:
        proxy = start_proxy(kind, servers, folder / name.replace(" ", "_").replace(",", ""))
        if not bounded:  # the same file without its hash-balance-factor line, started again
            proxy.process.stop()
            config = Path(proxy.process.cmd[-1])
            config.write_text(config.read_text().replace("hash-balance-factor 125", ""))
            proxy.process.start()
        fronts.append(Front(name, proxy.process, lambda h, p=proxy: p.server_of(h)))
    return fronts


def _homes(front: Front, keys: list[str]) -> dict[str, str]:
    with httpx.Client(timeout=10) as client:
        return {k: front.server_of(client.get(front.url + "/v1/models", headers={"x-lyre-session": k}).headers)
                for k in keys}


async def _held(front: Front, streams: int, voices: int, seed: int, hold_s: float) -> Counter[str]:
    """Open ``streams`` streams one by one, each keyed by a Zipf-drawn voice, all held open; where each went."""
    rng = random.Random(seed)
    names = [f"v{i}" for i in range(voices)]
    chosen = rng.choices(names, [1 / (r + 1) ** 1.1 for r in range(voices)], k=streams)
    placed: Counter[str] = Counter()
    async with httpx.AsyncClient(timeout=30, limits=httpx.Limits(max_connections=streams + 8)) as client:
        opened = []
        for voice in chosen:
            request = client.build_request("POST", front.url + "/v1/audio/speech", params={"voice": voice},
                                           json={"chunks": 1, "chunk_s": hold_s})
            response = await client.send(request, stream=True)
            placed[front.server_of(response.headers)] += 1
            opened.append(response)
        for response in opened:
            await response.aclose()
    return placed


def ring_tables(servers: int, keys: int, streams: int, voices: int, seeds: int) -> list[str]:
    redis = Redis().start()
    stubs = []
    for _ in range(servers):
        port = _free_port()
        stubs.append(Process([sys.executable, str(_STUB), "--port", str(port), "--redis", redis.url],
                             f"http://127.0.0.1:{port}").start())
    folder = tempfile.TemporaryDirectory()
    fronts = _fronts(redis.url, [s.url for s in stubs], Path(folder.name), bounds=True)
    try:
        wait_ready(stubs)
        wait_ready([f.process for f in fronts])
        time.sleep(3)  # every router has the whole fleet; HAProxy's checks have passed
        hold_s = 2.0
        shares = {}
        for front in fronts:
            worst = []
            for seed in range(seeds):
                placed = asyncio.run(_held(front, streams, voices, seed, hold_s))
                worst.append(max(placed.values()) / (streams / servers))
                time.sleep(hold_s + 0.5)  # the streams have ended everywhere
            shares[front.name] = worst
        names = [f"session-{i}" for i in range(keys)]
        before = {f.name: _homes(f, names) for f in fronts}
        leaver = stubs[0]
        leaver.stop(signal.SIGTERM)
        time.sleep(3)  # the routers have read the fleet again; HAProxy's check has failed
        after = {f.name: _homes(f, names) for f in fronts}
    finally:
        close_all([f.process for f in fronts] + stubs)
        folder.cleanup()
        redis.stop()
    lines = [f"| front | keys moved when 1 of {servers} leaves (ideal 1/N = {1 / servers:.3f}) | of them, keys that "
             f"were not on the leaver | max/avg streams, Zipf ({streams} streams, {voices} voices, {seeds} mixes) |",
             "|---|---|---|---|"]
    for front in fronts:
        b, a = before[front.name], after[front.name]
        moved = [k for k in names if b[k] != a[k]]
        needless = sum(b[k] != leaver.url for k in moved)
        share = shares[front.name]
        lines.append(f"| {front.name} | {len(moved) / keys:.3f} | {needless} | {statistics.mean(share):.2f} "
                     f"(worst {max(share):.2f}) |")
    return lines


async def _ws_first_audio(url: str) -> float:
    context = {"context_id": "c", "voice": {"mode": "id", "id": "tara"}, "transcript": "Hello there.",
               "continue": False, "max_tokens": 28, "seed": 0}
    start = time.perf_counter()
    async with connect(url + "/v1/tts/websocket?voice=tara") as ws:
        await ws.send(json.dumps(context))
        first = None
        while True:
            kind = json.loads(await ws.recv())["type"]
            if kind == "chunk" and first is None:
                first = time.perf_counter() - start
            if kind in ("done", "error"):
                assert kind == "done" and first is not None
                return first


def hop_table(tiny: int, sockets: int) -> list[str]:
    redis = Redis().start()
    server = serve(redis.url, "--max-streams", "4", ttl_s=3.0)
    folder = tempfile.TemporaryDirectory()
    fronts = _fronts(redis.url, [server.url], Path(folder.name), bounds=False)
    try:
        wait_ready([server])
        wait_ready([f.process for f in fronts])
        time.sleep(2)
        targets = [("direct", server.url)] + [(f.name, f.url) for f in fronts]
        idle = {f.name: f.cpu_s() for f in fronts}
        time.sleep(5.0)
        idle = {f.name: (f.cpu_s() - idle[f.name]) / 5.0 for f in fronts}  # CPU/s with nothing to do
        http: dict[str, list[float]] = {name: [] for name, _ in targets}
        cpu: dict[str, float] = {}
        with httpx.Client(timeout=10) as client:
            for _, url in targets:
                client.get(url + "/v1/models")  # warm the pools
            for i in range(tiny):
                for name, url in targets[i % len(targets):] + targets[:i % len(targets)]:
                    start = time.perf_counter()
                    assert client.get(url + "/v1/models").status_code == 200
                    http[name].append(time.perf_counter() - start)
            for front in fronts:  # CPU: 1,000 requests to each front alone, less what it spends idle meanwhile
                cpu0, t0 = front.cpu_s(), time.perf_counter()
                for _ in range(1000):
                    assert client.get(front.url + "/v1/models").status_code == 200
                cpu[front.name] = front.cpu_s() - cpu0 - idle[front.name] * (time.perf_counter() - t0)
        ws: dict[str, list[float]] = {name: [] for name, _ in targets}
        for i in range(sockets):
            for name, url in targets[i % len(targets):] + targets[:i % len(targets)]:
                ws[name].append(asyncio.run(_ws_first_audio(url.replace("http", "ws", 1))))
    finally:
        close_all([f.process for f in fronts] + [server])
        folder.cleanup()
        redis.stop()
    ms = 1000

    def pct(values: list[float], q: float) -> float:
        value = bench.percentile(values, q)
        assert value is not None
        return value * ms

    lines = [f"| target | HTTP first byte p50 / p99 (ms, {tiny} GET /v1/models) | added p50 / p99 | "
             f"WS first audio p50 / p99 (ms, {sockets} sockets) | added p50 / p99 | CPU per 1,000 requests (ms) |",
             "|---|---|---|---|---|---|"]
    for name, _ in targets:
        h = (pct(http[name], 50), pct(http[name], 99))
        w = (pct(ws[name], 50), pct(ws[name], 99))
        hd = (h[0] - pct(http["direct"], 50), h[1] - pct(http["direct"], 99))
        wd = (w[0] - pct(ws["direct"], 50), w[1] - pct(ws["direct"], 99))
        added = name != "direct"
        lines.append(f"| {name} | {h[0]:.2f} / {h[1]:.2f} | " + (f"{hd[0]:+.2f} / {hd[1]:+.2f}" if added else "")
                     + f" | {w[0]:.1f} / {w[1]:.1f} | " + (f"{wd[0]:+.1f} / {wd[1]:+.1f}" if added else "")
                     + " | " + (f"{cpu[name] * ms:.0f}" if added else "") + " |")
    idle_note = ", ".join(f"{name} {rate * ms:.1f} ms/s" for name, rate in idle.items())
    lines.append(f"\nIdle CPU, taken off the figures above: {idle_note}.")
    return lines
