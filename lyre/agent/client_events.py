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

from collections.abc import Awaitable, Callable
from typing import Any, ClassVar, Protocol

from lyre.agent.conversation import Conversation
from lyre.agent.events import AgentSettings, input_update, new_id, read_agent_update
from lyre.stt import AudioError, RealtimeError, TranscriberBusy, TranscriberClosed, TranscriptionFailed
from lyre.stt.realtime_events import act_on, append_audio, expect_object

__all__ = ["ClientEvents", "Conversing"]

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

    async def update(self, settings: AgentSettings, heard: dict[str, Any] | None) -> None:
        """New settings, and the transcription session's own update, if any."""
        ...

    async def transcribe(self, pcm: bytes) -> str:
        """pcm16 audio at the session's input rate, as text."""
        ...

    def add_item(self, entry: dict[str, Any]) -> None:
        """A checked item (lyre.agent.conversation's shape) joins the conversation."""
        ...

    def truncate(self, item_id: object, content_index: object, audio_end_ms: object) -> None:
        """``conversation.item.truncate``; RealtimeError naming a bad field."""
        ...

    def respond(self) -> None:
        """``response.create``; RealtimeError if a reply is already under way."""
        ...

    def cancel_response(self) -> None:
        """``response.cancel``; RealtimeError if no reply is under way."""
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
        settings = read_agent_update(event, session.settings, session.supports_tools)
        if settings.max_speech_tokens is not None and settings.max_speech_tokens > session.max_speech_tokens:
            raise RealtimeError(f"session.max_speech_tokens {settings.max_speech_tokens} is over this server's "
                                f"limit of {session.max_speech_tokens}", param="session.max_speech_tokens")
        await session.update(settings, input_update(event))

    async def _create_item(self, event: dict[str, Any]) -> None:
        item = expect_object(event.get("item"), "item")
        kind = item.get("type", "message")
        entry: dict[str, Any] = {"id": self._item_id(item.get("id")), "type": kind}
        if kind == "message":
            role = item.get("role")
            if role not in ("user", "assistant", "system"):
                raise RealtimeError(f"item.role must be user, assistant or system, got {role!r}", param="item.role")
            entry.update(role=role, text=await self._item_text(item.get("content")))
        elif kind == "function_call_output":
            if not isinstance(item.get("call_id"), str) or not isinstance(item.get("output"), str):
                raise RealtimeError("a function_call_output item needs call_id and output (strings)",
                                    "invalid_type", "item.call_id")
            if not self._session.conversation.has_call(item["call_id"]):
                raise RealtimeError(f"item.call_id {item['call_id']!r} names no function call of this conversation",
                                    param="item.call_id")
            entry.update(call_id=item["call_id"], output=item["output"])
        else:
            raise RealtimeError(f"item.type {kind!r} is not supported: use message or function_call_output",
                                param="item.type")
        self._session.add_item(entry)

    def _item_id(self, given: object) -> str:
        if given is None or given == "":
            return new_id("item")
        if not isinstance(given, str) or len(given) > _MAX_ITEM_ID:
            raise RealtimeError(f"item.id must be a string of at most {_MAX_ITEM_ID} characters", "invalid_type",
                                "item.id")
        if self._session.conversation.find(given) is not None:
            raise RealtimeError(f"item.id {given!r} already names an item of this conversation", param="item.id")
        return given

    async def _item_text(self, content: object) -> str:
        if not isinstance(content, list) or not content:
            raise RealtimeError("item.content must be a non-empty list of parts", "invalid_type", "item.content")
        texts = []
        for i, part in enumerate(content):
            part = expect_object(part, f"item.content[{i}]")
            kind = part.get("type")
            if kind in ("input_text", "text", "output_text") and isinstance(part.get("text"), str):
                texts.append(part["text"])
            elif kind == "input_audio":
                texts.append(await self._heard(part, f"item.content[{i}].audio"))
            else:
                raise RealtimeError(f"item.content[{i}]: a part of type {kind!r} with its text or audio is not "
                                    "supported: use input_text or input_audio", param=f"item.content[{i}].type")
        return " ".join(t.strip() for t in texts if t.strip())

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

    def _create_response(self, event: dict[str, Any]) -> None:
        self._session.respond()

    def _cancel_response(self, event: dict[str, Any]) -> None:
        self._session.cancel_response()

    _handlers: ClassVar[dict[str, Callable[[ClientEvents, dict[str, Any]], Awaitable[None] | None]]] = {
        "session.update": _update,
        "conversation.item.create": _create_item,
        "conversation.item.truncate": _truncate,
        "response.create": _create_response,
        "response.cancel": _cancel_response,
    }
