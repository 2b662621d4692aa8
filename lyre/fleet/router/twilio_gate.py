"""Twilio's requests through a router that holds an API key.

Twilio cannot send the router's key, so its voice webhook and its media streams pass without it only on
Twilio's own signature (``X-Twilio-Signature``), checked here with the router's ``--twilio-auth-token`` (the
servers' token: Twilio signs with the account's). A router with a key and no token refuses them unless they
carry the key (as `?api_key=KEY` in the webhook's URL, say); a router without a key passes them on, as it does
everything, and each server checks what it must.
"""

from __future__ import annotations

from collections.abc import Iterable

from starlette.requests import HTTPConnection

from lyre.common.api_keys import authorized
from lyre.common.twilio_signature import SIGNATURE_HEADER, requested_url, signed
from lyre.fleet.router.config import RouterConfig

__all__ = ["TWILIO_STREAM", "TWILIO_VOICE", "is_twilio", "twilio_refusal"]

TWILIO_VOICE = "/v1/twilio/voice"
TWILIO_STREAM = "/v1/twilio/media-stream"

_NO_TOKEN = ("Twilio's requests through a router with --api-key pass on Twilio's signature, which this router "
             "cannot check: start it with --twilio-auth-token (the servers' Twilio auth token), or put the router's "
             "key in the webhook's URL (?api_key=KEY)")
_UNSIGNED = "missing or wrong X-Twilio-Signature (the router checks it with its --twilio-auth-token)"


def is_twilio(path: str) -> bool:
    """The paths Twilio calls: the voice webhook and the media streams (with a credential after them or not)."""
    return path == TWILIO_VOICE or path == TWILIO_STREAM or path.startswith(TWILIO_STREAM + "/")


def twilio_refusal(config: RouterConfig, connection: HTTPConnection,
                   form: Iterable[tuple[str, str]] = ()) -> str | None:
    """Why this request of Twilio's may not pass (None: it may): it carries neither the router's key nor a
    signature of Twilio's over its URL and ``form`` (the webhook's POST parameters)."""
    if config.api_key is None or authorized(config.api_key, connection.headers, connection.query_params):
        return None
    if config.twilio_auth_token is None:
        return _NO_TOKEN
    if not signed(config.twilio_auth_token, connection.headers.get(SIGNATURE_HEADER, ""), requested_url(connection),
                  list(form)):
        return _UNSIGNED
    return None
