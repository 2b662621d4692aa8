"""Where a request goes: a consistent-hash ring over the servers, with bounded load and hot-voice placements.

Plain Python over `lyre.fleet.records.ServerRecord`s: no Redis, no network, so it is
tested with made-up fleets and loads.

- The ring is uhashring's ketama-compatible continuum: every server is hashed
  at ``vnodes`` x 4 points, so a server joining or leaving moves about 1/N of
  the routing identities and leaves the rest where they were. Every router
  builds the same ring from the same servers, so replicas agree without
  talking to each other.
- Bounded load (consistent hashing with bounded loads, Mirrokni et al. 2018):
  with this request counted, no server may hold more than ceil(c x average)
  streams; a server already there is passed over for the next one clockwise.
  So max/average stays at or under c once the average is a whole number
  (and within one stream of it otherwise).
- A hot voice has N placements: its identity, then ``identity#1`` ..
  ``identity#N-1``, each hashed on its own. A request goes to the placement
  whose server holds the voice's adapter, least loaded first; changing N
  moves only that voice's requests.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass

from uhashring import HashRing

from lyre.fleet.records import ServerRecord

__all__ = ["DEFAULT_LOAD_FACTOR", "DEFAULT_VNODES", "Ring", "Route", "placement_keys"]

DEFAULT_LOAD_FACTOR = 1.25
DEFAULT_VNODES = 40  # x 4 points each in a ketama continuum: 160 points per server


def placement_keys(identity: str, placements: int) -> list[str]:
    """The ring keys of an identity with ``placements`` placements; the first is the identity itself,
    so giving a voice more placements keeps its first where it was."""
    return [identity] + [f"{identity}#{i}" for i in range(1, placements)]


@dataclass(frozen=True)
class Route:
    """Where one request goes, and why."""

    server: str  # the server's URL
    key: str  # the ring key (placement) it was found from
    home: str  # the first server that key meets on the ring (equal to server unless passed over)
    adapter_hit: bool  # the server holds the voice's adapter already

    @property
    def passed_over(self) -> bool:
        return self.server != self.home


class Ring:
    """The servers taking new work (draining ones are left out), on a ketama ring."""

    def __init__(self, servers: Iterable[ServerRecord], vnodes: int = DEFAULT_VNODES) -> None:
        if vnodes < 1:
            raise ValueError(f"vnodes must be >= 1, got {vnodes}")
        self.servers = {r.url: r for r in sorted(servers, key=lambda r: r.url) if not r.draining}
        self.vnodes = vnodes
        self._ring = HashRing({url: {"vnodes": vnodes} for url in self.servers}, hash_fn="ketama")

    def update(self, records: Mapping[str, ServerRecord]) -> None:
        """New records for the same servers (loads, adapters): the points on the ring stay as they are."""
        self.servers = {url: records[url] for url in self.servers}

    def __len__(self) -> int:
        return len(self.servers)

    def walk(self, key: str) -> Iterator[str]:
        """Every server once, clockwise from ``key``'s point."""
        if self.servers:
            yield from self._ring.iterate_nodes(key)

    def home(self, key: str) -> str | None:
        """The server ``key`` lands on with no load bound."""
        return next(self.walk(key), None)

    def route(self, identity: str, loads: Mapping[str, int], *, service: str | None = "tts",
              load_factor: float = DEFAULT_LOAD_FACTOR, placements: int = 1, adapter: str | None = None,
              exclude: Iterable[str] = ()) -> Route | None:
        """The server for a request with this routing identity; None when no server serves ``service``
        (None: any server will do).

        ``loads``: each server's streams in flight. ``exclude``: servers that
        already failed this request. ``adapter``: the voice's adapter name, to
        prefer a placement whose server holds it.
        """
        skip = set(exclude)
        live = [url for url, r in self.servers.items()
                if (service is None or service in r.services) and url not in skip]
        if not live:
            return None
        total = sum(loads.get(url, 0) for url in live)
        bound = math.ceil(load_factor * (total + 1) / len(live))  # the request's own stream counts
        options = [self._place(key, loads, set(live), bound, adapter) for key in placement_keys(identity, placements)]
        return min(options, key=lambda r: (not r.adapter_hit, loads.get(r.server, 0)))

    def _place(self, key: str, loads: Mapping[str, int], live: set[str], bound: int,
               adapter: str | None) -> Route:
        home = None
        for url in self.walk(key):
            if url not in live:
                continue
            home = home or url
            if loads.get(url, 0) < bound:
                return Route(url, key, home, self._holds(url, adapter))
        raise AssertionError("unreachable: the least loaded server is always under the bound")

    def _holds(self, url: str, adapter: str | None) -> bool:
        return adapter is not None and adapter in self.servers[url].adapters
