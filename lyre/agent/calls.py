"""A reply's function calls, put together from the think step's pieces: bounded, and only of the session's tools.

    calls = ToolCalls(tools)                  # the session's declared function tools
    sent = calls.push(piece)                  # a ToolCallDelta; ThinkError past MAX_CALLS
    if sent: call, position, delta = sent     # new arguments of a declared call, to stream
    made, unknown = calls.finished()          # the calls to give the client, the names that were refused

The model's ``index`` comes from a remote endpoint, so it is checked before
anything is kept for it. A call is the client's only if its name is one the
session declared: arguments stream only once the name is known, and a call of
any other name never goes out (the reply reports it instead).
"""

from __future__ import annotations

from typing import Any

from lyre.agent.events import new_id
from lyre.agent.think import ThinkError, ToolCallDelta

__all__ = ["MAX_CALLS", "ToolCalls"]

MAX_CALLS = 32  # function calls in one reply: as many as a session may declare tools, each called once


class ToolCalls:
    """One reply's calls, by the model's index."""

    def __init__(self, tools: list[dict[str, Any]]) -> None:
        self._declared = {tool["name"] for tool in tools}
        self._calls: dict[int, dict[str, Any]] = {}
        self._sent: dict[int, int] = {}  # index -> characters of its arguments already streamed

    def push(self, piece: ToolCallDelta) -> tuple[dict[str, Any], int, str] | None:
        """Take one piece. Returns the call, its position among the declared calls, and the arguments not yet
        streamed, when there are some to stream."""
        if not 0 <= piece.index < MAX_CALLS:
            raise ThinkError(f"the model sent tool call index {piece.index}: a reply makes at most {MAX_CALLS} "
                             f"calls (indices 0 to {MAX_CALLS - 1})")
        call = self._calls.get(piece.index)
        if call is None:
            call = self._calls[piece.index] = {"type": "function_call", "id": new_id("item"), "call_id": "",
                                               "name": "", "arguments": "", "status": "in_progress"}
        call["call_id"] = piece.call_id or call["call_id"] or new_id("call")
        call["name"] = piece.name or call["name"]
        call["arguments"] += piece.arguments
        if call["name"] not in self._declared:
            return None  # not (or not yet) a call of this session's: nothing of it goes out
        sent = self._sent.get(piece.index, 0)
        if sent == len(call["arguments"]):
            return None
        self._sent[piece.index] = len(call["arguments"])
        return call, self._position(piece.index), call["arguments"][sent:]

    def by_id(self, item_id: str) -> dict[str, Any]:
        """The call whose item is ``item_id`` (KeyError if none)."""
        return next(call for call in self._calls.values() if call["id"] == item_id)

    def finished(self) -> tuple[list[dict[str, Any]], list[str]]:
        """The declared calls in index order, completed; and the names of the calls that were not declared."""
        made = [call for _, call in sorted(self._calls.items()) if call["name"] in self._declared]
        for call in made:
            call["status"] = "completed"
        unknown = [call["name"] for _, call in sorted(self._calls.items()) if call["name"] not in self._declared]
        return made, unknown

    def _position(self, index: int) -> int:
        # The models send calls in index order, so the declared calls before this one are all known by now.
        return sum(1 for i, call in self._calls.items() if i < index and call["name"] in self._declared)
