"""One reply's Realtime events on their way out: held in order while it is speculative, its message item opened
and closed around its deltas.

    events = ResponseEvents(response_id, item_id, names, emit, held=True)
    events.open(response)                   # response.created, then the message item and its audio part added
    events.send(kind, **fields)             # a delta or any other event, in order
    events.release()                        # the held events go out, in order; the rest as they come
    events.close(completed, transcript, calls, unknown)   # the part and the item done, then the function calls

A held reply (started speculatively, before the turn is confirmed) emits
nothing: its events, audio deltas included, wait in order until `release`, so
a reply thrown away was never seen. The client's playback clock starts with
the first audio delta it is sent (``audio_out_at``).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from lyre.agent.events import EventNames, new_id
from lyre.stt import RealtimeError, error_event

__all__ = ["ResponseEvents"]


class ResponseEvents:
    """The events of response ``response_id``, whose message item is ``item_id``; see the module docstring."""

    def __init__(self, response_id: str, item_id: str, names: EventNames, emit: Callable[[dict[str, Any]], None],
                 held: bool) -> None:
        self.response_id = response_id
        self.names = names
        self.held = held
        self.opened = False  # response.created is out (or held)
        self.audio_out_at: float | None = None  # perf_counter() when the client got its first audio
        self.message: dict[str, Any] = {"id": item_id, "type": "message", "role": "assistant",
                                        "status": "in_progress", "content": []}
        self.where: dict[str, Any] = {"response_id": response_id, "item_id": item_id, "output_index": 0,
                                      "content_index": 0}  # the fields that place a delta in the message
        self._emit = emit
        self._pending: list[dict[str, Any]] = []

    def send(self, kind: str, **fields: Any) -> None:
        """A new event of type ``kind`` with ``fields``, put out in order."""
        self.put({"type": kind, "event_id": new_id("event"), **fields})

    def put(self, event: dict[str, Any]) -> None:
        """``event`` out now, or kept in order while the reply is held."""
        if self.held:
            self._pending.append(event)
        else:
            self._out(event)

    def release(self) -> None:
        """Let the held events out, in order, and send the rest as they come."""
        self.held = False
        pending, self._pending = self._pending, []
        for event in pending:
            self._out(event)

    def open(self, response: dict[str, Any]) -> None:
        """``response.created`` with the ``response`` object, then the message item and its audio part added."""
        names = self.names
        self.opened = True
        self.send("response.created", response=response)
        # Copies: the message changes as the reply ends, perhaps before these events are written out.
        self.send("response.output_item.added", response_id=self.response_id, output_index=0, item=dict(self.message))
        self.send(names.item_added, item=dict(self.message), previous_item_id=None)
        part = {"type": names.audio_part, "transcript": ""}
        self.send("response.content_part.added", **self.where, part=part)

    def close(self, completed: bool, transcript: str, calls: list[dict[str, Any]], unknown: list[str]) -> None:
        """The message done with its ``transcript`` (its audio part too if ``completed``), an error for each name
        of the ``unknown`` tools the model called, and the function ``calls`` as items; response.done is the
        caller's."""
        names, where, message = self.names, self.where, self.message
        content = {"type": names.audio_part, "transcript": transcript}
        if completed:
            self.send(names.audio_done, **where)
            self.send(names.transcript_done, **where, transcript=transcript)
            self.send("response.content_part.done", **where, part=content)
        message.update(status="completed" if completed else "incomplete", content=[content])
        self.send("response.output_item.done", response_id=self.response_id, output_index=0, item=message)
        self.send("conversation.item.done", item=message)
        for name in unknown:  # not the client's to run: told, never called
            self.put(error_event(RealtimeError(f"response {self.response_id}: the model called {name!r}, not one "
                                               "of the session's tools; the call was dropped", "unknown_tool",
                                               kind="server_error")))
        for index, call in enumerate(calls, start=1):
            self.send("response.output_item.added", response_id=self.response_id, output_index=index, item=call)
            self.send("response.function_call_arguments.done", response_id=self.response_id, item_id=call["id"],
                      output_index=index, call_id=call["call_id"], name=call["name"], arguments=call["arguments"])
            self.send("response.output_item.done", response_id=self.response_id, output_index=index, item=call)

    def _out(self, event: dict[str, Any]) -> None:
        if self.audio_out_at is None and event["type"] == self.names.audio_delta:
            self.audio_out_at = time.perf_counter()
        self._emit(event)
