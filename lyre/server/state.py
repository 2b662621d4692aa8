"""What every route needs, held on ``app.state.lyre`` for the app's lifetime."""

from __future__ import annotations

from dataclasses import dataclass

from lyre.server.admission import Admission
from lyre.server.config import ServerConfig
from lyre.server.metrics import Metrics
from lyre.tts import TTS

__all__ = ["ServerState"]


@dataclass
class ServerState:
    config: ServerConfig
    tts: TTS
    admission: Admission
    metrics: Metrics
    ready: bool = False  # model loaded and warmed up
    draining: bool = False  # shutting down: admit nothing new
