"""The realtime sessions a server holds: sockets, WebRTC calls and phone streams counted together against
``--stt-max-sessions``, and the agent settings each conversation opens with, whatever its transport."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from fastapi import FastAPI

from lyre.agent import AgentConfig
from lyre.server.state import ServerState
from lyre.stt import RealtimeConfig

__all__ = ["RealtimeSessions", "agent_config"]


class RealtimeSessions:
    """The app's count of open realtime sockets, against its limit."""

    def __init__(self) -> None:
        self.open = 0

    @classmethod
    def of(cls, app: FastAPI) -> RealtimeSessions:
        if (sessions := getattr(app.state, "realtime_sessions", None)) is None:
            sessions = app.state.realtime_sessions = cls()
        return sessions

    @contextmanager
    def hold(self) -> Iterator[None]:
        self.open += 1
        try:
            yield
        finally:
            self.open -= 1


def agent_config(state: ServerState, model: str | None) -> AgentConfig:
    """The agent's settings on this server, as the WebSocket's."""
    return AgentConfig(realtime=RealtimeConfig(max_buffer_s=state.config.stt_max_buffer_s,
                                               pause_ms=AgentConfig().realtime.pause_ms),
                       model=model or AgentConfig().model)
