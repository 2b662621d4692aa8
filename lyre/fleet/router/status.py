"""``lyre route status``: the fleet as Redis holds it, printed for an operator."""

from __future__ import annotations

import time

import redis
from redis.exceptions import RedisError

from lyre.fleet.records import HOT_KEY, MEMBERS_KEY, ServerRecord, server_key
from lyre.fleet.router.ring import Ring, placement_keys

__all__ = ["fleet_status"]


def fleet_status(redis_url: str, vnodes: int) -> str:
    """The ring, every server with its load and adapters, and where each hot voice lives.

    Raises ValueError when Redis cannot be reached (the CLI prints it).
    """
    client = redis.Redis.from_url(redis_url, socket_timeout=3, socket_connect_timeout=3)
    try:
        urls = sorted(u.decode() for u in client.smembers(MEMBERS_KEY))
        values = client.mget([server_key(u) for u in urls]) if urls else []
        hot = {k.decode(): int(v) for k, v in client.hgetall(HOT_KEY).items()}
    except (RedisError, OSError) as exc:
        raise ValueError(f"cannot read the fleet from {redis_url}: {exc}") from None
    finally:
        client.close()
    records = [ServerRecord.from_json(v) for v in values if v is not None]
    ring = Ring(records, vnodes)
    now = time.time()
    lines = [f"ring: {len(ring)} server(s) taking work, {vnodes} virtual nodes each"
             f" ({len(records) - len(ring)} draining, {len(urls) - len(records)} expired)"]
    for r in records:
        state = "draining" if r.draining else "up"
        lines.append(f"  {r.url}  {state:8}  load {r.load}/{r.capacity}  services {','.join(r.services)}  "
                     f"heartbeat {now - r.heartbeat_at:.1f} s ago  adapters: {', '.join(r.adapters) or '-'}")
    lines.append(f"hot voices: {len(hot) or 'none'}")
    for voice, n in sorted(hot.items()):
        servers = [ring.home(f"voice:{key}") or "-" for key in placement_keys(voice, n)]
        lines.append(f"  {voice}: {n} placements -> {', '.join(servers)}")
    return "\n".join(lines)
