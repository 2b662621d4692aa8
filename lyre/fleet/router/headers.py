"""Which headers cross the router, each way.

Headers about one connection, not the message, stay behind (RFC 9110 7.6.1): the fixed hop-by-hop set and
any header the ``Connection`` header names. The client's address is added to ``X-Forwarded-For``, so a
server's logs name the client rather than the router. ``Host`` goes through as the client sent it (as
HAProxy does by default), with ``X-Forwarded-Proto`` saying the scheme the client used, unless a proxy in
front already said: a server that builds or checks URLs from them (a Twilio webhook's stream URL, the
signature over it) sees the address the client knows, not the router's way to the server.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

__all__ = ["HOP_BY_HOP", "request_headers", "response_headers"]

HOP_BY_HOP = frozenset({"connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "proxy-connection",
                        "te", "trailer", "transfer-encoding", "upgrade"})
# Each hop writes these itself: the request's framing, the router's own Date and Server. Expect: the router
# has answered a 100-continue itself, by reading the body.
_REQUEST_OWN = frozenset({"content-length", "expect"})
_RESPONSE_OWN = frozenset({"date", "server"})
FORWARDED_FOR = "x-forwarded-for"
FORWARDED_PROTO = "x-forwarded-proto"


def _connection_bound(pairs: Iterable[tuple[str, str]]) -> frozenset[str]:
    """The hop-by-hop set and the headers ``Connection`` names (``Connection: close, x-trace``)."""
    named = {token.strip().lower() for name, value in pairs if name.lower() == "connection"
             for token in value.split(",")}
    return HOP_BY_HOP | named


def request_headers(headers: Mapping[str, str] | Iterable[tuple[str, str]], client: str | None,
                    keep_length: bool = False, drop: frozenset[str] = frozenset(),
                    scheme: str | None = None) -> list[tuple[str, str]]:
    """A request's headers for the server: what is end to end, with ``client`` added to X-Forwarded-For and
    ``scheme`` (the client's, at the router) as X-Forwarded-Proto where no proxy before said one.

    ``keep_length``: the body streams through as it came, so its Content-Length still describes it.
    ``drop``: more to leave behind (a WebSocket handshake's own headers).
    """
    pairs = list(headers.items() if isinstance(headers, Mapping) else headers)
    skip = _connection_bound(pairs) | _REQUEST_OWN | drop
    if keep_length:
        skip -= {"content-length"}
    out = [(k, v) for k, v in pairs if k.lower() not in skip and k.lower() != FORWARDED_FOR]
    before = [v for k, v in pairs if k.lower() == FORWARDED_FOR]
    if client is not None or before:
        out.append((FORWARDED_FOR, ", ".join(before + ([client] if client is not None else []))))
    if scheme is not None and not any(k.lower() == FORWARDED_PROTO for k, _ in out):
        out.append((FORWARDED_PROTO, scheme))
    return out


def response_headers(pairs: Iterable[tuple[str, str]]) -> list[tuple[str, str]]:
    """A server's response headers for the client: what is end to end (repeated ones kept, e.g. Set-Cookie)."""
    pairs = list(pairs)
    skip = _connection_bound(pairs) | _RESPONSE_OWN
    return [(k, v) for k, v in pairs if k.lower() not in skip]
