"""What the tests of the Realtime agent's clients (tests/agent/test_client_*.py) share: the agent they talk
to, and the JSON lines a client's driver prints.

    with scripted_agent() as server: ...        # lyre serve --stt, thinking at tests/scripted_thinker.py
    lines = DriverLines(parsed)                 # lines.of("server"): what the driver saw, by kind
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from scripted_thinker import thinking_at
from serving import Server, running_server

__all__ = ["DriverLines", "scripted_agent"]


@contextmanager
def scripted_agent() -> Iterator[Server]:
    """A real ``lyre serve`` agent that thinks at the scripted endpoint. The demo TTS speaks noise for as long as
    a segment's budget: a 384-position KV cache caps each segment at 128 tokens (1.5 s of audio), so the turns
    are short; a story's five sentences still play for seconds."""
    with thinking_at() as url, running_server("--stt", "--llm-url", url, "--llm-model", "scripted",
                                              "--max-streams", "4", "--max-seq-len", "384") as running:
        yield running


class DriverLines:
    """A driver's JSON lines, each ``{"kind": ..., ...}``."""

    def __init__(self, lines: list[dict[str, Any]]) -> None:
        self.lines = lines

    def of(self, kind: str) -> list[dict[str, Any]]:
        return [line for line in self.lines if line["kind"] == kind]
