"""Per-request sampling parameters, validated once at the door."""

from __future__ import annotations

import math
from dataclasses import dataclass

__all__ = ["SamplingParams"]


@dataclass(frozen=True)
class SamplingParams:
    """How one request picks its next token.

    ``temperature == 0`` is greedy. ``top_k == 0`` turns top-k off. The
    repetition penalty divides positive (multiplies negative) logits of every
    token already in the prompt or output, as transformers and vLLM do.
    ``seed`` fixes the request's random stream: the same seed gives the same
    tokens whatever else shares the batch.
    """

    temperature: float = 0.6
    top_p: float = 0.8
    top_k: int = 0
    repetition_penalty: float = 1.3
    max_tokens: int = 1200
    stop_ids: tuple[int, ...] = ()
    seed: int | None = None

    def __post_init__(self) -> None:
        _check_finite("temperature", self.temperature)
        if self.temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {self.temperature}")
        _check_finite("top_p", self.top_p)
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")
        _check_int("top_k", self.top_k)
        if self.top_k < 0:
            raise ValueError(f"top_k must be >= 0 (0 turns it off), got {self.top_k}")
        _check_finite("repetition_penalty", self.repetition_penalty)
        if self.repetition_penalty <= 0:
            raise ValueError(f"repetition_penalty must be > 0, got {self.repetition_penalty}")
        _check_int("max_tokens", self.max_tokens)
        if self.max_tokens < 1:
            raise ValueError(f"max_tokens must be >= 1, got {self.max_tokens}")
        if not isinstance(self.stop_ids, tuple) or not all(
            isinstance(t, int) and not isinstance(t, bool) and t >= 0 for t in self.stop_ids
        ):
            raise ValueError(f"stop_ids must be a tuple of non-negative token ids, got {self.stop_ids!r}")
        if self.seed is not None:
            _check_int("seed", self.seed)
            if not 0 <= self.seed < 2**63:
                raise ValueError(f"seed must be in [0, 2**63), got {self.seed}")


def _check_finite(name: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{name} must be a number, got {value!r}")
    if not math.isfinite(value):
        raise ValueError(f"{name} must be a finite number, got {value}")


def _check_int(name: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{name} must be an integer, got {value!r}")
