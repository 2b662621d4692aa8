"""The conversation protocol's shapes on the wire: the session's settings, the session object, event names.

GA shape (the OpenAI SDK's realtime client, the Agents SDKs, LiveKit, Pipecat): ``session`` holds ``type``,
``instructions``, ``output_modalities``, ``max_output_tokens``, ``audio.input`` (``format``, ``transcription``,
``turn_detection``) and ``audio.output`` (``format``, ``voice``, ``speed``), ``tools``, ``tool_choice``, and
lyre's own settings under ``lyre``. Beta shape (older clients): ``instructions``, ``voice``,
``input_audio_format``, ``output_audio_format``, ``input_audio_transcription``, ``turn_detection`` and
``tools`` at the top of ``session``; a session updated in the beta shape is answered with the beta event names
(``response.audio.delta`` and so on); a GA session never sees one. How an update is read:
lyre.agent.session_update.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from lyre.stt.realtime_events import ENCODINGS, RealtimeError, format_object, new_id

__all__ = ["BETA", "GA", "AgentSettings", "EventNames", "input_update", "new_id", "session_object"]


@dataclass(frozen=True)
class EventNames:
    """Server event names and content types that differ between the GA protocol and the beta one."""

    item_added: str
    audio_delta: str
    audio_done: str
    transcript_delta: str
    transcript_done: str
    text_delta: str
    text_done: str
    audio_item_part: str  # spoken output's content type in an item
    text_item_part: str  # written output's content type in an item
    # response.content_part.* events type their part "audio" or "text" in both shapes


GA = EventNames("conversation.item.added", "response.output_audio.delta", "response.output_audio.done",
                "response.output_audio_transcript.delta", "response.output_audio_transcript.done",
                "response.output_text.delta", "response.output_text.done", "output_audio", "output_text")
BETA = EventNames("conversation.item.created", "response.audio.delta", "response.audio.done",
                  "response.audio_transcript.delta", "response.audio_transcript.done",
                  "response.text.delta", "response.text.done", "audio", "text")


@dataclass(frozen=True)
class AgentSettings:
    instructions: str = "You are a helpful voice assistant. Answer in one or two short spoken sentences."
    voice: str | None = "tara"
    tools: tuple[dict[str, Any], ...] = ()
    tool_choice: str | dict[str, Any] = "auto"  # "auto", "none", "required" or {"type": "function", "name"}
    max_output_tokens: int | None = None  # the think step's tokens per response; None: "inf" (its own limit)
    modalities: tuple[str, ...] = ("audio",)  # ("audio",): spoken (with its transcript); ("text",): written
    output_encoding: str = "pcm16"  # what audio deltas carry: pcm16 at 24 kHz, or G.711 (pcmu, pcma) at 8 kHz
    speed: float = 1.0  # how fast replies play, their pitch kept (OpenAI's realtime range: 0.25 to 1.5)
    create_response: bool = True  # a detected end of turn starts a reply
    interrupt_response: bool = True  # speech while a reply plays cancels it (barge-in)
    idle_timeout_ms: int | None = None  # server_vad's: silence this long after a reply has played prompts one
    speculative: bool = True  # start thinking at a possible end of turn
    first_sentences: int = 2  # a speculative reply goes to speech after this many sentences
    smart_turn: bool = True  # a semantic end-of-turn model may confirm the turn before the silence is out
    max_speech_tokens: int | None = None  # audio tokens per speech segment (about 82 a second); None: the default
    lyre_events: bool = False  # lyre's own events and fields go out too
    names: EventNames = GA


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
    if not isinstance(audio, dict) or not isinstance(audio.get("input"), dict):
        return None
    return {"type": "session.update", **named,
            "session": {"type": "transcription", "audio": {"input": audio["input"]}}}


def session_object(settings: AgentSettings, heard: dict[str, Any], session_id: str, model: str,
                   refused: list[RealtimeError] | None = None) -> dict[str, Any]:
    """The session as ``session.created`` / ``session.updated`` carry it; ``heard``: the transcription
    session's own object in the same shape (its input settings); ``refused``: what the update asked that the
    session goes on without (under ``lyre``, which is there only then or when the client turned lyre's own
    events on)."""
    own: dict[str, Any] = {}
    if settings.lyre_events or refused:
        own = {"lyre": {"events": settings.lyre_events, "speculative": settings.speculative,
                        "first_sentences": settings.first_sentences, "smart_turn": settings.smart_turn,
                        "max_speech_tokens": settings.max_speech_tokens,
                        "refused": [{"param": r.param, "message": str(r)} for r in refused or ()]}}
    max_tokens: int | str = "inf" if settings.max_output_tokens is None else settings.max_output_tokens
    if settings.names is BETA:
        return {"id": session_id, "object": "realtime.session", "model": model,
                "modalities": ["audio", "text"] if settings.modalities == ("audio",) else ["text"],
                "instructions": settings.instructions, "voice": settings.voice,
                "output_audio_format": ENCODINGS[settings.output_encoding][1],
                "input_audio_format": heard.get("input_audio_format"),
                "input_audio_transcription": heard.get("input_audio_transcription"),
                "turn_detection": _detection(heard.get("turn_detection"), settings), "tools": list(settings.tools),
                "tool_choice": settings.tool_choice, "max_response_output_tokens": max_tokens, **own}
    audio_in = dict(heard.get("audio", {}).get("input", {}))
    audio_in["turn_detection"] = _detection(audio_in.get("turn_detection"), settings)
    return {"id": session_id, "object": "realtime.session", "type": "realtime", "model": model,
            "output_modalities": list(settings.modalities), "instructions": settings.instructions,
            "audio": {"input": audio_in, "output": {"format": format_object(settings.output_encoding, 24_000),
                                                     "voice": settings.voice, "speed": settings.speed}},
            "tools": list(settings.tools), "tool_choice": settings.tool_choice, "max_output_tokens": max_tokens,
            **own}


def _detection(vad: dict[str, Any] | None, settings: AgentSettings) -> dict[str, Any] | None:
    """The transcription session's turn detection with the agent's part of it."""
    if vad is None:
        return None
    idle = {"idle_timeout_ms": settings.idle_timeout_ms} if vad["type"] == "server_vad" else {}
    return {**vad, "create_response": settings.create_response, "interrupt_response": settings.interrupt_response,
            **idle}
