"""Orpheus requests on the engine: the audio constraint, sampling and voices."""

from __future__ import annotations

import json
import secrets
from dataclasses import replace
from pathlib import Path

from lyre import orpheus
from lyre.engine import PeriodicConstraint, SamplingParams

__all__ = ["AUDIO_CONSTRAINT", "MODEL_FILES", "VOICES_FILE", "check_voice", "load_voices", "request_sampling",
           "speech_sampling"]

# Frame position k may only produce its own 4096 audio ids; the stop token is
# allowed only between whole frames. Invalid tokens therefore cannot occur.
AUDIO_CONSTRAINT = PeriodicConstraint(
    tuple((r.start, r.stop) for r in map(orpheus.position_range, range(orpheus.FRAME_TOKENS))),
    boundary_ids=(orpheus.STOP_TOKEN,),
)

# A finetune with voices of its own lists them here, beside its weights.
VOICES_FILE = "voices.json"
# What an Orpheus folder must hold besides its weights.
MODEL_FILES = ("config.json", "tokenizer.json")


def speech_sampling(params: SamplingParams | None = None) -> SamplingParams:
    """Orpheus sampling: stop on end-of-speech; max_tokens rounded down to whole frames."""
    params = params or SamplingParams()
    frames = max(1, params.max_tokens // orpheus.FRAME_TOKENS)
    return replace(params, stop_ids=(orpheus.STOP_TOKEN,), max_tokens=frames * orpheus.FRAME_TOKENS)


def request_sampling(params: SamplingParams | None) -> SamplingParams:
    """A request's sampling: `speech_sampling`, with a random seed when none is given, so the
    request's codec noise (and, in lyre's engine, its tokens) is fixed from the start."""
    params = speech_sampling(params)
    return params if params.seed is not None else replace(params, seed=secrets.randbits(62))


def check_voice(voice: str | None, voices: tuple[str, ...]) -> None:
    """Raise ValueError naming the model's voices when ``voice`` is not one of them (None: the default)."""
    if voice is not None and voice not in voices:
        raise ValueError(f"unknown voice {voice!r}; this model has: {', '.join(voices)}")


def load_voices(folder: Path) -> tuple[str, ...]:
    """The model's voices: ``voices.json`` (a JSON list of names) beside the
    weights, else the English Orpheus finetune's built-in voices."""
    path = folder / VOICES_FILE
    if not path.exists():
        return orpheus.VOICES
    try:
        voices = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path}: not valid JSON ({exc})") from exc
    if not isinstance(voices, list) or not voices or not all(isinstance(v, str) and v.strip() for v in voices):
        raise ValueError(f"{path}: expected a non-empty JSON list of voice names")
    return tuple(voices)
