"""One step's work as the scheduler hands it to the runner: prompt chunks and decode rows. Plain Python, no tensors."""

from __future__ import annotations

from dataclasses import dataclass, field

from lyre.engine.sequence import Request

__all__ = ["PrefillChunk", "ScheduledBatch"]


@dataclass(frozen=True)
class PrefillChunk:
    """Positions [start, end) of a request's tokens, run this step; the last chunk samples its next token."""

    req: Request
    start: int
    end: int

    @property
    def final(self) -> bool:
        return self.end == self.req.num_tokens

    @property
    def first(self) -> bool:
        """The first chunk since admission (what the cached prefix did not cover)."""
        assert self.req.kv is not None
        return self.start == self.req.kv.reused


@dataclass
class ScheduledBatch:
    prefill: list[PrefillChunk] = field(default_factory=list)  # prompt chunks run this step
    decode: list[Request] = field(default_factory=list)  # prefilled, advanced one token this step

    def __bool__(self) -> bool:
        return bool(self.prefill or self.decode)

    @property
    def sampled(self) -> list[Request]:
        """The requests that get a token this step, in the runner's order: final chunks, then decode rows."""
        return [c.req for c in self.prefill if c.final] + self.decode
