"""A ``session.update`` read field by field into the session's settings (lyre.agent.events holds their shapes).

GA shape (the OpenAI SDK's realtime client, the Agents SDKs, LiveKit, Pipecat)::

    {"type": "session.update", "session": {"type": "realtime", "instructions": "...",
        "output_modalities": ["audio"], "max_output_tokens": "inf",
        "audio": {"input": {"format": ..., "transcription": ..., "turn_detection": ...},
                  "output": {"format": {"type": "audio/pcm", "rate": 24000}, "voice": "tara"}},
        "tools": [{"type": "function", "name": ..., "parameters": ...}], "tool_choice": "auto",
        "lyre": {"events": true, "speculative": true, "first_sentences": 2, "smart_turn": true,
                 "max_speech_tokens": null}}}

Beta shape (older clients): ``instructions``, ``voice``, ``input_audio_format``,
``output_audio_format`` ("pcm16"), ``input_audio_transcription``,
``turn_detection`` and ``tools`` at the top of ``session``; a session updated
in the beta shape is answered with the beta event names (``response.audio.delta``
and so on); a GA session never sees one.

An update applies field by field: a field that is wrong (a bad type, an
unknown voice) is named in an ``error`` event and the rest still applies. A
field lyre cannot honour but the session can live without (tools where the
chat model takes none, noise reduction, a hosted prompt) is
not an error: the session goes on without it, and ``session.updated`` says
so under ``lyre.refused``. ``lyre`` holds lyre's own settings (also taken at
the top of ``session``, as older lyre clients send them); with
``"events": true`` the session also gets lyre's own events (``lyre.*``) and
the ``lyre`` fields of responses, which a GA client otherwise never sees. The
input settings are read by the transcription session (lyre.stt.realtime_events);
this module reads the rest.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from lyre.agent.events import BETA, GA, AgentSettings
from lyre.stt.realtime_events import ENCODINGS, RealtimeError, expect_object
from lyre.tts.checkpoints import language_name, primary_language
from lyre.tts.voices import Voices

__all__ = ["SessionUpdate", "fit_voice", "no_tools", "read_agent_update", "read_max_output_tokens",
           "read_modalities", "read_tool_choice", "read_tools"]

_MAX_INSTRUCTIONS = 16_000
_MAX_TOOLS = 32
_MAX_FIRST_SENTENCES = 8
_MAX_OUTPUT_TOKENS = 4096  # the think step's tokens for one response
_MIN_SPEED, _MAX_SPEED = 0.25, 1.5  # audio.output.speed, as OpenAI's realtime sessions take it
_MIN_IDLE_MS, _MAX_IDLE_MS = 5_000, 30_000  # turn_detection.idle_timeout_ms, as OpenAI's
_LYRE_FIELDS = ("events", "speculative", "first_sentences", "smart_turn", "max_speech_tokens")


@dataclass
class SessionUpdate:
    """What a ``session.update`` did: the settings after it, the client's mistakes (``error`` events, one per
    field) and what lyre goes on without (``session.updated``'s ``lyre.refused``)."""

    settings: AgentSettings
    errors: list[RealtimeError] = field(default_factory=list)
    refused: list[RealtimeError] = field(default_factory=list)


def read_agent_update(event: dict[str, Any], current: AgentSettings, supports_tools: bool,
                      max_speech_tokens: int = 4096) -> SessionUpdate:
    """The settings after a ``session.update`` (either shape), field by field; RealtimeError only if the
    update as a whole cannot be read."""
    session = expect_object(event.get("session"), "session")
    beta = "type" not in session and any(k in session for k in ("voice", "modalities", "input_audio_format",
                                                                  "output_audio_format", "input_audio_transcription"))
    kind = session.get("type", "realtime")
    if kind != "realtime":
        raise RealtimeError(f"session.type {kind!r} cannot change on a conversation session: it is 'realtime' "
                            "(connect with ?intent=transcription for a transcription session)", param="session.type")
    update = SessionUpdate(replace(current, names=BETA if beta else GA))
    changes: dict[str, Any] = {}

    def read(step: Callable[[], None]) -> None:
        try:
            step()
        except RealtimeError as exc:
            update.errors.append(exc)

    audio = _object_at(session, "audio", "session") if not beta else {}
    output = _object_at(audio, "output", "session.audio") if audio else {}
    read(lambda: _read_instructions(session, changes))
    read(lambda: _read_voice(session.get("voice") if beta else output.get("voice"),
                             "session.voice" if beta else "session.audio.output.voice", changes))
    read(lambda: _read_output(session, output, beta, update, changes))
    read(lambda: _read_modalities(session, beta, changes))
    if "tools" in session:
        def tools() -> None:
            changes["tools"] = read_tools(session["tools"], "session.tools")
            if changes["tools"] and not supports_tools:
                update.refused.append(no_tools("session.tools"))
        read(tools)
    if "tool_choice" in session:
        read(lambda: changes.update(tool_choice=read_tool_choice(session["tool_choice"], "session.tool_choice")))
    key = "max_response_output_tokens" if beta else "max_output_tokens"
    if key in session:
        read(lambda: changes.update(max_output_tokens=read_max_output_tokens(session[key], f"session.{key}")))
    if not beta and session.get("prompt") is not None:
        update.refused.append(RealtimeError("session.prompt: prompt templates are kept by OpenAI's service; "
                                            "send the instructions themselves", param="session.prompt"))
    detection_at = session if beta else _object_at(audio, "input", "session.audio") if audio else {}
    if not beta and detection_at.get("noise_reduction") is not None:
        update.refused.append(RealtimeError("session.audio.input.noise_reduction: lyre hears the audio as sent",
                                            param="session.audio.input.noise_reduction"))
    if isinstance(detection := detection_at.get("turn_detection"), dict):
        for name in ("create_response", "interrupt_response"):
            if name in detection:
                read(lambda name=name: changes.update({name: _flag(detection[name], f"turn_detection.{name}")}))
        if "idle_timeout_ms" in detection:
            read(lambda: changes.update(idle_timeout_ms=_idle_timeout(detection)))
    read(lambda: _read_lyre(session, changes, max_speech_tokens))
    update.settings = replace(update.settings, **changes)
    return update


def read_tools(value: object, param: str) -> tuple[dict[str, Any], ...]:
    if not isinstance(value, list) or len(value) > _MAX_TOOLS:
        raise RealtimeError(f"{param} must be a list of at most {_MAX_TOOLS} tools", "invalid_type", param)
    tools = []
    for i, tool in enumerate(value):
        tool = expect_object(tool, f"{param}[{i}]")
        if tool.get("type", "function") != "function" or not isinstance(tool.get("name"), str):
            raise RealtimeError(f"{param}[{i}]: only function tools with a name are supported", param=f"{param}[{i}]")
        tools.append(tool)
    return tuple(tools)


def read_tool_choice(value: object, param: str) -> str | dict[str, Any]:
    if value in ("auto", "none", "required"):
        return value  # type: ignore[return-value]
    if isinstance(value, dict) and value.get("type") == "function" and isinstance(value.get("name"), str):
        return {"type": "function", "name": value["name"]}
    raise RealtimeError(f"{param} must be 'auto', 'none', 'required' or {{\"type\": \"function\", \"name\": ...}}, "
                        f"got {value!r}", param=param)


def read_max_output_tokens(value: object, param: str) -> int | None:
    if value == "inf" or value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= _MAX_OUTPUT_TOKENS:
        raise RealtimeError(f"{param} must be 'inf' or a whole number from 1 to {_MAX_OUTPUT_TOKENS}, got "
                            f"{value!r}", param=param)
    return value


def read_modalities(value: object, param: str) -> tuple[str, ...]:
    """``["audio"]`` or ``["text"]`` (beta's ``["audio", "text"]`` is spoken, as ``["audio"]``)."""
    if not isinstance(value, list) or not value or any(m not in ("audio", "text") for m in value):
        raise RealtimeError(f"{param} must be ['audio'] or ['text'], got {value!r}", param=param)
    return ("audio",) if "audio" in value else ("text",)


def _idle_timeout(detection: dict[str, Any]) -> int | None:
    """``turn_detection.idle_timeout_ms``: server_vad's, 5 to 30 s as OpenAI's, or null."""
    value = detection["idle_timeout_ms"]
    if value is None:
        return None
    if detection.get("type", "server_vad") != "server_vad":
        raise RealtimeError("turn_detection.idle_timeout_ms is server_vad's; semantic_vad has none",
                            param="turn_detection.idle_timeout_ms")
    if isinstance(value, bool) or not isinstance(value, int) or not _MIN_IDLE_MS <= value <= _MAX_IDLE_MS:
        raise RealtimeError(f"turn_detection.idle_timeout_ms must be null or a whole number of milliseconds from "
                            f"{_MIN_IDLE_MS} to {_MAX_IDLE_MS}, got {value!r}", param="turn_detection.idle_timeout_ms")
    return value


def _object_at(parent: dict[str, Any], key: str, where: str) -> dict[str, Any]:
    value = parent.get(key)
    return {} if value is None else expect_object(value, f"{where}.{key}")


def _read_instructions(session: dict[str, Any], changes: dict[str, Any]) -> None:
    if "instructions" in session:
        text = session["instructions"]
        if not isinstance(text, str) or len(text) > _MAX_INSTRUCTIONS:
            raise RealtimeError(f"session.instructions must be a string of at most {_MAX_INSTRUCTIONS} characters",
                                "invalid_type", "session.instructions")
        changes["instructions"] = text


def _read_voice(voice: object, where: str, changes: dict[str, Any]) -> None:
    if voice is None:
        return
    if isinstance(voice, dict):  # GA's custom voice object, {"id": ...}
        voice = voice.get("id")
    if not isinstance(voice, str) or not voice:
        raise RealtimeError(f"{where} must be a voice name", "invalid_type", where)
    changes["voice"] = voice


def _read_output(session: dict[str, Any], output: dict[str, Any], beta: bool, update: SessionUpdate,
                 changes: dict[str, Any]) -> None:
    if beta:
        if (fmt := session.get("output_audio_format")) is not None:
            encoding = next((e for e, names in ENCODINGS.items() if names[1] == fmt), None)
            if encoding is None:
                raise RealtimeError(f"session.output_audio_format {fmt!r} is not supported: lyre speaks 'pcm16' "
                                    "(24 kHz), 'g711_ulaw' or 'g711_alaw' (8 kHz)", param="session.output_audio_format")
            changes["output_encoding"] = encoding
        return
    if (fmt := output.get("format")) is not None:
        fmt = expect_object(fmt, "session.audio.output.format")
        encoding = next((e for e, names in ENCODINGS.items() if names[0] == fmt.get("type")), None)
        if encoding is None or (encoding == "pcm16" and fmt.get("rate", 24_000) != 24_000):
            raise RealtimeError(f"session.audio.output.format {fmt!r} is not supported: lyre speaks "
                                "{'type': 'audio/pcm', 'rate': 24000}, {'type': 'audio/pcmu'} or "
                                "{'type': 'audio/pcma'}", param="session.audio.output.format")
        changes["output_encoding"] = encoding
    if (speed := output.get("speed")) is not None:
        if isinstance(speed, bool) or not isinstance(speed, (int, float)) or not _MIN_SPEED <= speed <= _MAX_SPEED:
            raise RealtimeError(f"session.audio.output.speed must be a number from {_MIN_SPEED} to {_MAX_SPEED}, "
                                f"got {speed!r}", param="session.audio.output.speed")
        changes["speed"] = float(speed)


def _read_modalities(session: dict[str, Any], beta: bool, changes: dict[str, Any]) -> None:
    key = "modalities" if beta else "output_modalities"
    if session.get(key) is not None:
        changes["modalities"] = read_modalities(session[key], f"session.{key}")


def _read_lyre(session: dict[str, Any], changes: dict[str, Any], max_speech_tokens: int) -> None:
    """lyre's own settings, under ``session.lyre`` or (as older lyre clients send them) at the top."""
    own = {k: (session[k], f"session.{k}") for k in _LYRE_FIELDS[1:] if k in session}  # (value, where)
    if session.get("lyre") is not None:
        block = expect_object(session["lyre"], "session.lyre")
        unknown = sorted(set(block) - set(_LYRE_FIELDS))
        if unknown:
            raise RealtimeError(f"session.lyre.{unknown[0]} is not one of lyre's settings: "
                                f"{', '.join(_LYRE_FIELDS)}", param=f"session.lyre.{unknown[0]}")
        own.update({k: (v, f"session.lyre.{k}") for k, v in block.items()})
    for name in ("events", "speculative", "smart_turn"):
        if name in own:
            changes["lyre_events" if name == "events" else name] = _flag(*own[name])
    if "max_speech_tokens" in own:
        n, where = own["max_speech_tokens"]
        if n is not None and (isinstance(n, bool) or not isinstance(n, int) or not 7 <= n <= max_speech_tokens):
            raise RealtimeError(f"{where} must be null or a whole number from 7 to {max_speech_tokens} (this "
                                f"server's limit), got {n!r}", param=where)
        changes["max_speech_tokens"] = n
    if "first_sentences" in own:
        n, where = own["first_sentences"]
        if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= _MAX_FIRST_SENTENCES:
            raise RealtimeError(f"{where} must be a whole number from 1 to {_MAX_FIRST_SENTENCES}, got {n!r}",
                                param=where)
        changes["first_sentences"] = n


def fit_voice(settings: AgentSettings, voices: Voices | None, language: str | None,
              ) -> tuple[AgentSettings, RealtimeError | None]:
    """``settings`` with a voice that speaks ``language`` (the session's), and a note for
    ``session.updated``'s ``lyre.refused`` when the voice had to give way: a model voice of another language
    gives way to the model's first voice in this one; where the model has none in it, it goes on, and the
    note says so. A voice of unknown language (cloned, from a reference clip, or not given one) is left."""
    code = primary_language(language)
    spoken = voices.language_of(settings.voice) if voices is not None else None
    if voices is None or code is None or spoken is None or spoken == code:
        return settings, None
    param = "session.voice" if settings.names is BETA else "session.audio.output.voice"
    other = voices.voice_for(code)
    said = f"{param}: {settings.voice!r} speaks {language_name(spoken)}, not the session's {language_name(code)}"
    if other is None:
        return settings, RealtimeError(f"{said}; this model has no voice in {language_name(code)}, so "
                                       f"{settings.voice!r} goes on speaking", "language_mismatch", param)
    return replace(settings, voice=other), RealtimeError(f"{said}: {other!r} speaks instead", "language_mismatch",
                                                         param)


def no_tools(param: str) -> RealtimeError:
    """The refusal of tools the chat model cannot take (the session goes on without them)."""
    return RealtimeError(f"{param}: this server's chat model takes no tools, so they are not offered to it; "
                         "serve with --llm-url pointing at an endpoint that does", "tools_unsupported", param)


def _flag(value: object, param: str) -> bool:
    if not isinstance(value, bool):
        raise RealtimeError(f"{param} must be true or false, got {value!r}", "invalid_type", param)
    return value
