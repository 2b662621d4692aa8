"""Logits constraints: which token ids a request may produce at each step.

The engine knows nothing of audio. A constraint only says, for the n-th
generated token, which contiguous slice of the vocabulary (plus a few extra
ids) is allowed. The runner then projects the hidden state onto that slice
alone and samples inside it, so a constrained request never pays for the full
vocabulary and can never produce a token outside it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

__all__ = ["Constraint", "PeriodicConstraint", "TokenSlice"]


@dataclass(frozen=True)
class TokenSlice:
    """Allowed ids: ``range(start, stop)`` plus ``extra``."""

    start: int
    stop: int
    extra: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        if not 0 <= self.start < self.stop:
            raise ValueError(f"TokenSlice needs 0 <= start < stop, got [{self.start}, {self.stop})")

    def __contains__(self, token: object) -> bool:
        return isinstance(token, int) and (self.start <= token < self.stop or token in self.extra)

    @property
    def size(self) -> int:
        return self.stop - self.start + len(self.extra)


class Constraint(Protocol):
    """Anything that names the allowed slice for the n-th generated token."""

    def allowed(self, n_generated: int) -> TokenSlice: ...


class PeriodicConstraint:
    """Token i may only come from ``bands[i % len(bands)]``.

    ``boundary_ids`` (for example a stop token) are allowed as well at the start
    of every period after the first, so a generation can only end on a whole
    period and never before it has made one.
    """

    def __init__(self, bands: tuple[tuple[int, int], ...], boundary_ids: tuple[int, ...] = ()) -> None:
        if not bands:
            raise ValueError("PeriodicConstraint needs at least one band")
        self._plain = tuple(TokenSlice(lo, hi) for lo, hi in bands)
        self._boundary = TokenSlice(bands[0][0], bands[0][1], tuple(boundary_ids))

    @property
    def period(self) -> int:
        return len(self._plain)

    def allowed(self, n_generated: int) -> TokenSlice:
        k = n_generated % len(self._plain)
        if k == 0 and n_generated > 0:
            return self._boundary
        return self._plain[k]
