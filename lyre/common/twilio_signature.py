"""Twilio's request signature, ``X-Twilio-Signature``, as Twilio documents it: the base64 of an HMAC-SHA1,
keyed by the account's auth token, of the full URL Twilio requested followed by each POST parameter's name
and value, sorted by name. A WebSocket's handshake (a media stream's) is signed over its ``wss://`` URL,
with no parameters.

    signed(token, request.headers.get(SIGNATURE_HEADER, ""), requested_url(request), form.multi_items())

Written out here rather than taken from the ``twilio`` package, whose validator is these few lines but
which brings an HTTP client, PyJWT and more with it; tests/test_twilio.py checks the two agree.

The URL is the one Twilio asked for. Behind a proxy that ends TLS, a server sees ``http``/``ws`` where
Twilio wrote ``https``/``wss``, and a proxy may or may not say so (``X-Forwarded-Proto``); so a signature
over either scheme passes, as one with or without the default port does (Twilio's own validator allows
the port for the same reason: its signing is inconsistent about it). Neither widens what the signature
protects: only the auth token makes one.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from collections.abc import Iterable
from urllib.parse import urlsplit, urlunsplit

from starlette.requests import HTTPConnection

__all__ = ["SIGNATURE_HEADER", "requested_url", "signature", "signed"]

SIGNATURE_HEADER = "x-twilio-signature"
_TWINS = {"http": "https", "https": "http", "ws": "wss", "wss": "ws"}
_DEFAULT_PORTS = {"http": 80, "ws": 80, "https": 443, "wss": 443}


def signature(token: str, url: str, params: Iterable[tuple[str, str]] = ()) -> str:
    """The signature Twilio sends for a request to ``url`` with these POST parameters."""
    values: dict[str, set[str]] = {}
    for name, value in params:
        values.setdefault(name, set()).add(value)
    signed_text = url + "".join(name + value for name in sorted(values) for value in sorted(values[name]))
    digest = hmac.new(token.encode(), signed_text.encode(), hashlib.sha1).digest()
    return base64.b64encode(digest).decode()


def signed(token: str, offered: str, url: str, params: Iterable[tuple[str, str]] = ()) -> bool:
    """The request carries the signature of ``url`` (as requested; see the module docstring) and ``params``."""
    if not offered:
        return False
    params = list(params)
    return any(hmac.compare_digest(signature(token, candidate, params).encode(), offered.encode())
               for candidate in _variants(url))


def requested_url(connection: HTTPConnection) -> str:
    """The URL of a request or handshake as the client wrote it: scheme, Host header, the path and query
    as they came over the wire (percent-encoded)."""
    scope = connection.scope
    scheme: str = scope["scheme"]
    path: str = (scope.get("raw_path") or scope["path"].encode()).decode("latin-1")
    query: str = scope.get("query_string", b"").decode("latin-1")
    return urlunsplit((scheme, connection.headers.get("host", ""), path, query, ""))


def _variants(url: str) -> list[str]:
    """``url`` under both schemes, each without a port and with one (its own, else the scheme's default)."""
    parts = urlsplit(url)
    try:
        port = parts.port
    except ValueError:  # a Host header that is no host: only the URL as it came
        return [url]
    host = parts.netloc if port is None else parts.netloc.rsplit(":", 1)[0]
    found = []
    for scheme in (parts.scheme, _TWINS.get(parts.scheme, parts.scheme)):
        with_port = port or _DEFAULT_PORTS.get(scheme)
        for netloc in (host, f"{host}:{with_port}" if with_port else host):
            found.append(urlunsplit((scheme, netloc, parts.path, parts.query, "")))
    return list(dict.fromkeys(found))
