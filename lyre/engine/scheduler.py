"""Continuous batching on playback deadlines: who runs this step. Plain Python, no tensors.

A request that streams to a listener carries a ``pace`` (seconds of playback
each token buys) and, once its listener has started playing, a ``deadline``:
when the listener runs dry if no more tokens come. Its slack is the deadline
minus now. Each step the scheduler

1. admits waiting requests into free KV-cache slots (one batched prefill):
   those wait for their first audio, which matters most;
2. fills the compute batch (``compute_batch`` rows, which may be fewer than
   the resident requests) with running requests in this order: those still
   waiting for their first audio, then streams by least slack, then requests
   nobody is listening to in real time (no pace: a whole file);
3. parks a stream whose slack rises above ``park_above_s`` (its KV cache stays,
   it leaves the compute batch) until its slack falls below ``unpark_below_s``;
   both marks count only the slack beyond the request's ``lag_s``, the tokens
   its consumer holds in flight before they can play.

A stream is behind while its slack is negative; each time one falls behind
counts one deadline miss. ``fcfs`` advances every resident request each step,
in admission order (the behaviour to compare against).
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field

from lyre.engine.sequence import FinishReason, Request, RequestStatus

__all__ = ["SCHEDULERS", "EngineFull", "RequestTooLong", "ScheduledBatch", "Scheduler", "SchedulingPolicy"]

SCHEDULERS = ("deadline", "fcfs")


class RequestTooLong(ValueError):
    """The request can never fit in a KV-cache slot."""


class EngineFull(RuntimeError):
    """The waiting queue is at its limit; the caller should retry later."""


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


@dataclass
class ScheduledBatch:
    prefill: list[Request] = field(default_factory=list)  # admitted this step
    decode: list[Request] = field(default_factory=list)  # already running, advanced this step

    def __bool__(self) -> bool:
        return bool(self.prefill or self.decode)


class Scheduler:
    """Owns the waiting queue and the KV-cache slots, and picks each step's rows."""

    def __init__(self, max_batch: int, max_seq_len: int, max_waiting: int,
                 policy: SchedulingPolicy | None = None) -> None:
        self.max_seq_len = max_seq_len
        self.max_waiting = max_waiting
        self.policy = policy or SchedulingPolicy()
        self.compute_batch = self.policy.compute_batch or max_batch
        self.waiting: deque[Request] = deque()
        self.running: dict[str, Request] = {}
        self._free_slots = list(range(max_batch - 1, -1, -1))  # pop() hands out the lowest
        self.deadline_misses = 0  # times a stream fell behind its listener
        self.slacks: list[float] = []  # the streams' slack at the last step, seconds
        self.behind = 0  # streams behind their listener at the last step

    def add(self, req: Request) -> None:
        need = len(req.prompt_ids) + req.sampling.max_tokens
        if need > self.max_seq_len:
            raise RequestTooLong(
                f"request {req.request_id!r} needs {len(req.prompt_ids)} prompt + "
                f"{req.sampling.max_tokens} max_tokens = {need} positions, more than "
                f"max_seq_len {self.max_seq_len}; lower max_tokens or shorten the input"
            )
        if req.request_id in self.running or any(r.request_id == req.request_id for r in self.waiting):
            raise ValueError(f"request_id {req.request_id!r} is already in use")
        if len(self.waiting) >= self.max_waiting:
            raise EngineFull(f"engine queue is full ({self.max_waiting} waiting requests)")
        self.waiting.append(req)

    def schedule(self, now: float | None = None) -> ScheduledBatch:
        """Admit waiting requests into free slots, then choose the running requests this step advances."""
        now = time.monotonic() if now is None else now
        running = list(self.running.values())
        batch = ScheduledBatch(decode=self._pick(running, now))
        while self.waiting and self._free_slots:
            req = self.waiting.popleft()
            req.slot = self._free_slots.pop()
            req.status = RequestStatus.RUNNING
            req.admitted_at = now
            self.running[req.request_id] = req
            batch.prefill.append(req)
        return batch

    def _pick(self, running: list[Request], now: float) -> list[Request]:
        deadline = self.policy.kind == "deadline"
        first_audio, streams, background = [], [], []
        self.slacks, self.behind = [], 0
        for req in running:
            if req.pace is None:
                background.append(req)
            elif req.deadline is None:
                first_audio.append(req)
            else:
                slack = req.deadline - now
                self.slacks.append(slack)
                self._track(req, slack, park=deadline)
                if not req.parked:
                    streams.append((slack, req))
        if not deadline:  # every resident request, in admission order (the slack is still counted)
            return running[: self.compute_batch]
        streams.sort(key=lambda pair: pair[0])
        return (first_audio + [req for _, req in streams] + background)[: self.compute_batch]

    def _track(self, req: Request, slack: float, park: bool) -> None:
        """Hysteresis for parking (on the slack past what the consumer still holds in flight);
        counting a miss each time a stream falls behind."""
        usable = slack - req.lag_s
        if req.parked and usable < self.policy.unpark_below_s:
            req.parked = False
        elif park and not req.parked and usable > self.policy.park_above_s:
            req.parked = True
        if slack < 0:
            self.behind += 1
            if not req.behind:
                req.behind = True
                self.deadline_misses += 1
        else:
            req.behind = False

    def idle_for(self, now: float) -> float | None:
        """With every resident stream parked: seconds until the first one is due back (None: not idle).

        The engine sleeps that long instead of spinning on empty steps."""
        if self.waiting or not self.running or self.policy.kind != "deadline":
            return None
        if not all(req.parked for req in self.running.values()):
            return None
        back = min(req.deadline - req.lag_s - self.policy.unpark_below_s  # type: ignore[operator]
                   for req in self.running.values())
        return max(0.0, back - now)

    @property
    def parked(self) -> int:
        return sum(req.parked for req in self.running.values())

    def start_playback(self, req: Request, at: float, skipped_tokens: int = 0) -> None:
        """The request's listener started playing at ``at``: every token it has made, but
        ``skipped_tokens`` (trimmed away), plays from then on."""
        if req.pace is not None and not req.finished:
            req.deadline = at + max(0, len(req.output_ids) - skipped_tokens) * req.pace

    def append_token(self, req: Request, token: int) -> bool:
        """Record ``token`` for a running request; True when that finished it."""
        if token in req.sampling.stop_ids:
            self.finish(req, FinishReason.STOP)
            return True
        req.output_ids.append(token)
        if req.deadline is not None and req.pace is not None:
            req.deadline += req.pace  # one more token of audio before the listener runs dry
        if len(req.output_ids) >= req.sampling.max_tokens:
            self.finish(req, FinishReason.LENGTH)
            return True
        return False

    def finish(self, req: Request, reason: FinishReason) -> None:
        """End a request, whatever its state, and free its slot."""
        if req.finished:
            return
        if req.status is RequestStatus.RUNNING:
            del self.running[req.request_id]
            if req.behind:  # no longer behind anyone: an idle engine must not report it (and refuse work) forever
                self.behind = max(0, self.behind - 1)
            assert req.slot is not None
            self._free_slots.append(req.slot)
            self._free_slots.sort(reverse=True)
        else:
            self.waiting.remove(req)
        req.status = RequestStatus.FINISHED
        req.finish_reason = reason

    def find(self, request_id: str) -> Request | None:
        if request_id in self.running:
            return self.running[request_id]
        return next((r for r in self.waiting if r.request_id == request_id), None)

    @property
    def free_slots(self) -> int:
        return len(self._free_slots)
