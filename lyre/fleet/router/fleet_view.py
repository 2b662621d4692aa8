"""A router's view of the fleet, kept current from Redis: the records, the hot voices, the ring.

Two paths keep it current: the fleet's pub/sub channel (servers announce
join, drain and leave; routers announce hot-voice changes), which refreshes at
once, and a poll every ``poll_s``, which catches what pub/sub cannot say (a
server that died without a word, its record expired by its TTL) and any event
missed while the subscription was down.

When Redis is away the view keeps its last ring and says so (`stale`): the
router goes on serving the fleet it last saw, and a server that died meanwhile
is found out by its failed connections (the request is retried on the next
server). The first poll that reaches Redis again ends it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

import redis.asyncio as aioredis
from redis.exceptions import RedisError

from lyre.fleet.records import EVENTS_CHANNEL, HOT_KEY, MEMBERS_KEY, ServerRecord, server_key
from lyre.fleet.router.ring import Ring

__all__ = ["FleetView"]

log = logging.getLogger("lyre.fleet.router")

_RESUBSCRIBE_S = 1.0  # between attempts to subscribe again after the channel broke


class FleetView:
    """The fleet as this router last read it."""

    def __init__(self, redis_url: str, vnodes: int, poll_s: float,
                 on_change: Callable[[str, str], None] = lambda event, url: None) -> None:
        self.redis = aioredis.Redis.from_url(redis_url, socket_timeout=2, socket_connect_timeout=2)
        # The subscription waits on its socket for as long as the fleet is quiet: no read timeout.
        self._events = aioredis.Redis.from_url(redis_url, socket_connect_timeout=2)
        self._vnodes = vnodes
        self._poll_s = poll_s
        self._on_change = on_change  # ("join" | "drain" | "leave", url), for the metrics
        self.servers: dict[str, ServerRecord] = {}  # every live record, draining ones too
        self.hot: dict[str, int] = {}  # voice -> placements
        self.ring = Ring((), vnodes)
        self.stale_since: float | None = None  # wall-clock time Redis was first found away; None: in touch
        self.last_error = ""
        self.refreshes = 0
        self._grace_until = 0.0  # monotonic time until which servers missing from Redis are kept
        self._lock = asyncio.Lock()
        self._tasks: list[asyncio.Task[None]] = []

    @property
    def stale(self) -> bool:
        return self.stale_since is not None

    async def start(self) -> None:
        """Read the fleet once (Redis away: start stale, with an empty ring) and keep it current."""
        await self.refresh()
        self._tasks = [asyncio.create_task(self._poll(), name="lyre-router-poll"),
                       asyncio.create_task(self._listen(), name="lyre-router-events")]

    async def close(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self.redis.aclose()
        await self._events.aclose()

    async def refresh(self) -> None:
        """Read every record and the hot voices; rebuild the ring when the servers taking work changed."""
        async with self._lock:
            try:
                servers, hot = await self._read()
            except (RedisError, OSError) as exc:
                if self.stale_since is None:
                    self.stale_since = time.time()
                    log.warning("Redis is away (%s): routing on the last ring of %d server(s)", exc, len(self.ring))
                self.last_error = str(exc)
                return
            if self.stale_since is not None:
                log.warning("Redis is back after %.1f s", time.time() - self.stale_since)
                # A Redis that restarted empty holds no records until each server's next heartbeat:
                # keep the servers last seen for one TTL rather than route to none of them.
                self._grace_until = time.monotonic() + max((r.ttl_s for r in self.servers.values()), default=0)
            if time.monotonic() < self._grace_until:
                servers = {**{u: r for u, r in self.servers.items() if u not in servers}, **servers}
            self.stale_since = None
            self.last_error = ""
            self.refreshes += 1
            self._announce(servers)
            self.servers, self.hot = servers, hot
            taking = {url for url, r in servers.items() if not r.draining}
            if taking != set(self.ring.servers):
                self.ring = Ring(servers.values(), self._vnodes)
            else:
                self.ring.update(servers)

    async def _read(self) -> tuple[dict[str, ServerRecord], dict[str, int]]:
        urls = sorted(u.decode() for u in await self.redis.smembers(MEMBERS_KEY))
        values = await self.redis.mget([server_key(u) for u in urls]) if urls else []
        servers: dict[str, ServerRecord] = {}
        gone = []
        for url, value in zip(urls, values, strict=True):
            if value is None:
                gone.append(url)  # its record expired: the server stopped heartbeating
                continue
            try:
                servers[url] = ServerRecord.from_json(value)
            except ValueError as exc:
                log.warning("ignoring the fleet record of %s: %s", url, exc)
        if gone:
            await self.redis.srem(MEMBERS_KEY, *gone)
        hot = {}
        for voice, count in (await self.redis.hgetall(HOT_KEY)).items():
            try:
                hot[voice.decode()] = max(1, int(count))
            except ValueError:
                log.warning("ignoring hot voice %r with placements %r", voice, count)
        return servers, hot

    def _announce(self, servers: dict[str, ServerRecord]) -> None:
        for url, record in servers.items():
            before = self.servers.get(url)
            if before is None:
                log.info("server joined: %s", url)
                self._on_change("join", url)
            elif record.draining and not before.draining:
                log.info("server draining: %s", url)
                self._on_change("drain", url)
        for url in self.servers.keys() - servers.keys():
            log.info("server left: %s", url)
            self._on_change("leave", url)

    async def _poll(self) -> None:
        while True:
            await asyncio.sleep(self._poll_s)
            await self.refresh()

    async def _listen(self) -> None:
        """Refresh on every fleet event; subscribe again whenever the channel breaks."""
        while True:
            pubsub = self._events.pubsub()
            try:
                await pubsub.subscribe(EVENTS_CHANNEL)
                await self.refresh()  # whatever was said while the channel was down
                async for message in pubsub.listen():
                    if message.get("type") == "message":
                        await self.refresh()
            except (RedisError, OSError):
                pass  # the poll marks the view stale
            finally:
                await pubsub.aclose()
            await asyncio.sleep(_RESUBSCRIBE_S)
