"""A phone stream's credential (with ``--twilio-auth-token``): what admits one Twilio Media Stream, for one
call, once, for a short while, with the voice, instructions and session the voice webhook granted it.

The webhook, which Twilio signs (the call's ``CallSid`` in its form), puts the credential in the stream
URL's path (Twilio allows no query string on a stream URL):

    wss://HOST/v1/twilio/media-stream/{call_sid}.{expires}.{nonce}.{grant}.{mac}

- ``call_sid``: the call the webhook answered; the stream's ``start.callSid`` must be it;
- ``expires``: Unix seconds, TTL_S after the webhook; later, the stream is refused;
- ``nonce``: random, so that each credential is another (a call the webhook answers twice gets two);
- ``grant``: a digest of the ``voice``, ``instructions`` and ``session`` the TwiML gives the stream as
  ``<Parameter>``s; its ``start.customParameters`` must carry those, and nothing else of them;
- ``mac``: an HMAC-SHA256 of the rest, keyed by the auth token.

Self-contained, so any server of a fleet that shares the auth token admits a stream whose webhook another
answered; no memory is shared between them. Single use is kept by each server (`StreamCredentials`): one
seen again there is refused as a replay. On another server a replay would get in once more within the
credential's lifetime, which is why that is a minute.

    path = issue(token, call_sid, {"voice": "leo"}, now=time.time())
    credential = StreamCredentials.of(app).admit(token, path, now=time.time())   # Refused: why not
    credential.check(start_call_sid, custom_parameters)                           # Refused: why not
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import re
import secrets
from dataclasses import dataclass

from fastapi import FastAPI

__all__ = ["GRANTED", "TTL_S", "Credential", "Refused", "StreamCredentials", "issue"]

GRANTED = ("voice", "instructions", "session")  # the custom parameters a credential grants
TTL_S = 60  # Twilio opens the stream as soon as it has the TwiML: a minute is ample
_CALL_SID = re.compile(r"[A-Za-z0-9]{1,64}")
_CONTEXT = b"lyre twilio media stream\n"  # what else the auth token signs never reads as one of these


class Refused(ValueError):
    """A credential that admits nothing; ``kind`` names the reason for the metric."""

    def __init__(self, kind: str, reason: str) -> None:
        super().__init__(reason)
        self.kind = kind


@dataclass(frozen=True)
class Credential:
    """An admitted stream's credential: the call and parameters it was issued for."""

    call_sid: str
    grant: str

    def check(self, call_sid: str, parameters: dict[str, str]) -> None:
        """The stream's ``start``: its call and the parameters it will use must be the ones granted."""
        if call_sid != self.call_sid:
            raise Refused("other_call", f"start.callSid {call_sid[:64]!r} is not the call the credential was issued "
                                        f"for ({self.call_sid})")
        if _grant(parameters) != self.grant:
            raise Refused("parameters", "start.customParameters (voice, instructions, session) are not the ones "
                                        "the voice webhook granted")


def issue(token: str, call_sid: str, parameters: dict[str, str], now: float) -> str:
    """The credential, as a path segment, for a stream of call ``call_sid`` given ``parameters``."""
    if not _CALL_SID.fullmatch(call_sid):
        raise ValueError("CallSid must be letters and digits (Twilio's are CA and 32 hex digits)")
    fields = (call_sid, str(int(now) + TTL_S), secrets.token_urlsafe(9), _grant(parameters))
    return ".".join((*fields, _mac(token, *fields)))


class StreamCredentials:
    """The credentials this server has admitted, until they expire: each admits one stream."""

    def __init__(self) -> None:
        self._used: dict[str, float] = {}  # mac -> expires

    @classmethod
    def of(cls, app: FastAPI) -> StreamCredentials:
        if (credentials := getattr(app.state, "twilio_credentials", None)) is None:
            credentials = app.state.twilio_credentials = cls()
        return credentials

    def admit(self, token: str, path: str, now: float) -> Credential:
        """The credential in a stream URL's ``path`` segment, if it admits a stream now (once)."""
        parts = path.split(".")
        if len(parts) != 5 or not _CALL_SID.fullmatch(parts[0]) or not parts[1].isdigit():
            raise Refused("malformed", "the stream URL holds no credential of this server's; streams are admitted "
                                       "only from the TwiML its voice webhook answers")
        call_sid, expires, nonce, grant, mac = parts
        if not hmac.compare_digest(mac.encode(), _mac(token, call_sid, expires, nonce, grant).encode()):
            raise Refused("forged", "the stream credential was not issued with this server's auth token")
        if int(expires) < now:
            raise Refused("expired", f"the stream credential expired {now - int(expires):.0f} s ago (it lasts "
                                     f"{TTL_S} s from the voice webhook)")
        self._used = {used: until for used, until in self._used.items() if until >= now}
        if mac in self._used:
            raise Refused("replayed", "the stream credential was used already (each admits one stream)")
        self._used[mac] = int(expires)
        return Credential(call_sid, grant)


def _grant(parameters: dict[str, str]) -> str:
    """A digest of the granted parameters that are set (the ones the stream's set-up uses)."""
    granted = {name: parameters[name] for name in GRANTED if parameters.get(name)}
    digest = hashlib.sha256(json.dumps(granted, sort_keys=True).encode()).digest()
    return base64.urlsafe_b64encode(digest[:18]).decode()


def _mac(token: str, *fields: str) -> str:
    signed = _CONTEXT + ".".join(fields).encode()
    return base64.urlsafe_b64encode(hmac.new(token.encode(), signed, hashlib.sha256).digest()).decode().rstrip("=")
