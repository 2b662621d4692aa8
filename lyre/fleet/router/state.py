"""What every route of the router needs: the fleet view, the pooled client, the loads it has placed."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field

import aiohttp

from lyre.fleet.records import server_tag, tag_in_id
from lyre.fleet.router.config import RouterConfig
from lyre.fleet.router.fleet_view import FleetView
from lyre.fleet.router.identity import CALL_PREFIX, Identity
from lyre.fleet.router.metrics import RouterMetrics
from lyre.fleet.router.ring import Route

__all__ = ["Lease", "RouterState"]


@dataclass
class RouterState:
    config: RouterConfig
    view: FleetView
    client: aiohttp.ClientSession  # pooled keep-alive connections to every server
    metrics: RouterMetrics
    inflight: Counter[str] = field(default_factory=Counter)  # requests and sockets this router has open, by server
    clients: Counter[str] = field(default_factory=Counter)  # the same, by client address

    def loads(self) -> dict[str, int]:
        """Each server's load for the bound: the requests and sockets this router has in flight there.

        Not the heartbeat's figure: that is up to a third of the TTL old and still counts requests that have
        ended, which would push a voice off its server at low load. Each replica bounds what it placed
        itself; replicas behind one balancer see similar shares, so the fleet stays near the bound too.
        """
        return {url: self.inflight[url] for url in self.view.servers}

    def choose(self, identity: Identity, service: str | None, api: str, exclude: Iterable[str] = ()) -> Route | None:
        """The server for this request, or None when no server on the ring serves ``service``."""
        ring = self.view.ring
        placements = self.view.hot.get(identity.voice, 1) if identity.voice else 1
        route = ring.route(identity.key, self.loads(), service=service, load_factor=self.config.load_factor,
                           placements=placements, adapter=identity.voice, exclude=exclude)
        if route is not None:
            how = "passed_over" if route.passed_over else "adapter" if route.adapter_hit else "home"
            self.metrics.routed.labels(api, how, route.server).inc()
        return route

    def holder(self, call: str) -> str | None:
        """The server holding ``call`` (its id names the server's tag), draining or not; None: no such server."""
        if (tag := tag_in_id(CALL_PREFIX, call)) is None:
            return None
        return next((url for url in self.view.servers if server_tag(url) == tag), None)

    def full(self) -> str | None:
        """Why a new request or socket is refused now (``max_inflight`` are open), or None when it may go on."""
        limit = self.config.max_inflight
        if sum(self.inflight.values()) >= limit:
            return f"the router has {limit} requests and sockets in flight, its limit; retry shortly"
        return None

    def over_share(self, client: str | None) -> str | None:
        """Why ``client`` may open nothing more now (its ``max_inflight_per_client`` are open), or None."""
        share = self.config.max_inflight_per_client
        if share is not None and client is not None and self.clients[client] >= share:
            return (f"this client ({client}) has {share} requests and sockets in flight through the router, "
                    "its share (--max-inflight-per-client); retry when one ends")
        return None

    def lease(self, url: str, client: str | None = None) -> Lease:
        """One more request or socket in flight on ``url`` (from ``client``), until the lease is released,
        however it ends."""
        self.inflight[url] += 1
        self.metrics.inflight.labels(url).set(self.inflight[url])
        if client is not None:
            self.clients[client] += 1
        return Lease(self, url, client)

    def _release(self, url: str, client: str | None) -> None:
        if client is not None:
            self.clients[client] -= 1
            if self.clients[client] <= 0:
                del self.clients[client]
        self.inflight[url] -= 1
        self.metrics.inflight.labels(url).set(self.inflight[url])
        if self.inflight[url] <= 0:
            del self.inflight[url]


class Lease:
    """One request's or socket's place in its server's in-flight count; released once, however often asked."""

    def __init__(self, state: RouterState, url: str, client: str | None) -> None:
        self._state, self.url, self.client = state, url, client
        self.released = False

    def release(self) -> None:
        if not self.released:
            self.released = True
            self._state._release(self.url, self.client)
