"""A conversation session's client events: each one read and checked, then handed to the session as one action.

    events = ClientEvents(session, max_message_bytes)   # session: what `Conversing` names (an AgentSession)
    await events.receive(text)                           # one client event, as JSON text

Whatever goes wrong with an event comes back as an ``error`` event naming it
(the client's ``event_id``) and, where it is the client's, the field; the
session and the socket go on. A failure that is lyre's own (any exception but
a `RealtimeError`) is logged with its traceback and told as a ``server_error``
(`lyre.stt.realtime_events.act_on`, as for a transcription session).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any, ClassVar, Protocol

from lyre.agent.conversation import LAST, Conversation
from lyre.agent.events import AgentSettings, input_update, new_id
from lyre.agent.session_update import SessionUpdate, read_agent_update
from lyre.agent.response_request import ResponseRequest, read_response
from lyre.stt import AudioError, RealtimeError, TranscriberBusy, TranscriberClosed, TranscriptionFailed
from lyre.stt.realtime_events import act_on, append_audio, expect_object

__all__ = ["ClientEvents", "Conversing"]

log = logging.getLogger("lyre.agent")

_MAX_ITEM_ID = 64  # characters of an item id a client chooses


class Conversing(Protocol):
    """What a client's events ask of a conversation session."""

    @property
    def settings(self) -> AgentSettings: ...

    @property
    def conversation(self) -> Conversation: ...

    @property
    def supports_tools(self) -> bool: ...  # the think step can call functions

    @property
    def max_speech_tokens(self) -> int: ...  # the most ``session.max_speech_tokens`` may be

    def listen(self, event: dict[str, Any]) -> Awaitable[None] | None:
        """An ``input_audio_buffer`` event, for the transcription session."""
        ...

    async def update(self, update: SessionUpdate, heard: dict[str, Any] | None,
                     client_event_id: str | None = None) -> None:
        """New settings (and the fields in error), and the transcription session's own update, if any."""
        ...

    def check_voice(self, voice: str | None, param: str) -> None:
        """RealtimeError naming ``param`` if this server cannot speak ``voice``."""
        ...

    async def transcribe(self, pcm: bytes) -> str:
        """pcm16 audio at the session's input rate, as text."""
        ...

    def add_item(self, entry: dict[str, Any], after: object = LAST) -> None:
        """A checked item (lyre.agent.conversation's shape) joins the conversation after the item ``after``
        names (None: first; LAST: last)."""
        ...

    def retrieve_item(self, item_id: object) -> None:
        """``conversation.item.retrieve``; RealtimeError if no item has that id."""
        ...

    def delete_item(self, item_id: object) -> None:
        """``conversation.item.delete``; RealtimeError if no item has that id."""
        ...

    def truncate(self, item_id: object, content_index: object, audio_end_ms: object) -> None:
        """``conversation.item.truncate``; RealtimeError naming a bad field."""
        ...

    def respond(self, request: ResponseRequest | None = None, items: list[dict[str, Any]] | None = None) -> None:
        """``response.create``; RealtimeError if a reply is already under way in the conversation."""
        ...

    def cancel_response(self, response_id: object = None) -> None:
        """``response.cancel``; RealtimeError if no reply (or none of that id) is under way."""
        ...

    def report(self, error: RealtimeError, client_event_id: str | None = None) -> None:
        """Send an ``error`` event."""
        ...


class ClientEvents:
    """Reads a session's client events; see the module docstring."""

    def __init__(self, session: Conversing, max_message_bytes: int) -> None:
        self._session = session
        self._max_bytes = max_message_bytes

    async def receive(self, text: str) -> None:
        """Act on one client event; a problem with it is sent back as an ``error`` event."""
        await act_on(text, self._max_bytes, self._handle, self._session.report)

    async def _handle(self, event: dict[str, Any]) -> None:
        kind = event["type"]
        if kind.startswith("input_audio_buffer."):
            work = self._session.listen(event)  # the transcription session's, errors and all
        elif (handler := self._handlers.get(kind)) is not None:
            work = handler(self, event)
        else:
            raise RealtimeError(f"unknown event type {kind!r}; a conversation session takes "
                                f"{', '.join(['input_audio_buffer.append', *self._handlers])}",
                                "invalid_event", "type")
        if work is not None:
            await work

    # -- one reader per event type --

    async def _update(self, event: dict[str, Any]) -> None:
        session = self._session
        update = read_agent_update(event, session.settings, session.supports_tools, session.max_speech_tokens)
        client_event_id = event.get("event_id") if isinstance(event.get("event_id"), str) else None
        await session.update(update, input_update(event), client_event_id)

    async def _create_item(self, event: dict[str, Any]) -> None:
        item = expect_object(event.get("item"), "item")
        entry = await self._entry(item, "item")
        if entry["type"] == "function_call_output" and not self._session.conversation.has_call(entry["call_id"]):
            raise RealtimeError(f"item.call_id {entry['call_id']!r} names no function call of this conversation",
                                param="item.call_id")
        after = event.get("previous_item_id")
        if after is not None and not isinstance(after, str):
            raise RealtimeError("previous_item_id must be an item id or 'root'", "invalid_type", "previous_item_id")
        self._session.add_item(entry, LAST if after is None else None if after == "root" else after)

    async def _entry(self, item: dict[str, Any], param: str) -> dict[str, Any]:
        """An item as the conversation keeps it, checked (``param``: where it sits in the event)."""
        kind = item.get("type", "message")
        entry: dict[str, Any] = {"id": self._item_id(item.get("id"), f"{param}.id"), "type": kind}
        if kind == "message":
            role = item.get("role")
            if role not in ("user", "assistant", "system"):
                raise RealtimeError(f"{param}.role must be user, assistant or system, got {role!r}",
                                    param=f"{param}.role")
            text, kinds = await self._item_text(item.get("content"), f"{param}.content")
            entry.update(role=role, text=text)
            if role == "assistant":
                entry["modality"] = "audio" if "output_audio" in kinds or "audio" in kinds else "text"
            elif "input_audio" in kinds:
                entry["audio"] = True
        elif kind == "function_call_output":
            if not isinstance(item.get("call_id"), str) or not isinstance(item.get("output"), str):
                raise RealtimeError("a function_call_output item needs call_id and output (strings)",
                                    "invalid_type", f"{param}.call_id")
            entry.update(call_id=item["call_id"], output=item["output"])
        elif kind == "function_call":
            if not all(isinstance(item.get(k), str) for k in ("call_id", "name", "arguments")):
                raise RealtimeError("a function_call item needs call_id, name and arguments (strings)",
                                    "invalid_type", f"{param}.call_id")
            entry.update(call_id=item["call_id"], name=item["name"], arguments=item["arguments"], status="completed")
        else:
            raise RealtimeError(f"{param}.type {kind!r} is not supported: use message, function_call or "
                                "function_call_output", param=f"{param}.type")
        return entry

    def _item_id(self, given: object, param: str) -> str:
        if given is None or given == "":
            return new_id("item")
        if not isinstance(given, str) or len(given) > _MAX_ITEM_ID:
            raise RealtimeError(f"{param} must be a string of at most {_MAX_ITEM_ID} characters", "invalid_type",
                                param)
        if self._session.conversation.find(given) is not None:
            raise RealtimeError(f"{param} {given!r} already names an item of this conversation", param=param)
        return given

    async def _item_text(self, content: object, param: str) -> tuple[str, set[str]]:
        """A message's words, and the types of its parts."""
        if not isinstance(content, list) or not content:
            raise RealtimeError(f"{param} must be a non-empty list of parts", "invalid_type", param)
        texts, kinds = [], set()
        for i, part in enumerate(content):
            part = expect_object(part, f"{param}[{i}]")
            kind = part.get("type")
            if kind in ("input_text", "text", "output_text") and isinstance(part.get("text"), str):
                texts.append(part["text"])
            elif kind in ("output_audio", "audio") and isinstance(part.get("transcript"), str):
                texts.append(part["transcript"])  # a spoken reply the client keeps: its words
            elif kind == "input_audio" and part.get("audio") is None and isinstance(part.get("transcript"), str):
                texts.append(part["transcript"])  # a turn the client has the words of
            elif kind == "input_audio":
                texts.append(await self._heard(part, f"{param}[{i}].audio"))
            else:
                raise RealtimeError(f"{param}[{i}]: a part of type {kind!r} with its text, transcript or audio is "
                                    "not supported: use input_text, input_audio, output_text or output_audio",
                                    param=f"{param}[{i}].type")
            kinds.add(str(kind))
        return " ".join(t.strip() for t in texts if t.strip()), kinds

    async def _heard(self, part: dict[str, Any], param: str) -> str:
        """The transcript of an audio part; a failure names the part."""
        try:
            pcm = append_audio(part)
        except RealtimeError as exc:
            raise RealtimeError(f"{param}: {exc}", exc.code, param) from None
        try:
            return await self._session.transcribe(pcm)
        except AudioError as exc:
            raise RealtimeError(f"{param}: {exc}", "invalid_audio", param) from None
        except (TranscriberBusy, TranscriberClosed, TranscriptionFailed) as exc:
            raise RealtimeError(f"{param} could not be transcribed: {exc}", "transcription_failed", param,
                                kind="server_error") from None

    def _truncate(self, event: dict[str, Any]) -> None:
        self._session.truncate(event.get("item_id"), event.get("content_index", 0), event.get("audio_end_ms"))

    def _retrieve_item(self, event: dict[str, Any]) -> None:
        self._session.retrieve_item(event.get("item_id"))

    def _delete_item(self, event: dict[str, Any]) -> None:
        self._session.delete_item(event.get("item_id"))

    async def _create_response(self, event: dict[str, Any]) -> None:
        session = self._session
        request, refused = read_response(event.get("response"), session.settings, session.supports_tools)
        if request.voice != session.settings.voice:
            session.check_voice(request.voice, "response.audio.output.voice")
        for refusal in refused:
            log.info("a response goes on without %s: %s", refusal.param, refusal)
        items = None
        if request.input is not None:
            items = [await self._input_item(item, f"response.input[{i}]") for i, item in enumerate(request.input)]
        session.respond(request, items)

    async def _input_item(self, item: object, param: str) -> dict[str, Any]:
        """One item of an out-of-band response's input: a reference to the conversation's, or an item."""
        item = expect_object(item, param)
        if item.get("type") == "item_reference":
            if (found := self._session.conversation.find(item.get("id"))) is None:
                raise RealtimeError(f"{param}.id {item.get('id')!r} names no item of this conversation",
                                    param=f"{param}.id")
            return found
        return await self._entry({**item, "id": None}, param)  # its own: never added, so its id is free

    def _cancel_response(self, event: dict[str, Any]) -> None:
        self._session.cancel_response(event.get("response_id"))

    _handlers: ClassVar[dict[str, Callable[[ClientEvents, dict[str, Any]], Awaitable[None] | None]]] = {
        "session.update": _update,
        "conversation.item.create": _create_item,
        "conversation.item.retrieve": _retrieve_item,
        "conversation.item.delete": _delete_item,
        "conversation.item.truncate": _truncate,
        "response.create": _create_response,
        "response.cancel": _cancel_response,
    }
