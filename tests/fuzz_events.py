"""Hypothesis strategies for the protocol fuzzers (tests/test_protocol_fuzz.py): sequences of client messages
for each socket, valid ones and ones gone wrong.

Each protocol has templates of its valid messages (the events a real client sends, small enough that the
demo model answers them in a moment). A sequence draws templates in any order and mutates some of them:

- ``drop``: a field left out, at any depth;
- ``retype``: a field given a value of another type (null, a number, a list, an object, a string);
- ``oversize``: a string field over the server's message limit;
- ``truncate``: the JSON text cut short at any point;
- ``binary``: the text sent as a binary frame;
- ``junk``: any JSON value at all, or text that is no JSON.

A message is a ``str`` (a text frame) or ``bytes`` (a binary frame).
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from typing import Any

from hypothesis import strategies as st

__all__ = ["AGENT", "TRANSCRIPTION", "TTS", "TWILIO", "messages"]

Template = Callable[[int], dict[str, Any]]  # a valid message, given a small number to vary it by

_SILENCE_24K = bytes(2 * 2400)  # 100 ms of pcm16 at 24 kHz
_NOISE = bytes((i * 37) % 256 for i in range(2 * 2400))  # 100 ms of something that is not silence
_OVERSIZE = 70 * 1024  # characters: over every socket's message limit (64 KiB)

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-2**53, 2**53) | st.floats(allow_nan=False) | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12)


def _pcm(n: int) -> str:
    return base64.b64encode((_NOISE if n % 2 else _SILENCE_24K) * (1 + n % 4)).decode()


def _item(n: int) -> dict[str, Any]:
    return {"type": "message", "role": "user", "content": [{"type": "input_text", "text": f"Say {n}."}]}


TRANSCRIPTION: list[Template] = [
    lambda n: {"type": "transcription_session.update", "session": {
        "input_audio_format": "pcm16", "input_audio_transcription": {"model": "whisper-1", "language": "en"},
        "turn_detection": {"type": "server_vad", "threshold": 0.5, "silence_duration_ms": 200 + n}}},
    lambda n: {"type": "session.update", "session": {"type": "transcription", "audio": {"input": {
        "format": {"type": "audio/pcm", "rate": 24000}, "turn_detection": None}}}},
    lambda n: {"type": "input_audio_buffer.append", "audio": _pcm(n), "event_id": f"e{n}"},
    lambda n: {"type": "input_audio_buffer.commit"},
    lambda n: {"type": "input_audio_buffer.clear"},
]

AGENT: list[Template] = [
    lambda n: {"type": "session.update", "session": {"type": "realtime", "instructions": "Be brief.",
                                                     "audio": {"output": {"voice": "tara"}},
                                                     "max_speech_tokens": 28 + 7 * (n % 3)}},
    lambda n: {"type": "conversation.item.create", "item": _item(n)},
    lambda n: {"type": "response.create", "response": {"instructions": "Answer."} if n % 2 else {}},
    lambda n: {"type": "response.cancel"},
    lambda n: {"type": "conversation.item.truncate", "item_id": f"item_{n}", "content_index": 0,
               "audio_end_ms": 10 * n},
    lambda n: {"type": "conversation.item.delete", "item_id": f"item_{n}"},
    lambda n: {"type": "conversation.item.retrieve", "item_id": f"item_{n}"},
    lambda n: {"type": "input_audio_buffer.append", "audio": _pcm(n)},
    lambda n: {"type": "input_audio_buffer.commit"},
    lambda n: {"type": "input_audio_buffer.clear"},
    lambda n: {"type": "output_audio_buffer.clear"},
]

TTS: list[Template] = [
    lambda n: {"context_id": f"c{n % 3}", "model_id": "orpheus", "voice": {"mode": "id", "id": "tara"},
               "output_format": {"container": "raw", "encoding": "pcm_s16le", "sample_rate": 24000},
               "transcript": "Hello there. ", "continue": bool(n % 2), "max_tokens": 28, "seed": n},
    lambda n: {"context_id": f"c{n % 3}", "transcript": f"More {n}.", "continue": bool(n % 3)},
    lambda n: {"context_id": f"c{n % 3}", "cancel": True},
    lambda n: {"context_id": f"c{n % 3}", "voice": {"mode": "id", "id": "tara"}, "transcript": "Hi.",
               "continue": False, "add_timestamps": True, "max_tokens": 28},
]


def _twilio_start(n: int) -> dict[str, Any]:
    return {"event": "start", "sequenceNumber": "1", "streamSid": f"MZ{n:032x}",
            "start": {"streamSid": f"MZ{n:032x}", "accountSid": "AC" + "0" * 32, "callSid": f"CA{n:032x}",
                      "tracks": ["inbound"], "customParameters": {"session": json.dumps({"max_speech_tokens": 28})},
                      "mediaFormat": {"encoding": "audio/x-mulaw", "sampleRate": 8000, "channels": 1}}}


TWILIO: list[Template] = [
    lambda n: {"event": "connected", "protocol": "Call", "version": "1.0.0"},
    _twilio_start,
    lambda n: {"event": "media", "sequenceNumber": str(n), "streamSid": f"MZ{n:032x}", "media": {
        "track": "inbound", "chunk": str(n), "timestamp": str(20 * n),
        "payload": base64.b64encode(bytes([0xFF - n % 8]) * 160).decode()}},
    lambda n: {"event": "mark", "streamSid": f"MZ{n:032x}", "mark": {"name": f"m{n}"}},
    lambda n: {"event": "dtmf", "streamSid": f"MZ{n:032x}", "dtmf": {"track": "inbound_track", "digit": "5"}},
    lambda n: {"event": "stop", "streamSid": f"MZ{n:032x}", "stop": {"callSid": f"CA{n:032x}"}},
]


def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every place in a JSON value a mutation can reach: object keys and list indexes, at any depth."""
    found: list[tuple[Any, ...]] = []
    children = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for key, child in children:
        found.append((*prefix, key))
        found += _paths(child, (*prefix, key))
    return found


def _set(value: Any, path: tuple[Any, ...], new: Any, drop: bool = False) -> None:
    for key in path[:-1]:
        value = value[key]
    if drop:
        del value[path[-1]]
    else:
        value[path[-1]] = new


@st.composite
def _message(draw: st.DrawFn, templates: list[Template]) -> str | bytes:
    event = draw(st.sampled_from(templates))(draw(st.integers(0, 20)))
    how = draw(st.sampled_from(["valid"] * 4 + ["drop", "retype", "oversize", "truncate", "binary", "junk"]))
    paths = _paths(event)
    if how == "drop" and paths:
        _set(event, draw(st.sampled_from(paths)), None, drop=True)
    elif how == "retype" and paths:
        _set(event, draw(st.sampled_from(paths)), draw(json_values))
    elif how == "oversize":
        strings = [p for p in paths if isinstance(_get(event, p), str)]
        if strings:
            _set(event, draw(st.sampled_from(strings)), "x" * _OVERSIZE)
    text = json.dumps(event)
    if how == "truncate":
        return text[: draw(st.integers(0, max(0, len(text) - 1)))]
    if how == "binary":
        return text.encode()
    if how == "junk":
        return draw(st.one_of(json_values.map(json.dumps), st.text(max_size=40)))
    return text


def _get(value: Any, path: tuple[Any, ...]) -> Any:
    for key in path:
        value = value[key]
    return value


def messages(templates: list[Template], max_size: int = 8) -> st.SearchStrategy[list[str | bytes]]:
    """A sequence of messages for one socket, in any order, some gone wrong."""
    return st.lists(_message(templates), min_size=1, max_size=max_size)
