"""A fleet under mixed load while its parts fail: what breaks, for how long, and what is lost.

A real redis-server, two ``lyre serve --register`` processes on the demo model (speech to text on, a cloned
voice each, reference voices shared through Redis) and one ``lyre route``, under three kinds of load
through the router at once: HTTP speech requests, TTS WebSocket contexts and realtime transcription sessions.
Mid-load, one at a time, with a quiet spell between:

1. Redis restarts (empty: no persistence);
2. one server is SIGKILLed, and started again at once, as a supervisor would;
3. the router restarts (SIGTERM, then a new one on the same port).

For each event: the requests that failed, split into those the event's victim held when it struck (they
may fail) and the rest (none should); the seconds until service is whole again (every request started
after it succeeds, and the ring holds both servers); and what was lost (fleet registrations, the reference
voice uploaded before, each server's cloned voice).

    .venv/bin/python benchmarks/chaos.py                 # about 4 minutes on 2 cores
    .venv/bin/python benchmarks/chaos.py --quiet 20 --json docs/bench/chaos.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from mixed_load import Load  # this folder's

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))  # the tests' process runners
from fleet_processes import Process, Redis, close_all, route, serve, wait_ready  # noqa: E402

ADMIN = "chaos-admin"
VOICE = "chaos-reference"


@dataclass
class Report:
    event: str
    at_s: float  # seconds into the run
    held_failed: int  # failed requests the victim held when the event struck (allowed to fail)
    held: int
    other_failed: int  # every other failed request (none should)
    refused_connections: int  # requests that found nothing listening (the router down)
    busy: int  # requests refused for capacity (429): one server carrying both servers' load
    recovered_s: float | None  # until every request started succeeds and the ring is whole again
    lost: list[str]
    errors: list[str]  # what the other failed requests said, each once


class Fleet:
    def __init__(self, folders: list[Path], adapter: Path) -> None:
        self.redis = Redis().start()
        self.folders, self.adapter = folders, adapter
        self.servers = [self._serve(i) for i in range(2)]
        wait_ready(self.servers)
        self.router = route(self.redis.url)
        wait_ready([self.router], path="/health")

    def _serve(self, i: int, port_of: Process | None = None) -> Process:
        args = ["--stt", "--max-streams", "6", "--admin-key", ADMIN, "--voices-dir", str(self.folders[i]),
                "--adapter", f"clone{i}={self.adapter}"]
        if port_of is not None:  # the same address, so the fleet knows it as the same server
            return _serve_at(self.redis.url, port_of.url, args)
        return serve(self.redis.url, *args)

    def ring(self) -> list[str]:
        import httpx

        try:
            return httpx.get(self.router.url + "/health", timeout=2).json()["ring"]
        except (httpx.HTTPError, ValueError, KeyError):
            return []

    def restart_redis(self) -> None:
        self.redis.stop()
        time.sleep(1.0)
        self.redis.start()

    def kill_server(self, i: int) -> None:
        victim = self.servers[i]
        victim.stop(sig=9)
        self.servers[i] = self._serve(i, port_of=victim)

    def restart_router(self) -> None:
        old = self.router
        old.stop()
        self.router = _route_at(self.redis.url, old.url)

    def close(self) -> None:
        close_all([self.router, *self.servers])
        self.redis.stop()


def _serve_at(redis_url: str, url: str, args: list[str]) -> Process:
    port = url.rsplit(":", 1)[1]
    cmd = [sys.executable, "-m", "lyre.cli", "serve", "--port", port, "--log-level", "warning", "--register",
           redis_url, "--advertise", url, "--fleet-ttl", "2.0", *args]
    return Process(cmd, url).start()


def _route_at(redis_url: str, url: str) -> Process:
    port = url.rsplit(":", 1)[1]
    cmd = [sys.executable, "-m", "lyre.cli", "route", "--redis", redis_url, "--port", port, "--log-level",
           "warning", "--poll", "0.5", "--shutdown-grace", "5"]
    return Process(cmd, url).start()


def _lost(fleet: Fleet) -> list[str]:
    """What the fleet no longer has: a server off the ring, the reference voice, a server's cloned voice."""
    import httpx

    lost = []
    ring = fleet.ring()
    for i, server in enumerate(fleet.servers):
        if server.url not in ring:
            lost.append(f"server {i} is not on the ring")
        try:
            voices = {v["id"] for v in httpx.get(server.url + "/v1/audio/voices", timeout=5).json()["voices"]}
        except (httpx.HTTPError, ValueError, KeyError):
            lost.append(f"server {i} does not answer")
            continue
        if VOICE not in voices:
            lost.append(f"server {i} lost the reference voice")
        if f"clone{i}" not in voices:
            lost.append(f"server {i} lost its cloned voice")
    return lost


def _recovered(fleet: Fleet, load: Load, at: float, give_up: float) -> float | None:
    """Seconds from ``at`` until service is whole again: the ring holds both servers and nothing is lost, and
    the requests started since then and since the last failure have run 5 s without one (None: not within
    ``give_up``)."""
    deadline, whole_at = time.monotonic() + give_up, None
    while (now := time.monotonic()) < deadline:
        if whole_at is None and len(fleet.ring()) == 2 and not _lost(fleet):
            whole_at = now
        if whole_at is not None:
            since = max(whole_at, max((o.start for o in load.outcomes if o.start >= at and not o.ok), default=at))
            if now - since >= 5.0 and any(o.ok and o.start >= since for o in load.outcomes):
                return round(since - at, 2)
        time.sleep(0.5)
    return None


def _account(event: str, at: float, victim: str | None, load: Load, recovered: float | None, lost: list[str],
             started: float) -> Report:
    struck = [o for o in load.outcomes if o.start <= at <= o.end]
    held = [o for o in struck if victim is None or o.server == victim]
    after = [o for o in load.outcomes if o.start > at and o.start < at + 60]
    other = [o for o in struck if o not in held] + after
    failed = [o for o in other if not o.ok and not o.refused and not o.busy]
    return Report(event, round(at - started, 1), sum(not o.ok for o in held), len(held), len(failed),
                  sum(o.refused for o in other), sum(o.busy for o in other), recovered, lost,
                  sorted({f"{o.kind} on {o.server}: {o.error}" for o in failed}))


async def run(args: argparse.Namespace) -> list[Report]:
    import tempfile

    from adapters import make_adapter
    from lyre.models.demo import demo_model

    work = Path(tempfile.mkdtemp(prefix="lyre-chaos-"))
    adapter = make_adapter(work / "clone", demo_model().model, seed=1)
    fleet = await asyncio.to_thread(Fleet, [work / "voices-0", work / "voices-1"], adapter)
    reports = []
    try:
        load = Load(lambda: fleet.router.url, ADMIN)
        await load.upload_voice(VOICE)
        started = time.monotonic()
        runner = asyncio.create_task(load.run(http=2, sockets=1, transcriptions=1))
        await asyncio.sleep(args.quiet)
        events = (("Redis restarts", fleet.restart_redis, None),
                  ("server 1 SIGKILLed and started again", lambda: fleet.kill_server(1), fleet.servers[1].url),
                  ("the router restarts", fleet.restart_router, None))  # it held every request
        for name, act, victim in events:
            at = time.monotonic()
            await asyncio.to_thread(act)
            recovered = await asyncio.to_thread(_recovered, fleet, load, at, args.give_up)
            await asyncio.sleep(args.quiet)
            reports.append(_account(name, at, victim, load, recovered, _lost(fleet), started))
            print(json.dumps(asdict(reports[-1])), flush=True)
        load.stop()
        await runner
        print(f"load: {load.summary()}", flush=True)
    finally:
        await asyncio.to_thread(fleet.close)
    return reports


def table(reports: list[Report]) -> str:
    lines = ["| event | victim's requests failed | other requests failed | connections refused | busy (429) | "
             "whole again after | lost |", "|---|---:|---:|---:|---:|---:|---|"]
    for r in reports:
        whole = "never" if r.recovered_s is None else f"{r.recovered_s:.1f} s"
        lines.append(f"| {r.event} | {r.held_failed} of {r.held} | {r.other_failed} | {r.refused_connections} | "
                     f"{r.busy} | {whole} | {', '.join(r.lost) or 'nothing'} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quiet", type=float, default=15.0, help="seconds of load before and between events")
    parser.add_argument("--give-up", type=float, default=90.0, help="seconds to wait for service to be whole")
    parser.add_argument("--json", type=Path, help="write the reports here")
    args = parser.parse_args()
    reports = asyncio.run(run(args))
    print(table(reports))
    if args.json:
        args.json.write_text(json.dumps([asdict(r) for r in reports], indent=1))


if __name__ == "__main__":
    main()
