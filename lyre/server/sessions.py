"""The realtime sessions a server holds: sockets, WebRTC calls and phone streams counted together against
``--stt-max-sessions``; the calls a backend may attach to (``/v1/realtime?call_id=``: a sideband); and the
agent settings each conversation opens with, whatever its transport."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, Protocol

from fastapi import FastAPI

from lyre.agent import AgentConfig
from lyre.server.client_shares import ClientShares
from lyre.server.state import ServerState
from lyre.stt import RealtimeConfig

__all__ = ["Attachable", "RealtimeSessions", "agent_config"]


class Attachable(Protocol):
    """A call a backend may attach to over a WebSocket, as OpenAI's sideband connections do."""

    def attach(self, listener: Callable[[dict[str, Any] | None], None]) -> Callable[[], None]:
        """``listener`` gets every event of the call's session from now on, and None once the call is over;
        the result detaches it."""
        ...

    def sideband(self, text: str) -> None:
        """A client event from an attached backend, as JSON text, taken in order with the caller's."""
        ...


class RealtimeSessions:
    """The app's count of open realtime sockets, against its limit, and its calls by id."""

    def __init__(self, per_client: int | None = None) -> None:
        self.open = 0
        self.calls: dict[str, Attachable] = {}
        self.shares = ClientShares(per_client, "realtime sessions")

    @classmethod
    def of(cls, app: FastAPI) -> RealtimeSessions:
        if (sessions := getattr(app.state, "realtime_sessions", None)) is None:
            state: ServerState = app.state.lyre
            sessions = app.state.realtime_sessions = cls(state.config.max_per_client)
        return sessions

    def refusal(self, limit: int, client: str | None) -> str | None:
        """Why one more session (from ``client``) may not open now: ``limit`` are open, or the client holds its
        share; None when it may."""
        if self.open >= limit:
            return f"too many realtime sessions and calls open (limit {limit}); try again later"
        return self.shares.refusal(client)

    @contextmanager
    def hold(self, client: str | None = None) -> Iterator[None]:
        self.open += 1
        try:
            with self.shares.hold(client):
                yield
        finally:
            self.open -= 1

    @contextmanager
    def call(self, call_id: str, call: Attachable) -> Iterator[None]:
        """A call that may be attached to, while it lasts."""
        self.calls[call_id] = call
        try:
            yield
        finally:
            self.calls.pop(call_id, None)


def agent_config(state: ServerState, model: str | None) -> AgentConfig:
    """The agent's settings on this server, as the WebSocket's."""
    return AgentConfig(realtime=RealtimeConfig(max_buffer_s=state.config.stt_max_buffer_s,
                                               pause_ms=AgentConfig().realtime.pause_ms),
                       model=model or AgentConfig().model)
