"""The router's Prometheus metrics, in a registry of its own."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

__all__ = ["RouterMetrics"]


class RouterMetrics:
    def __init__(self) -> None:
        r = self.registry = CollectorRegistry()
        self.routed = Counter("lyre_router_requests", "Requests routed, by API, server and how it was placed",
                              ["api", "placement", "server"], registry=r)
        self.overhead = Histogram("lyre_router_overhead_seconds",
                                  "Request in to request out to the server: routing and the body, before the hop",
                                  buckets=(0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.05), registry=r)
        self.upstream_first_byte = Histogram("lyre_router_upstream_headers_seconds",
                                             "Request sent to the server's response headers", registry=r)
        self.retries = Counter("lyre_router_retries", "Requests retried on the next server, by why",
                               ["reason"], registry=r)
        self.failures = Counter("lyre_router_failures", "Requests that failed at the router, by when",
                                ["stage"], registry=r)
        self.inflight = Gauge("lyre_router_inflight", "Requests and sockets in flight through this router, by server",
                              ["server"], registry=r)
        self.server_load = Gauge("lyre_router_server_load", "Each server's load at its last heartbeat",
                                 ["server"], registry=r)
        self.membership = Counter("lyre_router_membership_changes", "Servers joining, draining and leaving",
                                  ["event"], registry=r)
        self.ring_servers = Gauge("lyre_router_ring_servers", "Servers on the ring (taking new work)", registry=r)
        self.stale = Gauge("lyre_router_stale_ring", "1 while Redis is away and the ring is the last one read",
                           registry=r)
