"""Reference voices shared by a fleet: a voice uploaded to one server is spoken by all of them.

Redis holds each voice whole (``lyre:voice:{name}``) and a table of what
each is (``lyre:voice-digests``: name -> digest), and the names deleted, with
when (``lyre:voices-deleted``). Every registered server syncs its voices with
them every ``interval_s``: it takes the voices it lacks or holds another
version of, drops the ones deleted, and publishes again the voices it keeps
on disk that Redis has lost (a Redis that restarted empty). Nothing is
dropped for being absent: only a deletion deletes.
"""

from __future__ import annotations

import asyncio
import logging
import time

import redis.asyncio as aioredis
from redis.exceptions import RedisError

from lyre.tts.reference_voices import ReferenceVoice, ReferenceVoices

__all__ = ["DELETED_KEY", "DIGESTS_KEY", "FleetVoices", "voice_key"]

log = logging.getLogger("lyre.fleet")

DIGESTS_KEY = "lyre:voice-digests"
DELETED_KEY = "lyre:voices-deleted"


def voice_key(name: str) -> str:
    return f"lyre:voice:{name}"


class FleetVoices:
    """One server's side of the fleet's reference voices."""

    def __init__(self, redis_url: str, voices: ReferenceVoices, interval_s: float = 1.0) -> None:
        self._redis = aioredis.Redis.from_url(redis_url, socket_timeout=2, socket_connect_timeout=2)
        self._voices = voices
        self._interval_s = interval_s
        self._task: asyncio.Task[None] | None = None
        self.syncs = 0  # completed
        self._failing = False

    async def start(self) -> None:
        """Sync once now (a failure is logged, not raised), then every ``interval_s``."""
        await self._sync_logged()
        self._task = asyncio.create_task(self._loop())

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        await self._redis.aclose()

    async def publish(self, voice: ReferenceVoice) -> None:
        """Make ``voice`` the fleet's (a failure is logged: the next sync publishes it from disk)."""
        try:
            async with self._redis.pipeline(transaction=True) as pipe:
                pipe.set(voice_key(voice.name), voice.to_json())
                pipe.hset(DIGESTS_KEY, voice.name, voice.digest)
                pipe.hdel(DELETED_KEY, voice.name)
                await pipe.execute()
        except (RedisError, OSError) as exc:
            log.warning("reference voice %r not published to the fleet yet: %s", voice.name, exc)

    async def withdraw(self, name: str) -> None:
        """Delete ``name`` from the fleet: every server drops it at its next sync."""
        try:
            async with self._redis.pipeline(transaction=True) as pipe:
                pipe.delete(voice_key(name))
                pipe.hdel(DIGESTS_KEY, name)
                pipe.hset(DELETED_KEY, name, repr(time.time()))
                await pipe.execute()
        except (RedisError, OSError) as exc:
            log.warning("reference voice %r deleted here but not from the fleet: %s", name, exc)

    async def _loop(self) -> None:
        while True:
            await asyncio.sleep(self._interval_s)
            await self._sync_logged()

    async def _sync_logged(self) -> None:
        try:
            await self.sync()
        except (RedisError, OSError) as exc:
            if not self._failing:
                log.warning("fleet voices: Redis is away (%s); voices sync again when it is back", exc)
            self._failing = True
        else:
            if self._failing:
                log.warning("fleet voices: Redis is back")
            self._failing = False

    async def sync(self) -> None:
        """Take what the fleet has and this server lacks, drop what it deleted, publish what it lost."""
        digests = {k.decode(): v.decode() for k, v in (await self._redis.hgetall(DIGESTS_KEY)).items()}
        deleted = {k.decode(): _seconds(v) for k, v in (await self._redis.hgetall(DELETED_KEY)).items()}
        for name, when in deleted.items():
            saved = self._voices.saved_at(name)
            if name in digests or (saved is not None and saved > when):
                continue  # uploaded again since (here: its publish has not reached Redis yet)
            self._voices.drop(name)
        local = {v.name: v for v in self._voices}
        wanted = [name for name, digest in digests.items() if name not in local or local[name].digest != digest]
        if wanted:
            records = await self._redis.mget([voice_key(name) for name in wanted])
            for name, record in zip(wanted, records):
                if record is None:
                    continue  # deleted since the table was read
                try:
                    voice = ReferenceVoice.from_json(record)
                except ValueError as exc:
                    log.warning("fleet voice %r skipped: %s", name, exc)
                    continue
                if voice.name == name and not self._voices.put(voice):
                    log.warning("fleet voice %r not spoken here: the name is another voice's on this server", name)
        for name in self._voices.on_disk():
            if name not in digests and (name not in deleted or (self._voices.saved_at(name) or 0) > deleted[name]):
                await self.publish(self._voices.get(name))
        self.syncs += 1


def _seconds(value: bytes) -> float:
    try:
        return float(value)
    except ValueError:
        return 0.0
