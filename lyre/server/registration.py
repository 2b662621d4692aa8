"""``--register``: the server's side of fleet membership, and the drain that starts on a shutdown signal."""

from __future__ import annotations

from typing import TYPE_CHECKING

from fastapi import FastAPI

from lyre.server.state import ServerState

if TYPE_CHECKING:
    from lyre.fleet.member import Membership
    from lyre.fleet.voices import FleetVoices

__all__ = ["join_fleet", "share_voices", "start_draining"]


async def join_fleet(state: ServerState) -> Membership | None:
    """Register with ``config.register`` (heartbeat started), or None when the server stands alone.

    Redis is imported here only: a server that joins no fleet never loads its client.
    """
    config = state.config
    if config.register is None:
        return None
    from lyre.fleet.records import ServerRecord
    from lyre.fleet.member import FleetLoad, Membership

    services = tuple(name for name, on in (("tts", state.tts is not None), ("stt", state.stt is not None),
                                           ("chat", state.chat is not None), ("agent", state.converses)) if on)

    def sample() -> FleetLoad:
        adapters = state.tts.adapters if state.tts is not None else None
        resident = tuple(a["name"] for a in adapters.listing() if a["resident"]) if adapters else ()
        engines = [e.engine_stats() for e in (state.tts,) if e is not None] + \
            [c.stats() for c in (state.chat,) if c is not None]
        cached = sum(s.kv_cache.cached for s in engines if s.kv_cache is not None)
        return FleetLoad(state.admission.active + state.admission.queued + state.chat_active, resident, cached)

    assert config.advertise is not None  # ServerConfig checks it
    record = ServerRecord(url=config.advertise.rstrip("/"), capacity=config.serving.max_streams, services=services,
                          ttl_s=config.fleet_ttl_s)
    member = Membership(config.register, record, sample)
    await member.start()
    return member


async def share_voices(state: ServerState) -> FleetVoices | None:
    """With ``config.register``, the fleet's reference voices synced into this server's (and its own
    published to the fleet); None when the server stands alone or speaks none."""
    if state.config.register is None or state.tts is None or state.tts.references is None:
        return None
    from lyre.fleet.voices import FleetVoices

    shared = FleetVoices(state.config.register, state.tts.references)
    await shared.start()
    return shared


async def start_draining(app: FastAPI) -> None:
    """Take no new work from now on: /ready answers 503 and the fleet marks this server draining.

    Called as soon as a shutdown signal arrives, before the server waits for
    its connections; the streams in flight go on to their end.
    """
    state: ServerState | None = getattr(app.state, "lyre", None)
    if state is None:
        return
    state.draining = True
    state.ready = False
    member = getattr(app.state, "fleet_member", None)
    if member is not None:
        await member.drain()
