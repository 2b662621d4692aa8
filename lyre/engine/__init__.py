"""The generation engine: a compact Llama and its continuous-batching runtime.

It knows nothing of audio: prompt ids and sampling parameters in, an async
stream of token ids out.
"""

from lyre.engine.config import ATTENTION_BACKENDS, EngineConfig
from lyre.engine.constraint import Constraint, PeriodicConstraint, TokenSlice
from lyre.engine.engine import Engine, RequestStream
from lyre.engine.sampling import SamplingParams
from lyre.engine.scheduler import EngineFull, RequestTooLong
from lyre.engine.scheduling_policy import SCHEDULERS
from lyre.engine.sequence import FinishReason, Playback
from lyre.engine.stats import EngineStats

__all__ = [
    "ATTENTION_BACKENDS",
    "SCHEDULERS",
    "Constraint",
    "Engine",
    "EngineConfig",
    "EngineFull",
    "EngineStats",
    "FinishReason",
    "PeriodicConstraint",
    "Playback",
    "RequestStream",
    "RequestTooLong",
    "SamplingParams",
    "TokenSlice",
]
