"""Orpheus requests on the engine: the audio constraint and sampling."""

from __future__ import annotations

import secrets
from dataclasses import replace

from lyre import orpheus
from lyre.engine import PeriodicConstraint, SamplingParams

__all__ = ["AUDIO_CONSTRAINT", "MODEL_FILES", "request_sampling", "speech_sampling"]

# Frame position k may only produce its own 4096 audio ids; the stop token is
# allowed only between whole frames. Invalid tokens therefore cannot occur.
AUDIO_CONSTRAINT = PeriodicConstraint(
    tuple((r.start, r.stop) for r in map(orpheus.position_range, range(orpheus.FRAME_TOKENS))),
    boundary_ids=(orpheus.STOP_TOKEN,),
)

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
