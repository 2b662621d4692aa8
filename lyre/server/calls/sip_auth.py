"""SIP digest authentication on lyre's side (RFC 3261 22, RFC 2617's MD5 with qop=auth): the challenge an
INVITE gets, and the check of the credentials it comes back with. Stateless: a nonce is the time it was made
and an HMAC of it under a key of the server's, good for NONCE_TTL_S.

    digest = Digest("user", "password")
    header = digest.challenge(now)              # WWW-Authenticate for a 401
    digest.check(authorization, "INVITE", now)  # True for credentials made with the password to a fresh nonce
"""

from __future__ import annotations

import hashlib
import hmac
import os
import re

__all__ = ["NONCE_TTL_S", "REALM", "Digest", "digest_params"]

REALM = "lyre"
NONCE_TTL_S = 60.0
_PARAM = re.compile(r'\s*([A-Za-z0-9-]+)\s*=\s*("(?:[^"\\]|\\.)*"|[^,\s]*)\s*(?:,|$)')


def _md5(text: str) -> str:
    return hashlib.md5(text.encode()).hexdigest()  # noqa: S324 - what SIP digest (RFC 2617) is made of


def digest_params(header: str) -> dict[str, str] | None:
    """An Authorization header's ``Digest`` parameters; None if it is not one."""
    scheme, _, rest = header.strip().partition(" ")
    if scheme.lower() != "digest":
        return None
    params: dict[str, str] = {}
    for match in _PARAM.finditer(rest):
        name, value = match.group(1).lower(), match.group(2)
        params[name] = value[1:-1].replace('\\"', '"') if value.startswith('"') else value
    return params


class Digest:
    """One user and password that calls must authenticate with."""

    def __init__(self, user: str, password: str) -> None:
        self.user, self.password = user, password
        self._key = os.urandom(32)

    def challenge(self, now: float) -> str:
        return f'Digest realm="{REALM}", nonce="{self._nonce(now)}", algorithm=MD5, qop="auth"'

    def check(self, authorization: str | None, method: str, now: float) -> bool:
        params = digest_params(authorization or "")
        if params is None or params.get("algorithm", "MD5").upper() != "MD5":
            return False
        nonce = params.get("nonce", "")
        stamp, _, _ = nonce.partition(".")
        try:
            made = int(stamp) / 1000
        except ValueError:
            return False
        if not (hmac.compare_digest(nonce, self._nonce(made)) and 0 <= now - made <= NONCE_TTL_S):
            return False
        if params.get("username") != self.user or params.get("realm") != REALM or "uri" not in params:
            return False
        ha1 = _md5(f"{self.user}:{REALM}:{self.password}")
        ha2 = _md5(f"{method}:{params['uri']}")
        if params.get("qop") == "auth":
            expected = _md5(f"{ha1}:{nonce}:{params.get('nc', '')}:{params.get('cnonce', '')}:auth:{ha2}")
        elif "qop" in params:
            return False
        else:
            expected = _md5(f"{ha1}:{nonce}:{ha2}")
        return hmac.compare_digest(expected, params.get("response", ""))

    def _nonce(self, when: float) -> str:
        stamp = str(int(when * 1000))
        return f"{stamp}.{hmac.new(self._key, stamp.encode(), hashlib.sha256).hexdigest()[:32]}"
