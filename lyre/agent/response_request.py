"""What one response is asked to be: the session's settings, with what a ``response.create`` sets for it alone.

    request = ResponseRequest.of(settings)                       # a reply to a detected turn
    request, refused = read_response(body, settings, supports_tools)   # a client's response.create

``response.create``'s ``response`` (GA and beta) may set, for this response
only: ``instructions``, ``tools`` and ``tool_choice``, ``max_output_tokens``
(beta: ``max_response_output_tokens``), ``output_modalities`` (beta:
``modalities``), the voice (``audio.output.voice``; beta: ``voice``),
``metadata`` (echoed on ``response.created`` and ``.done``: LiveKit waits for
its ``client_event_id`` there), and ``conversation: "none"``, an out-of-band
response: nothing of it joins the conversation, it runs beside a spoken reply,
and its ``input`` (items, or references to the conversation's by id) is all
it reads; without ``input`` it reads the conversation as it is. A field in
error is a RealtimeError naming it; tools where the chat model takes none are
left out of the response (``refused``), which still runs.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from lyre.agent.events import AgentSettings
from lyre.agent.session_update import (no_tools, read_max_output_tokens, read_modalities, read_tool_choice,
                                      read_tools)
from lyre.stt.realtime_events import RealtimeError, expect_object

__all__ = ["ResponseRequest", "read_response"]

_MAX_METADATA = 16  # pairs, as OpenAI's
_MAX_KEY, _MAX_VALUE = 64, 512
_MAX_INSTRUCTIONS = 16_000


@dataclass(frozen=True)
class ResponseRequest:
    instructions: str
    voice: str | None
    tools: tuple[dict[str, Any], ...]
    tool_choice: str | dict[str, Any]
    max_output_tokens: int | None  # None: the think step's own limit
    modality: str  # "audio" or "text"
    metadata: dict[str, str] | None = None
    in_conversation: bool = True
    input: list[Any] | None = None  # out of band: its items as given (the client's reader resolves them)

    @classmethod
    def of(cls, settings: AgentSettings) -> ResponseRequest:
        """A response as the session's settings make it."""
        return cls(settings.instructions, settings.voice, settings.tools, settings.tool_choice,
                   settings.max_output_tokens, settings.modalities[0])


def read_response(body: object, settings: AgentSettings, supports_tools: bool
                  ) -> tuple[ResponseRequest, list[RealtimeError]]:
    """The response a ``response.create`` asks for (its ``response``, or None), and what of it is refused."""
    request = ResponseRequest.of(settings)
    if body is None:
        return request, []
    body = expect_object(body, "response")
    changes: dict[str, Any] = {}
    refused: list[RealtimeError] = []
    if (text := body.get("instructions")) is not None:
        if not isinstance(text, str) or len(text) > _MAX_INSTRUCTIONS:
            raise RealtimeError(f"response.instructions must be a string of at most {_MAX_INSTRUCTIONS} "
                                "characters", "invalid_type", "response.instructions")
        changes["instructions"] = text
    if body.get("tools") is not None:
        changes["tools"] = read_tools(body["tools"], "response.tools")
        if changes["tools"] and not supports_tools:
            refused.append(no_tools("response.tools"))
    if body.get("tool_choice") is not None:
        changes["tool_choice"] = read_tool_choice(body["tool_choice"], "response.tool_choice")
    for key in ("max_output_tokens", "max_response_output_tokens"):
        if key in body:
            changes["max_output_tokens"] = read_max_output_tokens(body[key], f"response.{key}")
    for key in ("output_modalities", "modalities"):
        if body.get(key) is not None:
            changes["modality"] = read_modalities(body[key], f"response.{key}")[0]
    voice = body.get("voice")
    if isinstance(audio := body.get("audio"), dict) and isinstance(output := audio.get("output"), dict):
        voice = output.get("voice", voice)
    if voice is not None:
        voice = voice.get("id") if isinstance(voice, dict) else voice
        if not isinstance(voice, str) or not voice:
            raise RealtimeError("response.audio.output.voice must be a voice name", "invalid_type",
                                "response.audio.output.voice")
        changes["voice"] = voice
    if body.get("metadata") is not None:
        changes["metadata"] = _metadata(body["metadata"])
    conversation = body.get("conversation", "auto")
    if conversation not in ("auto", "none", None):
        raise RealtimeError(f"response.conversation must be 'auto' or 'none', got {conversation!r}",
                            param="response.conversation")
    changes["in_conversation"] = conversation != "none"
    if body.get("input") is not None:
        if conversation != "none":
            raise RealtimeError("response.input is for an out-of-band response: set response.conversation to "
                                "'none'", param="response.input")
        if not isinstance(body["input"], list):
            raise RealtimeError("response.input must be a list of items", "invalid_type", "response.input")
        changes["input"] = body["input"]
    return replace(request, **changes), refused


def _metadata(value: object) -> dict[str, str]:
    if not isinstance(value, dict) or len(value) > _MAX_METADATA or not all(
            isinstance(k, str) and isinstance(v, str) and len(k) <= _MAX_KEY and len(v) <= _MAX_VALUE
            for k, v in value.items()):
        raise RealtimeError(f"response.metadata must be an object of at most {_MAX_METADATA} string pairs (keys "
                            f"up to {_MAX_KEY} characters, values up to {_MAX_VALUE})", "invalid_type",
                            "response.metadata")
    return dict(value)
