"""``lyre route``: one entry point in front of many ``lyre serve`` processes.

A stateless proxy: it reads the fleet from Redis (servers registered with
``lyre serve --register``), hashes each request's routing identity (its
session or voice) onto a consistent-hash ring with bounded load, and passes
HTTP requests and WebSocket sessions through to the chosen server. It talks
to the servers over HTTP only and imports nothing of theirs.
"""

from lyre.fleet.router.app import create_router_app
from lyre.fleet.router.config import RouterConfig
from lyre.fleet.router.ring import Ring, Route

__all__ = ["RouterConfig", "Ring", "Route", "create_router_app"]
