"""The router's settings, validated once."""

from __future__ import annotations

from dataclasses import dataclass

from lyre.fleet.router.ring import DEFAULT_LOAD_FACTOR, DEFAULT_VNODES

__all__ = ["RouterConfig"]


@dataclass(frozen=True)
class RouterConfig:
    """What ``lyre route`` runs with."""

    redis: str  # redis://HOST:PORT/DB: where the fleet registers
    host: str = "127.0.0.1"
    port: int = 8080
    load_factor: float = DEFAULT_LOAD_FACTOR  # c: a server past c x the average load is passed over
    vnodes: int = DEFAULT_VNODES  # virtual nodes per server on the ring
    poll_s: float = 1.0  # the fleet is read this often beside its events
    admin_key: str | None = None  # the hot-voice admin routes answer only to this key; None: they are off
    api_key: str | None = None  # every proxied request must carry this key (as a server's); None: open
    # With api_key: Twilio's webhook and media streams, which cannot carry it, pass on Twilio's signature checked
    # with this token; None: they are refused.
    twilio_auth_token: str | None = None
    connect_timeout_s: float = 2.0  # to a server; past it the request is retried on the next one
    upstream_timeout_s: float = 300.0  # the longest wait for a server's next byte (queued requests included)
    # A body that may name the routing key (a speech request's voice) is read, up to this, before it goes on,
    # so a retry can resend it; every other body streams through unread (the server applies its own limit).
    max_body_bytes: int = 1024 * 1024
    max_inflight: int = 1024  # requests and sockets open through this router at once; more get 503 at once
    # One client address's share of max_inflight: more from it get 429 at once, so one client's flood leaves
    # room for the others. None: no share (a client behind the same balancer address as the rest must not
    # be capped on its own).
    max_inflight_per_client: int | None = None
    first_message_timeout_s: float = 10.0  # a TTS socket routed by its first message must send it this soon

    def __post_init__(self) -> None:
        if not self.redis.startswith(("redis://", "rediss://", "unix://")):
            raise ValueError(f"--redis must be a redis://, rediss:// or unix:// URL, got {self.redis!r}")
        if not self.load_factor > 1:
            raise ValueError(f"load factor c must be > 1, got {self.load_factor}")
        if self.vnodes < 1:
            raise ValueError(f"vnodes must be >= 1, got {self.vnodes}")
        for name in ("poll_s", "connect_timeout_s", "upstream_timeout_s", "first_message_timeout_s"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be > 0, got {getattr(self, name)}")
        if not 0 < self.port < 65536:
            raise ValueError(f"port must be in 1..65535, got {self.port}")
        for name in ("max_body_bytes", "max_inflight", "max_inflight_per_client"):
            if getattr(self, name) is not None and getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        for name in ("admin_key", "api_key"):
            if getattr(self, name) is not None and not getattr(self, name):
                raise ValueError(f"{name} must not be empty")
        if self.api_key is not None and self.api_key == self.admin_key:
            raise ValueError("the admin key must differ from the API key")
