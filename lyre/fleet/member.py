"""A server's membership in a fleet: its record in Redis, heartbeated, drained, withdrawn.

``lyre serve --register redis://... --advertise http://HOST:PORT`` runs one
`Membership`: every ``ttl_s / 3`` it writes its `ServerRecord` (address,
capacity, load, resident adapters) with a TTL, so a server that stops
heartbeating (killed, hung, cut off) drops out on its own within ``ttl_s``.
While Redis is away the heartbeat keeps trying; the record comes back with
the first heartbeat that gets through.

Shutting down is two steps: `drain` (at once, when the signal arrives:
routers stop sending new work) and `leave` (after the streams in flight have
finished: the record and the set entry go).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, replace

import redis.asyncio as aioredis
from redis.exceptions import RedisError

from lyre.fleet.records import EVENTS_CHANNEL, MEMBERS_KEY, ServerRecord, server_key

__all__ = ["FleetLoad", "Membership"]

log = logging.getLogger("lyre.fleet.records")


@dataclass(frozen=True)
class FleetLoad:
    """What a heartbeat reports beside the address: the server's load now and its resident adapters."""

    load: int
    adapters: tuple[str, ...] = ()
    cached_blocks: int = 0  # KV-cache blocks findable by a prefix, all engines


class Membership:
    """One server's record in Redis, kept alive by a heartbeat task."""

    def __init__(self, redis_url: str, record: ServerRecord, sample: Callable[[], FleetLoad]) -> None:
        self._redis = aioredis.Redis.from_url(redis_url, socket_timeout=2, socket_connect_timeout=2)
        self._record = record
        self._sample = sample
        self._task: asyncio.Task[None] | None = None
        self.heartbeats = 0  # written successfully
        self.failures = 0  # heartbeats Redis did not take
        self._down = False  # the last heartbeat failed

    @property
    def record(self) -> ServerRecord:
        return self._record

    async def start(self) -> None:
        """Write the record once (a failure is logged, not raised: the heartbeat retries) and keep it alive."""
        await self._beat(event="join")
        self._task = asyncio.create_task(self._run(), name="lyre-fleet-heartbeat")

    async def drain(self) -> None:
        """Marked draining at once: routers take it off their rings, its streams go on."""
        if self._record.draining:
            return
        self._record = replace(self._record, draining=True)
        await self._beat(event="drain")

    async def leave(self) -> None:
        """Stop heartbeating and withdraw the record; closes the Redis client."""
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None
        try:
            async with self._redis.pipeline(transaction=True) as pipe:
                pipe.delete(server_key(self._record.url))
                pipe.srem(MEMBERS_KEY, self._record.url)
                pipe.publish(EVENTS_CHANNEL, f"leave {self._record.url}")
                await pipe.execute()
        except (RedisError, OSError) as exc:
            log.warning("could not withdraw %s from the fleet (its record expires by itself): %s",
                        self._record.url, exc)
        finally:
            await self._redis.aclose()

    async def _run(self) -> None:
        interval = self._record.ttl_s / 3  # two heartbeats may be lost before the record expires
        while True:
            await asyncio.sleep(interval)
            await self._beat()

    async def _beat(self, event: str | None = None) -> None:
        sampled = self._sample()
        self._record = replace(self._record, load=sampled.load, adapters=sampled.adapters,
                               cached_blocks=sampled.cached_blocks, heartbeat_at=time.time())
        key = server_key(self._record.url)
        try:
            async with self._redis.pipeline(transaction=True) as pipe:
                pipe.set(key, self._record.to_json(), px=round(self._record.ttl_s * 1000))
                pipe.sadd(MEMBERS_KEY, self._record.url)
                if event is not None:
                    pipe.publish(EVENTS_CHANNEL, f"{event} {self._record.url}")
                await pipe.execute()
        except (RedisError, OSError) as exc:
            self.failures += 1
            if not self._down:
                log.warning("fleet heartbeat to Redis failed (retrying every %.1f s): %s", self._record.ttl_s / 3, exc)
            self._down = True
            return
        if self._down:
            log.warning("fleet heartbeat to Redis works again")
        self._down = False
        self.heartbeats += 1
