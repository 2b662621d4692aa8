"""Reference voices shared by a fleet: a voice uploaded to one server is spoken by all of them.

Redis holds each voice whole (``lyre:voice:{name}``), a table of what each is
(``lyre:voice-digests``: name -> digest), which upload holds each name
(``lyre:voice-claims``: name -> claim), and the names deleted, with the claim
each delete removed (``lyre:voices-deleted``).

An upload claims its name in one script run by Redis: the first of two
servers taking a name at once gets it and the second is refused, whatever
their clocks say. Every registered server syncs with Redis every
``interval_s``: it takes the voices it lacks or holds another upload of
(each checked as an upload is, off the event loop; one that fails is logged
and skipped), drops those deleted, and claims again the voices it keeps on
disk that Redis lacks (a Redis that restarted empty, an upload made while
Redis was away). A delete removes a voice kept on disk only when it removed
that upload's claim: a later upload of the name stays. Nothing is dropped
for being absent: only a deletion deletes.
"""

from __future__ import annotations

import asyncio
import logging

import redis.asyncio as aioredis
from redis.exceptions import RedisError

from lyre.fleet.records import MEMBERS_KEY, ServerRecord, server_key
from lyre.tts.reference_store import ReferenceVoices
from lyre.tts.reference_voices import ReferenceVoice, parse_json
from lyre.tts.voices import VoiceNameTaken

__all__ = ["CLAIMS_KEY", "DELETED_KEY", "DIGESTS_KEY", "MAX_RECORD_BYTES", "FleetVoices", "voice_key"]

log = logging.getLogger("lyre.fleet.records")

DIGESTS_KEY = "lyre:voice-digests"
CLAIMS_KEY = "lyre:voice-claims"
DELETED_KEY = "lyre:voices-deleted"
# A voice of 15 s is about 12 KB of JSON; a record far past that is not one an upload made.
MAX_RECORD_BYTES = 256 * 1024

# KEYS: the voice's record, digests, claims, deleted. ARGV: name, digest, claim, record.
# The name is taken when another claim holds it (a voice published before claims existed holds it with none).
_CLAIM = """
local held = redis.call('HGET', KEYS[3], ARGV[1])
if redis.call('HEXISTS', KEYS[2], ARGV[1]) == 1 and held ~= ARGV[3] then
  return 0
end
redis.call('SET', KEYS[1], ARGV[4])
redis.call('HSET', KEYS[2], ARGV[1], ARGV[2])
redis.call('HSET', KEYS[3], ARGV[1], ARGV[3])
redis.call('HDEL', KEYS[4], ARGV[1])
return 1
"""
# KEYS as above. ARGV: name, and optionally a claim: then only that claim is withdrawn.
_WITHDRAW = """
local held = redis.call('HGET', KEYS[3], ARGV[1]) or ''
if ARGV[2] and ARGV[2] ~= held then
  return 0
end
redis.call('DEL', KEYS[1])
redis.call('HDEL', KEYS[2], ARGV[1])
redis.call('HDEL', KEYS[3], ARGV[1])
redis.call('HSET', KEYS[4], ARGV[1], held)
return 1
"""


def voice_key(name: str) -> str:
    return f"lyre:voice:{name}"


def _keys(name: str) -> list[str]:
    return [voice_key(name), DIGESTS_KEY, CLAIMS_KEY, DELETED_KEY]


class FleetVoices:
    """One server's side of the fleet's reference voices."""

    def __init__(self, redis_url: str, voices: ReferenceVoices, interval_s: float = 1.0) -> None:
        self._redis = aioredis.Redis.from_url(redis_url, socket_timeout=2, socket_connect_timeout=2)
        self._voices = voices
        self._interval_s = interval_s
        self._claim = self._redis.register_script(_CLAIM)
        self._withdraw = self._redis.register_script(_WITHDRAW)
        self._task: asyncio.Task[None] | None = None
        self._refused: dict[str, str] = {}  # name -> digest of a fleet voice that failed its checks here
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

    async def check_new(self, name: str) -> None:
        """VoiceNameTaken when the fleet, as far as Redis tells, holds ``name``: a reference voice uploaded to
        any server, or an adapter resident on one. Redis away: nothing is known, nothing refused."""
        try:
            if await self._redis.hexists(DIGESTS_KEY, name):
                raise VoiceNameTaken(f"name: {name!r} is already a reference voice of the fleet (uploaded to "
                                     "another server); delete it first to replace it")
            members = sorted(m.decode() for m in await self._redis.smembers(MEMBERS_KEY))
            records = await self._redis.mget([server_key(m) for m in members]) if members else []
        except (RedisError, OSError) as exc:
            log.warning("fleet voices: cannot ask Redis whether %r is taken: %s", name, exc)
            return
        for record in records:
            try:
                server = ServerRecord.from_json(record) if record is not None else None
            except ValueError:
                continue
            if server is not None and name in server.adapters:
                raise VoiceNameTaken(f"name: {name!r} is already a cloned voice (adapter) on {server.url}")

    async def claim(self, voice: ReferenceVoice, claim: str) -> bool:
        """Make ``voice``, uploaded under ``claim``, the fleet's: VoiceNameTaken when another upload holds the
        name. False when Redis is away (logged): the voice is this server's alone until a sync claims it."""
        try:
            taken = not await self._claim(keys=_keys(voice.name),
                                          args=[voice.name, voice.digest, claim, voice.to_json()])
        except (RedisError, OSError) as exc:
            log.warning("reference voice %r not published to the fleet yet: %s", voice.name, exc)
            return False
        if taken:
            raise VoiceNameTaken(f"name: {voice.name!r} was taken by another upload to the fleet first")
        return True

    async def withdraw(self, name: str, claim: str | None = None) -> None:
        """Delete ``name`` from the fleet (with ``claim``: only if that upload still holds it); every server
        drops it at its next sync."""
        try:
            await self._withdraw(keys=_keys(name), args=[name] if claim is None else [name, claim])
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
        except Exception:  # noqa: BLE001 - a sync that fails for any other reason must not end the ones after it
            log.exception("fleet voices: a sync failed; the next one runs in %g s", self._interval_s)
        else:
            if self._failing:
                log.warning("fleet voices: Redis is back")
            self._failing = False

    async def sync(self) -> None:
        """Take what the fleet has and this server lacks, drop what it deleted, claim again what it lost."""
        digests = _table(await self._redis.hgetall(DIGESTS_KEY))
        claims = _table(await self._redis.hgetall(CLAIMS_KEY))
        deleted = _table(await self._redis.hgetall(DELETED_KEY))
        for name, removed in deleted.items():
            mine = self._voices.claim_of(name)
            if name not in digests and (mine is None or mine in ("", removed)):
                self._voices.drop(name)  # held for the fleet, or this very upload was deleted
        local = {v.name: v for v in self._voices}

        def stale(name: str, digest: str) -> bool:  # this server lacks the fleet's upload of ``name``
            if name not in local or local[name].digest != digest:
                return True
            mine = self._voices.claim_of(name)
            return mine is not None and name in claims and claims[name] != mine

        wanted = [name for name, digest in digests.items() if self._refused.get(name) != digest and stale(name, digest)]
        if wanted:
            records = await self._redis.mget([voice_key(name) for name in wanted])
            taken = await asyncio.to_thread(self._checked, wanted, records, digests)
            for voice in taken:
                if (why := self._voices.put(voice)) is not None:
                    log.warning("fleet voice %r not spoken here: %s", voice.name, why)
        for name in self._voices.on_disk():
            if name not in digests and name in self._voices:
                await self._claim_again(name)
        self.syncs += 1

    async def _claim_again(self, name: str) -> None:
        """Claim a voice kept on disk that Redis lacks; one another upload took meanwhile is left to the next
        sync, which takes the fleet's."""
        claim = self._voices.claim_of(name)
        assert claim is not None
        try:
            await self.claim(self._voices.get(name), claim)
        except VoiceNameTaken:
            pass

    def _checked(self, names: list[str], records: list[bytes | None], digests: dict[str, str],
                 ) -> list[ReferenceVoice]:
        """The fleet's ``records`` of ``names`` that pass the checks an upload passes (on a worker thread: the
        JSON and the prompt are work); the rest logged once per version and skipped."""
        good = []
        for name, record in zip(names, records):
            if record is None:
                continue  # deleted since the table was read
            try:
                if len(record) > MAX_RECORD_BYTES:
                    raise ValueError(f"{len(record)} bytes, more than a voice's {MAX_RECORD_BYTES}")
                voice = ReferenceVoice.from_record(parse_json(record))
                if voice.name != name:
                    raise ValueError(f"the record under {name!r} names {voice.name!r}")
                self._voices.check(voice)
            except ValueError as exc:
                log.warning("fleet voice %r skipped: %s", name, exc)
                self._refused[name] = digests[name]
                continue
            good.append(voice)
        return good


def _table(raw: dict[bytes, bytes]) -> dict[str, str]:
    return {k.decode(errors="replace"): v.decode(errors="replace") for k, v in raw.items()}
