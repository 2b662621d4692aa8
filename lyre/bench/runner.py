"""A whole bench: the sweep against one server (and optionally a second), with server metrics per level."""

from __future__ import annotations

import asyncio
import sys
from dataclasses import dataclass, field
from typing import TextIO

import httpx

from lyre.bench.clients import make_transport
from lyre.bench.load import (
    ChannelPool,
    JobSource,
    LevelPlan,
    Mode,
    RequestRecord,
    run_level,
)
from lyre.bench.metrics import LevelSummary, Slo, headline, summarize
from lyre.bench.progress import Progress
from lyre.bench.prometheus import Samples, parse_metrics, server_deltas
from lyre.bench.texts import BUILTIN_TEXTS

__all__ = ["BenchConfig", "BenchResult", "LevelResult", "TargetResult", "run_bench"]

_SCRAPE_TIMEOUT_S = 10.0
# The server counts a request as done just after its last byte leaves; waiting
# this long before the closing scrape lets those counters catch up.
_SETTLE_S = 0.2


@dataclass(frozen=True)
class BenchConfig:
    """Everything a bench run is, validated once. ``urls`` holds the server, then the one to compare."""

    urls: tuple[str, ...]
    api: str = "http"
    mode: Mode = "concurrency"
    levels: tuple[float, ...] = (1, 2, 4, 8)
    burstiness: float = 1.0
    warmup: int = 2  # requests per worker (concurrency), or seconds (rate)
    duration_s: float = 30.0
    max_requests: int = 64
    max_tokens: int = 280
    seed: int | None = None
    voice: str = "tara"
    texts: tuple[str, ...] = BUILTIN_TEXTS
    pooled: bool = True  # False: a new HTTP client (and connection) per request
    timeout_s: float = 120.0
    api_key: str | None = field(default=None, repr=False)
    slo: Slo = field(default_factory=Slo)
    labels: tuple[str, ...] = ()  # a name per URL for tables and plots; () for A, B
    # Listeners play at this times real time (viability): experiments on hardware too slow for real
    # time, against a server started with the same --playback-rate.
    playback_rate: float = 1.0

    def name(self, i: int) -> str:
        """What the table and plots call the ``i``-th server."""
        return self.labels[i] if self.labels else chr(ord("A") + i)

    def __post_init__(self) -> None:
        if not 1 <= len(self.urls) <= 2:
            raise ValueError("bench takes one server URL, and optionally one to compare")
        if self.labels and len(self.labels) != len(self.urls):
            raise ValueError(f"labels name each server: {len(self.urls)} URLs but {len(self.labels)} labels")
        if self.api not in ("http", "ws"):
            raise ValueError(f"api must be 'http' or 'ws', got {self.api!r}")
        if self.mode not in ("concurrency", "rate"):
            raise ValueError(f"mode must be 'concurrency' or 'rate', got {self.mode!r}")
        if not self.levels or any(level <= 0 for level in self.levels):
            raise ValueError(f"load levels must be positive, got {list(self.levels)}")
        if self.mode == "concurrency" and any(level != int(level) for level in self.levels):
            raise ValueError(f"concurrency levels must be whole numbers of streams, got {list(self.levels)}")
        if not self.playback_rate > 0:
            raise ValueError(f"playback rate must be positive, got {self.playback_rate}")
        if self.burstiness <= 0:
            raise ValueError(f"burstiness must be positive, got {self.burstiness}")
        if self.warmup < 0 or self.duration_s <= 0 or self.max_requests < 1:
            raise ValueError("warmup must be >= 0, duration > 0 and requests >= 1")
        if self.max_tokens < 1 or self.timeout_s <= 0:
            raise ValueError("max_tokens must be >= 1 and timeout > 0")
        if not self.texts:
            raise ValueError("no texts to speak")
        if not self.pooled and self.api != "http":
            raise ValueError("a new connection per request applies to --api http only")

    def settings(self) -> dict[str, object]:
        """The settings as recorded beside the results (the API key is never written)."""
        return {
            "urls": list(self.urls), "labels": list(self.labels), "api": self.api, "mode": self.mode, "levels": list(self.levels),
            "burstiness": self.burstiness, "warmup": self.warmup, "duration_s": self.duration_s,
            "max_requests": self.max_requests, "max_tokens": self.max_tokens, "seed": self.seed,
            "voice": self.voice, "texts": list(self.texts), "pooled": self.pooled, "timeout_s": self.timeout_s,
            "api_key_set": self.api_key is not None, "response_format": "pcm", "trim_silence": True,
            "slo": {"ttfa_p90_ms": self.slo.ttfa_p90_ms, "viable_share": self.slo.viable_share},
        }


@dataclass(frozen=True)
class LevelResult:
    summary: LevelSummary
    server: dict[str, float | None]  # server_deltas(); None where the server does not say
    records: list[RequestRecord]
    wall_s: float


@dataclass(frozen=True)
class TargetResult:
    url: str
    levels: list[LevelResult]
    headline: float | None  # the highest load that held the SLO


@dataclass(frozen=True)
class BenchResult:
    config: BenchConfig
    targets: list[TargetResult]


async def _scrape(client: httpx.AsyncClient, url: str, headers: dict[str, str]) -> Samples | None:
    """The server's metrics now, or None when it does not serve them."""
    try:
        response = await client.get(url + "/metrics", headers=headers)
    except httpx.HTTPError:
        return None
    return parse_metrics(response.text) if response.status_code == 200 else None


def _label(config: BenchConfig, load: float) -> str:
    return f"c={load:g}" if config.mode == "concurrency" else f"rate={load:g}/s"


async def _run_target(config: BenchConfig, url: str, stream: TextIO) -> TargetResult:
    transport = make_transport(url, config.api, api_key=config.api_key, timeout_s=config.timeout_s,
                               pooled=config.pooled)
    pool = ChannelPool(transport)
    jobs = JobSource(config.texts, config.voice, config.max_tokens, config.seed)
    levels: list[LevelResult] = []
    # Scrapes go over their own client so they never hold or warm a load connection.
    async with httpx.AsyncClient(timeout=_SCRAPE_TIMEOUT_S) as scraper:
        try:
            for load in config.levels:
                plan = LevelPlan(config.mode, load, config.warmup, config.duration_s, config.max_requests,
                                 config.burstiness, arrival_seed=config.seed or 0)
                progress = Progress(f"{transport.url} {_label(config, load)}", config.max_requests, stream)
                before = await _scrape(scraper, transport.url, transport.headers)
                started = asyncio.get_running_loop().time()
                async with progress.live():
                    records = await run_level(plan, pool, jobs, progress.record)
                wall = asyncio.get_running_loop().time() - started
                await asyncio.sleep(_SETTLE_S)
                after = await _scrape(scraper, transport.url, transport.headers)
                summary = summarize(load, [r.measured() for r in records if not r.warmup], config.playback_rate)
                levels.append(LevelResult(summary, server_deltas(before, after), records, wall))
        finally:
            await pool.aclose()
    return TargetResult(url, levels, headline([level.summary for level in levels], config.slo))


async def run_bench(config: BenchConfig, stream: TextIO = sys.stderr) -> BenchResult:
    """Run the sweep against each server in turn (never both at once: they would share this client's CPU)."""
    targets = [await _run_target(config, url, stream) for url in config.urls]
    return BenchResult(config, targets)
