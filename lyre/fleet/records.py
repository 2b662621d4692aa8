"""The fleet's wire format: what a server writes to Redis and what routers read.

Plain Python (no Redis client, no server, no router), so both sides import
it without pulling in the other. The layout in Redis:

    lyre:fleet:servers              a set of advertised URLs (members, maybe expired)
    lyre:fleet:server:<URL>         one server's `ServerRecord` as JSON, expiring after its TTL
    lyre:fleet:hot                  a hash: voice -> placements (hot voices, set through a router's admin API)
    lyre:fleet:events               a pub/sub channel: "join", "drain", "leave", "hot" (routers refresh at once)

A server heartbeats its record with a TTL; one that stops heartbeating drops
out when the key expires, and routers prune its set entry. The record's key,
not the set, is the truth: a member without a key is gone.
"""

from __future__ import annotations

import hashlib
import json
import secrets
from dataclasses import asdict, dataclass, field

__all__ = [
    "EVENTS_CHANNEL",
    "HOT_KEY",
    "MEMBERS_KEY",
    "SERVICES",
    "ServerRecord",
    "server_key",
    "server_tag",
    "tag_in_id",
    "tagged_id",
]

_PREFIX = "lyre:fleet:"
MEMBERS_KEY = _PREFIX + "servers"
HOT_KEY = _PREFIX + "hot"
EVENTS_CHANNEL = _PREFIX + "events"
# What a server may serve; a router sends each API only to servers that serve it. "agent": it can hold a
# /v1/realtime conversation (text to speech, speech to text and a think step: its own chat model or --llm-url's).
SERVICES = ("tts", "stt", "chat", "agent")
_SCHEMA = 1  # bumped when a field changes meaning; readers refuse records of another schema
_TAG_CHARS = 12  # hex digits of a server's tag: 48 bits, no two servers of a fleet share one by chance


def server_key(url: str) -> str:
    """The key holding the record of the server advertised at ``url``."""
    return f"{_PREFIX}server:{url}"


def server_tag(url: str) -> str:
    """A short, stable name of the server advertised at ``url``, which every router can compute from the records."""
    return hashlib.sha256(url.encode()).hexdigest()[:_TAG_CHARS]


def tagged_id(prefix: str, url: str | None) -> str:
    """A new id for something that lives on one server (a WebRTC call): ``prefix``, the server's tag when it is
    in a fleet (``url``, its advertised URL), then random hex. A router sends a request naming the id to the
    server the tag names, wherever the ring would have put it."""
    tag = f"{server_tag(url)}_" if url else ""
    return f"{prefix}{tag}{secrets.token_hex(12)}"


def tag_in_id(prefix: str, ident: str) -> str | None:
    """The server tag in an id `tagged_id` made (None: an id with no tag, or not one of ``prefix``)."""
    tag, sep, _ = ident.removeprefix(prefix).partition("_")
    if not ident.startswith(prefix) or not sep or len(tag) != _TAG_CHARS:
        return None
    return tag


@dataclass(frozen=True)
class ServerRecord:
    """One server as the fleet sees it, refreshed by every heartbeat."""

    url: str  # where routers reach it (``--advertise``), and its name everywhere
    capacity: int  # streams at once (``--max-streams``)
    load: int = 0  # streams running and queued, and chat completions in flight, at the heartbeat
    adapters: tuple[str, ...] = ()  # resident voice adapters: a request for one is answered without loading it
    # KV-cache blocks its engines hold findable by a prefix (conversations' earlier turns): what a session
    # kept on this server reuses, and another server would prefill again
    cached_blocks: int = 0
    services: tuple[str, ...] = ("tts",)
    draining: bool = False  # shutting down: finishing its streams, taking nothing new
    ttl_s: float = 3.0  # the record expires this long after the last heartbeat
    heartbeat_at: float = 0.0  # the server's wall clock at the heartbeat (changes with every one)
    schema: int = field(default=_SCHEMA)

    def __post_init__(self) -> None:
        if not self.url.startswith(("http://", "https://")):
            raise ValueError(f"a server's URL must start with http:// or https://, got {self.url!r}")
        if self.capacity < 1 or self.load < 0:
            raise ValueError(f"capacity must be >= 1 and load >= 0, got {self.capacity} and {self.load}")
        if unknown := set(self.services) - set(SERVICES):
            raise ValueError(f"unknown services {sorted(unknown)}; known: {', '.join(SERVICES)}")
        if not self.ttl_s > 0:
            raise ValueError(f"ttl_s must be > 0, got {self.ttl_s}")

    def to_json(self) -> str:
        return json.dumps(asdict(self), separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str | bytes) -> ServerRecord:
        """The record in ``text``; ValueError when it is not one (another schema, a missing field).

        A service this reader does not know (a newer server's) is left out rather than the record refused:
        the server is still routed everything this reader knows it serves.
        """
        try:
            data = json.loads(text)
            if data.get("schema") != _SCHEMA:
                raise ValueError(f"record schema {data.get('schema')!r}, expected {_SCHEMA}")
            services = tuple(s for s in map(str, data["services"]) if s in SERVICES)
            return cls(url=str(data["url"]), capacity=int(data["capacity"]), load=int(data["load"]),
                       adapters=tuple(map(str, data["adapters"])), services=services,
                       cached_blocks=int(data.get("cached_blocks", 0)),  # absent from an older server's record
                       draining=bool(data["draining"]), ttl_s=float(data["ttl_s"]),
                       heartbeat_at=float(data["heartbeat_at"]))
        except (KeyError, TypeError, AttributeError) as exc:
            raise ValueError(f"not a server record: {exc!r}") from None
