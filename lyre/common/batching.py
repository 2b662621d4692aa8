"""Batch shapes shared by every worker that gathers requests into batches (the engine, the codec, speech to text)."""

from __future__ import annotations

import bisect
from dataclasses import dataclass

__all__ = ["BatchLimits", "bucket_for"]


def bucket_for(rows: int, buckets: tuple[int, ...]) -> int | None:
    """The smallest of the sorted ``buckets`` that holds ``rows``; None when none does (the caller
    runs that batch unpadded, or refuses it). ValueError for fewer than one row."""
    if rows < 1:
        raise ValueError(f"a batch holds at least 1 row, got {rows}")
    i = bisect.bisect_left(buckets, rows)
    return buckets[i] if i < len(buckets) else None


@dataclass(frozen=True)
class BatchLimits:
    """At most ``max_batch`` items in one batch, waiting at most ``max_wait_ms`` after the oldest arrived."""

    max_batch: int = 1
    max_wait_ms: float = 0.0

    def __post_init__(self) -> None:
        if self.max_batch < 1:
            raise ValueError(f"max_batch must be >= 1, got {self.max_batch}")
        if self.max_wait_ms < 0:
            raise ValueError(f"max_wait_ms must be >= 0, got {self.max_wait_ms}")
