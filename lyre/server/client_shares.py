"""Each client address's share of something a server has a fixed number of (speech streams, realtime sessions),
so that one client's flood cannot take all of it from the others (``--max-per-client``).

The address is the connection's peer, or the client a trusted proxy names (``--forwarded-allow-ips``). The share
is off by default: a deployment whose agent backend reaches the server from one address would otherwise be
held to a share of its own server.

    shares = ClientShares(2, "speech streams")
    if (why := shares.refusal("192.0.2.7")) is None:
        with shares.hold("192.0.2.7"): ...
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["ClientShares"]


class ClientShares:
    """What each client holds of ``what``, against ``share`` each (None: no share)."""

    def __init__(self, share: int | None, what: str) -> None:
        self.share = share
        self.what = what
        self.held: Counter[str] = Counter()

    def refusal(self, client: str | None) -> str | None:
        """Why ``client`` may take no more now, or None."""
        if self.share is None or client is None or self.held[client] < self.share:
            return None
        return (f"this client ({client}) holds {self.held[client]} {self.what}, its share of this server's "
                "(--max-per-client); retry when one ends")

    @contextmanager
    def hold(self, client: str | None) -> Iterator[None]:
        if client is None:
            yield
            return
        self.held[client] += 1
        try:
            yield
        finally:
            self.held[client] -= 1
            if self.held[client] <= 0:
                del self.held[client]
