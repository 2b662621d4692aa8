"""One reply's Realtime events on their way out: held in order while it is speculative, its message item opened
and closed around its deltas.

    events = ResponseEvents(response_id, item_id, names, emit, held=True, modality="audio", in_conversation=True)
    events.open(response)                   # response.created, then the message item and its content part added
    events.send(kind, **fields)             # a delta or any other event, in order
    events.release()                        # the held events go out, in order; the rest as they come
    events.call_added(call, index)          # a function call's item added, before its arguments stream
    events.close(completed, text, calls, unknown)   # the part and the item done, then the function calls

A held reply (started speculatively, before the turn is confirmed) emits
nothing: its events, audio deltas included, wait in order until `release`, so
a reply thrown away was never seen. The client's playback clock starts with
the first audio delta it is sent (``audio_out_at``). A reply in the
conversation announces its message and each function call with
``conversation.item.added`` and ``.done``; an out-of-band one
(``conversation: "none"``) only with its response's own events. A written
reply (``modality`` "text") sends ``response.output_text.*`` where a spoken
one sends its audio and transcript.
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
                 held: bool, modality: str = "audio", in_conversation: bool = True) -> None:
        self.response_id = response_id
        self.names = names
        self.held = held
        self.spoken = modality == "audio"
        self.in_conversation = in_conversation
        self.opened = False  # response.created is out (or held)
        self.audio_out_at: float | None = None  # perf_counter() when the client got its first audio
        self.message: dict[str, Any] = {"id": item_id, "object": "realtime.item", "type": "message",
                                        "role": "assistant", "status": "in_progress", "content": []}
        self.where: dict[str, Any] = {"response_id": response_id, "item_id": item_id, "output_index": 0,
                                      "content_index": 0}  # the fields that place a delta in the message
        self._emit = emit
        self._pending: list[dict[str, Any]] = []
        self._calls_added: set[str] = set()

    @property
    def text_delta(self) -> str:
        """The event that carries the reply's text as it is written (or spoken)."""
        return self.names.transcript_delta if self.spoken else self.names.text_delta

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
        """``response.created`` with the ``response`` object, then the message item and its content part added."""
        self.opened = True
        self.send("response.created", response=response)
        # Copies: the message changes as the reply ends, perhaps before these events are written out.
        self.send("response.output_item.added", response_id=self.response_id, output_index=0, item=dict(self.message))
        if self.in_conversation:  # its previous_item_id is set as it goes out (lyre.agent.session places it)
            self.send(self.names.item_added, item=dict(self.message), previous_item_id=None)
        part = {"type": "audio", "transcript": ""} if self.spoken else {"type": "text", "text": ""}
        self.send("response.content_part.added", **self.where, part=part)

    def close(self, completed: bool, text: str, calls: list[dict[str, Any]], unknown: list[str]) -> None:
        """The message done with its ``text`` (its content part too if ``completed``), an error for each name
        of the ``unknown`` tools the model called, and the function ``calls`` as items; response.done is the
        caller's."""
        names, where, message = self.names, self.where, self.message
        if self.spoken:
            part, content = {"type": "audio", "transcript": text}, {"type": names.audio_item_part, "transcript": text}
        else:
            part, content = {"type": "text", "text": text}, {"type": names.text_item_part, "text": text}
        if completed:
            if self.spoken:
                self.send(names.audio_done, **where)
                self.send(names.transcript_done, **where, transcript=text)
            else:
                self.send(names.text_done, **where, text=text)
            self.send("response.content_part.done", **where, part=part)
        message.update(status="completed" if completed else "incomplete", content=[content])
        self.send("response.output_item.done", response_id=self.response_id, output_index=0, item=message)
        if self.in_conversation:
            self.send("conversation.item.done", item=message)
        for name in unknown:  # not the client's to run: told, never called
            self.put(error_event(RealtimeError(f"response {self.response_id}: the model called {name!r}, not one "
                                               "of the session's tools; the call was dropped", "unknown_tool",
                                               kind="server_error")))
        for index, call in enumerate(calls, start=1):
            self.call_added(call, index)
            self.send("response.function_call_arguments.done", response_id=self.response_id, item_id=call["id"],
                      output_index=index, call_id=call["call_id"], name=call["name"], arguments=call["arguments"])
            self.send("response.output_item.done", response_id=self.response_id, output_index=index, item=call)
            if self.in_conversation:
                self.send("conversation.item.done", item=call)

    def call_added(self, call: dict[str, Any], index: int) -> None:
        """The function ``call`` is output ``index`` of the response: its item added (once), before any of its
        arguments stream."""
        if call["id"] in self._calls_added:
            return
        self._calls_added.add(call["id"])
        shown = dict(call)  # a copy: the call goes on changing
        self.send("response.output_item.added", response_id=self.response_id, output_index=index, item=shown)
        if self.in_conversation:
            self.send(self.names.item_added, item=shown, previous_item_id=None)

    def _out(self, event: dict[str, Any]) -> None:
        if self.audio_out_at is None and event["type"] == self.names.audio_delta:
            self.audio_out_at = time.perf_counter()
        self._emit(event)
