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

__all__ = ["Constraint", "PeriodicConstraint", "SliceFamily", "TokenSlice"]


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


@dataclass(frozen=True)
class SliceFamily:
    """The shape every slice of one constraint shares, so a fixed-shape step can sample any of them.

    Each slice is ``width`` consecutive ids starting inside ``[lo, hi)``,
    plus some of ``extras``. A step projects onto all of ``[lo, hi)`` and
    ``extras`` once, then takes each row's own ``width`` columns and masks the
    extras it may not use.
    """

    lo: int
    hi: int
    width: int
    extras: tuple[int, ...] = ()

    def place(self, allowed: TokenSlice) -> tuple[int, tuple[bool, ...]]:
        """``allowed`` as (offset of its first id from ``lo``, which extras it allows)."""
        if allowed.size - len(allowed.extra) != self.width or not self.lo <= allowed.start <= self.hi - self.width:
            raise ValueError(f"slice {allowed} is not of this family ({self})")
        if not set(allowed.extra) <= set(self.extras):
            raise ValueError(f"slice {allowed} allows ids outside the family's extras {self.extras}")
        return allowed.start - self.lo, tuple(e in allowed.extra for e in self.extras)


class Constraint(Protocol):
    """Anything that names the allowed slice for the n-th generated token."""

    def allowed(self, n_generated: int) -> TokenSlice: ...

    @property
    def family(self) -> SliceFamily | None:
        """The shape all its slices share, or None when they differ in width (then steps sample eagerly)."""


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

    @property
    def family(self) -> SliceFamily | None:
        widths = {band.stop - band.start for band in self._plain}
        if len(widths) != 1:
            return None
        return SliceFamily(min(b.start for b in self._plain), max(b.stop for b in self._plain), widths.pop(),
                           self._boundary.extra)

    def allowed(self, n_generated: int) -> TokenSlice:
        k = n_generated % len(self._plain)
        if k == 0 and n_generated > 0:
            return self._boundary
        return self._plain[k]
