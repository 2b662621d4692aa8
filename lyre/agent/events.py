"""The conversation protocol on the wire: settings read from ``session.update``, the session object, event names.

GA shape (the OpenAI SDK's realtime client)::

    {"type": "session.update", "session": {"type": "realtime", "instructions": "...",
        "audio": {"input": {"format": ..., "transcription": ..., "turn_detection": ...},
                  "output": {"format": {"type": "audio/pcm", "rate": 24000}, "voice": "tara"}},
        "tools": [{"type": "function", "name": ..., "parameters": ...}],
        "speculative": true, "first_sentences": 2, "smart_turn": true}}

Beta shape (older clients): ``instructions``, ``voice``, ``input_audio_format``,
``output_audio_format`` ("pcm16"), ``input_audio_transcription``,
``turn_detection`` and ``tools`` at the top of ``session``; a session updated
in the beta shape is answered with the beta event names (``response.audio.delta``
and so on). ``speculative``, ``first_sentences`` and ``smart_turn`` are lyre's
own. The input settings are read by the transcription session
(lyre.stt.realtime_events); this module reads the rest.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from lyre.stt.realtime_events import RealtimeError, expect_object, new_id

__all__ = ["BETA", "GA", "AgentSettings", "EventNames", "input_update", "new_id", "read_agent_update",
           "session_object"]

_MAX_INSTRUCTIONS = 16_000
_MAX_TOOLS = 32
_MAX_FIRST_SENTENCES = 8


@dataclass(frozen=True)
class EventNames:
    """Server event names that differ between the GA protocol and the beta one."""

    item_added: str
    audio_delta: str
    audio_done: str
    transcript_delta: str
    transcript_done: str
    audio_part: str  # the content part type of spoken output


GA = EventNames("conversation.item.added", "response.output_audio.delta", "response.output_audio.done",
                "response.output_audio_transcript.delta", "response.output_audio_transcript.done", "output_audio")
BETA = EventNames("conversation.item.created", "response.audio.delta", "response.audio.done",
                  "response.audio_transcript.delta", "response.audio_transcript.done", "audio")


@dataclass(frozen=True)
class AgentSettings:
    instructions: str = "You are a helpful voice assistant. Answer in one or two short spoken sentences."
    voice: str | None = "tara"
    tools: tuple[dict[str, Any], ...] = ()
    create_response: bool = True  # a detected end of turn starts a reply
    interrupt_response: bool = True  # speech while a reply plays cancels it (barge-in)
    speculative: bool = True  # start thinking at a possible end of turn
    first_sentences: int = 2  # a speculative reply goes to speech after this many sentences
    smart_turn: bool = True  # a semantic end-of-turn model may confirm the turn before the silence is out
    max_speech_tokens: int | None = None  # audio tokens per speech segment (about 82 a second); None: the default
    names: EventNames = GA


def read_agent_update(event: dict[str, Any], current: AgentSettings, supports_tools: bool) -> AgentSettings:
    """The settings after a ``session.update`` (either shape); RealtimeError naming a bad field."""
    session = expect_object(event.get("session"), "session")
    beta = "type" not in session and any(k in session for k in ("voice", "modalities", "input_audio_format",
                                                                  "output_audio_format", "input_audio_transcription"))
    changes: dict[str, Any] = {"names": BETA if beta else GA}
    kind = session.get("type", "realtime")
    if kind != "realtime":
        raise RealtimeError(f"session.type {kind!r} cannot change on a conversation session: it is 'realtime' "
                            "(connect with ?intent=transcription for a transcription session)", param="session.type")
    if "instructions" in session:
        text = session["instructions"]
        if not isinstance(text, str) or len(text) > _MAX_INSTRUCTIONS:
            raise RealtimeError(f"session.instructions must be a string of at most {_MAX_INSTRUCTIONS} characters",
                                "invalid_type", "session.instructions")
        changes["instructions"] = text
    output = expect_object(expect_object(session.get("audio") or {}, "session.audio").get("output") or {},
                           "session.audio.output")
    where = "session.voice" if beta else "session.audio.output.voice"
    if (voice := session.get("voice") if beta else output.get("voice")) is not None:
        if not isinstance(voice, str) or not voice:
            raise RealtimeError(f"{where} must be a voice name", "invalid_type", where)
        changes["voice"] = voice
    if beta and session.get("output_audio_format", "pcm16") != "pcm16":
        raise RealtimeError(f"session.output_audio_format {session['output_audio_format']!r} is not supported: "
                            "lyre speaks 'pcm16' (24 kHz)", param="session.output_audio_format")
    if not beta and (fmt := output.get("format")) is not None:
        fmt = expect_object(fmt, "session.audio.output.format")
        if fmt.get("type") != "audio/pcm" or fmt.get("rate", 24_000) != 24_000:
            raise RealtimeError(f"session.audio.output.format {fmt!r} is not supported: lyre speaks "
                                "{'type': 'audio/pcm', 'rate': 24000}", param="session.audio.output.format")
    if "tools" in session:
        changes["tools"] = _tools(session["tools"], supports_tools)
    detection_at = session if beta else expect_object(
        expect_object(session.get("audio") or {}, "session.audio").get("input") or {}, "session.audio.input")
    if isinstance(detection := detection_at.get("turn_detection"), dict):
        for name in ("create_response", "interrupt_response"):
            if name in detection:
                changes[name] = _flag(detection[name], f"turn_detection.{name}")
    for name in ("speculative", "smart_turn"):
        if name in session:
            changes[name] = _flag(session[name], f"session.{name}")
    if "max_speech_tokens" in session:
        n = session["max_speech_tokens"]
        if n is not None and (isinstance(n, bool) or not isinstance(n, int) or not 7 <= n <= 4096):
            raise RealtimeError(f"session.max_speech_tokens must be null or a whole number from 7 to 4096, got {n!r}",
                                param="session.max_speech_tokens")
        changes["max_speech_tokens"] = n
    if "first_sentences" in session:
        n = session["first_sentences"]
        if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= _MAX_FIRST_SENTENCES:
            raise RealtimeError(f"session.first_sentences must be a whole number from 1 to {_MAX_FIRST_SENTENCES}, "
                                f"got {n!r}", param="session.first_sentences")
        changes["first_sentences"] = n
    return replace(current, **changes)


def input_update(event: dict[str, Any]) -> dict[str, Any] | None:
    """The transcription session's update within a conversation ``session.update``, if it has input settings
    (with the client's ``event_id``, so an error about them names the client's event)."""
    session = event.get("session")
    if not isinstance(session, dict):
        return None
    named = {"event_id": event["event_id"]} if isinstance(event.get("event_id"), str) else {}
    if "type" not in session:  # beta: the input fields sit at the top
        keys = [k for k in ("input_audio_format", "input_audio_transcription", "turn_detection") if k in session]
        if not keys:
            return None
        return {"type": "transcription_session.update", **named, "session": {k: session[k] for k in keys}}
    audio = session.get("audio")
    if not isinstance(audio, dict) or "input" not in audio:
        return None
    return {"type": "session.update", **named,
            "session": {"type": "transcription", "audio": {"input": audio["input"]}}}


def session_object(settings: AgentSettings, heard: dict[str, Any], session_id: str, model: str) -> dict[str, Any]:
    """The session as ``session.created`` / ``session.updated`` carry it; ``heard``: the transcription
    session's own object in the same shape (its input settings)."""
    extras = {"speculative": settings.speculative, "first_sentences": settings.first_sentences,
              "smart_turn": settings.smart_turn, "max_speech_tokens": settings.max_speech_tokens}
    if settings.names is BETA:
        return {"id": session_id, "object": "realtime.session", "model": model, "modalities": ["audio", "text"],
                "instructions": settings.instructions, "voice": settings.voice, "output_audio_format": "pcm16",
                "input_audio_format": heard.get("input_audio_format"),
                "input_audio_transcription": heard.get("input_audio_transcription"),
                "turn_detection": heard.get("turn_detection"), "tools": list(settings.tools), "tool_choice": "auto",
                **extras}
    audio_in = dict(heard.get("audio", {}).get("input", {}))
    return {"id": session_id, "object": "realtime.session", "type": "realtime", "model": model,
            "output_modalities": ["audio"], "instructions": settings.instructions,
            "audio": {"input": audio_in, "output": {"format": {"type": "audio/pcm", "rate": 24_000},
                                                     "voice": settings.voice, "speed": 1.0}},
            "tools": list(settings.tools), "tool_choice": "auto", **extras}


def _flag(value: object, param: str) -> bool:
    if not isinstance(value, bool):
        raise RealtimeError(f"{param} must be true or false, got {value!r}", "invalid_type", param)
    return value


def _tools(value: object, supports_tools: bool) -> tuple[dict[str, Any], ...]:
    if not isinstance(value, list) or len(value) > _MAX_TOOLS:
        raise RealtimeError(f"session.tools must be a list of at most {_MAX_TOOLS} tools", "invalid_type",
                            "session.tools")
    tools = []
    for i, tool in enumerate(value):
        tool = expect_object(tool, f"session.tools[{i}]")
        if tool.get("type", "function") != "function" or not isinstance(tool.get("name"), str):
            raise RealtimeError(f"session.tools[{i}]: only function tools with a name are supported",
                                param=f"session.tools[{i}]")
        tools.append(tool)
    if tools and not supports_tools:
        raise RealtimeError("session.tools: this server's chat model takes no tools; serve with --llm-url pointing "
                            "at an endpoint that does", "tools_unsupported", "session.tools")
    return tuple(tools)
