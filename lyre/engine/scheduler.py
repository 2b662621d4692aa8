"""Continuous batching: who runs this step. Plain Python, no tensors."""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field

from lyre.engine.sequence import FinishReason, Request, RequestStatus

__all__ = ["EngineFull", "RequestTooLong", "ScheduledBatch", "Scheduler"]


class RequestTooLong(ValueError):
    """The request can never fit in a KV-cache slot."""


class EngineFull(RuntimeError):
    """The waiting queue is at its limit; the caller should retry later."""


@dataclass
class ScheduledBatch:
    prefill: list[Request] = field(default_factory=list)  # admitted this step
    decode: list[Request] = field(default_factory=list)  # already running

    def __bool__(self) -> bool:
        return bool(self.prefill or self.decode)


class Scheduler:
    """Owns the waiting queue and the KV-cache slots.

    Every step, running requests advance by one token and waiting requests
    take any free slots, so a request joins and leaves the batch without
    waiting for the others.
    """

    def __init__(self, max_batch: int, max_seq_len: int, max_waiting: int) -> None:
        self.max_seq_len = max_seq_len
        self.max_waiting = max_waiting
        self.waiting: deque[Request] = deque()
        self.running: dict[str, Request] = {}
        self._free_slots = list(range(max_batch - 1, -1, -1))  # pop() hands out the lowest

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

    def schedule(self) -> ScheduledBatch:
        """Admit waiting requests into free slots; everything running decodes."""
        batch = ScheduledBatch(decode=list(self.running.values()))
        now = time.monotonic()
        while self.waiting and self._free_slots:
            req = self.waiting.popleft()
            req.slot = self._free_slots.pop()
            req.status = RequestStatus.RUNNING
            req.admitted_at = now
            self.running[req.request_id] = req
            batch.prefill.append(req)
        return batch

    def append_token(self, req: Request, token: int) -> bool:
        """Record ``token`` for a running request; True when that finished it."""
        if req.first_token_at is None:
            req.first_token_at = time.monotonic()
        if token in req.sampling.stop_ids:
            self.finish(req, FinishReason.STOP)
            return True
        req.output_ids.append(token)
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
