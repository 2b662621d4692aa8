"""How much of the SIP endpoint each source may use, so one source's flood cannot deny another.

A source is an IP address. Those in ``--sip-allow`` are *trusted* (a trunk, a PBX); the rest are *strangers*,
who reach lyre only with ``--sip-auth`` and must authenticate. The two never share a budget:

- **New calls** (`InviteBuckets`): every source has its own token bucket (INVITES_PER_S, INVITE_BURST), spent
  before anything else is done with its INVITE, so a flood from one address is answered 503 while every other
  is answered as usual. Strangers' INVITEs also spend from one bucket shared by all strangers (STRANGER_*): a
  flood from many forged UDP addresses is bounded too, and still cannot touch a trusted trunk's bucket.
- **TCP connections** (`ConnectionCaps`): trusted sources share MAX_TRUSTED_CONNECTIONS; strangers have
  STRANGER_CONNECTIONS_EACH each and MAX_STRANGER_CONNECTIONS together. A connection that carries no call
  and sends no complete message for IDLE_S (a stranger's) or TRUSTED_IDLE_S (a trusted one's) is closed.

    buckets = InviteBuckets()
    buckets.take("192.0.2.7", trusted=False, now=time.monotonic())   # False: answer 503
    caps = ConnectionCaps()
    caps.admit("192.0.2.7", trusted=False)   # None, or why it is refused ("connections")
    caps.release("192.0.2.7", trusted=False)
"""

from __future__ import annotations

from collections import Counter, OrderedDict

__all__ = ["IDLE_S", "TRUSTED_IDLE_S", "ConnectionCaps", "InviteBuckets"]

INVITES_PER_S = 20.0  # new calls a second from one source, on average, before 503
INVITE_BURST = 40.0
STRANGER_INVITES_PER_S = 40.0  # from all strangers together
STRANGER_BURST = 80.0
MAX_SOURCES = 4096  # buckets kept; the least recently seen source's is dropped first (it starts full again)

MAX_TRUSTED_CONNECTIONS = 64  # a trunk or PBX keeps one or a few
MAX_STRANGER_CONNECTIONS = 64
STRANGER_CONNECTIONS_EACH = 4
# 64 * T1 (RFC 3261's timer B): no transaction lasts longer, so a connection quiet this long holds nothing.
IDLE_S = 32.0
TRUSTED_IDLE_S = 600.0  # a trunk's connection may sit between its calls (its keep-alives come every 30-120 s)


class _Bucket:
    __slots__ = ("tokens", "at")

    def __init__(self, tokens: float, at: float) -> None:
        self.tokens, self.at = tokens, at

    def take(self, now: float, rate: float, burst: float) -> bool:
        self.tokens = min(burst, self.tokens + (now - self.at) * rate)
        self.at = now
        if self.tokens < 1:
            return False
        self.tokens -= 1
        return True


class InviteBuckets:
    """New calls a second, per source, and for all strangers together; see the module docstring."""

    def __init__(self) -> None:
        self._sources: OrderedDict[str, _Bucket] = OrderedDict()
        self._strangers: _Bucket | None = None

    def take(self, source: str, trusted: bool, now: float) -> bool:
        """Spend one of ``source``'s new calls; False when it (or, for a stranger, all strangers) has none."""
        bucket = self._sources.pop(source, None) or _Bucket(INVITE_BURST, now)
        self._sources[source] = bucket  # the most recently seen last
        while len(self._sources) > MAX_SOURCES:
            self._sources.popitem(last=False)
        if not bucket.take(now, INVITES_PER_S, INVITE_BURST):
            return False  # its own flood: the others' budget untouched
        if trusted:
            return True
        self._strangers = self._strangers or _Bucket(STRANGER_BURST, now)
        return self._strangers.take(now, STRANGER_INVITES_PER_S, STRANGER_BURST)


class ConnectionCaps:
    """TCP connections open, per source and by trust; see the module docstring."""

    def __init__(self) -> None:
        self._strangers: Counter[str] = Counter()
        self._trusted = 0

    def admit(self, source: str, trusted: bool) -> str | None:
        """Count one more connection from ``source``, or say why not (nothing counted then)."""
        if trusted:
            if self._trusted >= MAX_TRUSTED_CONNECTIONS:
                return "connections"
            self._trusted += 1
            return None
        if self._strangers[source] >= STRANGER_CONNECTIONS_EACH or self._strangers.total() >= MAX_STRANGER_CONNECTIONS:
            return "connections"
        self._strangers[source] += 1
        return None

    def release(self, source: str, trusted: bool) -> None:
        if trusted:
            self._trusted -= 1
            return
        self._strangers[source] -= 1
        if self._strangers[source] <= 0:
            del self._strangers[source]

    @property
    def open(self) -> int:
        return self._trusted + self._strangers.total()
