"""The scheduling policy: its kind and parking marks, when a stream parks and comes back, and which resident
request can best give its blocks back. Plain Python, no tensors.

A stream's slack is its listener's deadline minus now (`lyre.engine.scheduler`
counts it each step); the marks count only the slack beyond the request's
``lag_s``, the tokens its consumer holds in flight before they can play.
"""

from __future__ import annotations

from dataclasses import dataclass

from lyre.engine.sequence import Request

__all__ = ["SCHEDULERS", "SchedulingPolicy", "expendability"]

SCHEDULERS = ("deadline", "fcfs")


@dataclass(frozen=True)
class SchedulingPolicy:
    """How the compute batch is chosen among resident requests."""

    kind: str = "deadline"  # one of SCHEDULERS
    compute_batch: int | None = None  # rows advanced per step; None: every resident request
    park_above_s: float = 2.0  # slack above which a stream leaves the compute batch
    unpark_below_s: float = 1.0  # slack below which a parked stream comes back

    def __post_init__(self) -> None:
        if self.kind not in SCHEDULERS:
            raise ValueError(f"scheduler must be one of {', '.join(SCHEDULERS)}, got {self.kind!r}")
        if self.compute_batch is not None and self.compute_batch < 1:
            raise ValueError(f"compute_batch must be >= 1, got {self.compute_batch}")
        if not 0 <= self.unpark_below_s < self.park_above_s:
            raise ValueError(f"need 0 <= unpark_below_s < park_above_s, got {self.unpark_below_s}, "
                             f"{self.park_above_s}")

    def parked(self, req: Request, slack: float) -> bool:
        """Whether the stream ``req`` is parked at ``slack``: hysteresis between the two marks, so a stream
        near one does not flap in and out of the batch. Only the deadline policy parks; any policy unparks."""
        usable = slack - req.lag_s
        if req.parked and usable < self.unpark_below_s:
            return False
        if self.kind == "deadline" and not req.parked and usable > self.park_above_s:
            return True
        return req.parked

    def due_back(self, req: Request) -> float:
        """When the parked stream ``req`` comes back (monotonic): its usable slack is down to the lower mark."""
        return req.deadline - req.lag_s - self.unpark_below_s  # type: ignore[operator]


def expendability(req: Request, now: float) -> tuple[int, float, float]:
    """Higher: better to preempt. A whole file (nobody listening live), then the stream with the most
    slack, then one waiting for its first audio; the latest admitted first among equals."""
    if req.pace is None:
        tier, slack = 2, 0.0
    elif req.deadline is None:
        tier, slack = 0, 0.0
    else:
        tier, slack = 1, req.deadline - now
    return tier, slack, req.admitted_at or 0.0
