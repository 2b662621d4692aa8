"""SIP digest authentication on lyre's side (RFC 3261 22, RFC 2617's MD5 with qop=auth): the challenge an
INVITE gets, and the check of the credentials it comes back with. A nonce is the time it was made and an HMAC
of it under a key of the server's, good for NONCE_TTL_S; within that, credentials are good once: each must
count up (``nc``, with qop=auth) past the last one seen for its nonce, and name the request's own host and port,
so a captured header cannot place another call.

    digest = Digest("user", "password")
    header = digest.challenge(now)                   # WWW-Authenticate for a 401
    digest.check(authorization, "INVITE", now, uri)  # True for fresh credentials made with the password
"""

from __future__ import annotations

import hashlib
import hmac
import os
import re

__all__ = ["NONCE_TTL_S", "REALM", "Digest", "digest_params"]

REALM = "lyre"
NONCE_TTL_S = 60.0
# An Authorization header longer than this is not read: real ones are a few hundred characters.
MAX_HEADER = 2048
# A nonce's time stamp, in ms, has at most this many digits (a forged one of hundreds would overflow).
_STAMP_DIGITS = 16
_PARAM = re.compile(r'\s*([A-Za-z0-9-]+)\s*=\s*("(?:[^"\\]|\\.)*"|[^,\s]*)\s*(?:,|$)')


def _md5(text: str) -> str:
    return hashlib.md5(text.encode()).hexdigest()  # noqa: S324 - what SIP digest (RFC 2617) is made of


def digest_params(header: str) -> dict[str, str] | None:
    """An Authorization header's ``Digest`` parameters; None if it is not one."""
    if len(header) > MAX_HEADER:
        return None
    scheme, _, rest = header.strip().partition(" ")
    if scheme.lower() != "digest":
        return None
    params: dict[str, str] = {}
    for match in _PARAM.finditer(rest):
        name, value = match.group(1).lower(), match.group(2)
        params[name] = value[1:-1].replace('\\"', '"') if value.startswith('"') else value
    return params


def _host(uri: str) -> str:
    """A SIP URI's host and port: what the digest ``uri`` must share with the request's (clients differ on
    the rest: SIPp names no user)."""
    rest = uri.strip().lower().partition(":")[2]
    return rest.rpartition("@")[2].partition(";")[0].partition("?")[0]


class Digest:
    """One user and password that calls must authenticate with."""

    def __init__(self, user: str, password: str) -> None:
        self.user, self.password = user, password
        self._key = os.urandom(32)
        self._counts: dict[str, tuple[float, int]] = {}  # nonce -> (when it was made, the last nc taken)

    def challenge(self, now: float) -> str:
        return f'Digest realm="{REALM}", nonce="{self._nonce(now)}", algorithm=MD5, qop="auth"'

    def check(self, authorization: str | None, method: str, now: float, uri: str | None = None) -> bool:
        """Whether ``authorization`` holds credentials made with the password for ``method`` (and the request
        URI ``uri``, when given) to a fresh nonce of this server's, not taken before."""
        params = digest_params(authorization or "")
        if params is None or params.get("algorithm", "MD5").upper() != "MD5":
            return False
        nonce = params.get("nonce", "")
        stamp, _, _ = nonce.partition(".")
        if not stamp.isdigit() or len(stamp) > _STAMP_DIGITS:
            return False
        made = int(stamp) / 1000
        if not (hmac.compare_digest(nonce, self._nonce(made)) and 0 <= now - made <= NONCE_TTL_S):
            return False
        if params.get("username") != self.user or params.get("realm") != REALM or "uri" not in params:
            return False
        if uri is not None and _host(params["uri"]) != _host(uri):
            return False
        ha1 = _md5(f"{self.user}:{REALM}:{self.password}")
        ha2 = _md5(f"{method}:{params['uri']}")
        if params.get("qop") == "auth":
            expected = _md5(f"{ha1}:{nonce}:{params.get('nc', '')}:{params.get('cnonce', '')}:auth:{ha2}")
        elif "qop" in params:
            return False
        else:
            expected = _md5(f"{ha1}:{nonce}:{ha2}")
        return hmac.compare_digest(expected, params.get("response", "")) and self._fresh(nonce, made, params, now)

    def _fresh(self, nonce: str, made: float, params: dict[str, str], now: float) -> bool:
        """Credentials good so far are taken once: their ``nc`` (1 without qop) past the last taken for the
        nonce. Nonces past their life are forgotten (they fail on their time stamp)."""
        try:
            count = int(params.get("nc", "1"), 16) if len(params.get("nc", "1")) <= 8 else -1
        except ValueError:
            return False
        if count <= self._counts.get(nonce, (made, 0))[1]:
            return False
        self._counts = {n: seen for n, seen in self._counts.items() if now - seen[0] <= NONCE_TTL_S}
        self._counts[nonce] = (made, count)
        return True

    def _nonce(self, when: float) -> str:
        stamp = str(int(when * 1000))
        return f"{stamp}.{hmac.new(self._key, stamp.encode(), hashlib.sha256).hexdigest()[:32]}"
