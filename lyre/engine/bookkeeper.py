"""The engine's books: a request's life between the scheduler, its stream and its adapter. Plain Python, no tensors.

A request opens with its adapter held (so the adapter is not evicted under
it) and its stream opened; each step's tokens are appended and queued for the
stream; it ends (a stop id, its length, an abort, a failure) with its row and
blocks back to the scheduler, its adapter released and its stream told. Every
method runs under the engine's lock; the engine's loop decides when.
"""

from __future__ import annotations

from collections.abc import Callable

from lyre.engine.adapter_registry import AdapterRegistry
from lyre.engine.handoff import Outbox
from lyre.engine.scheduler import Scheduler
from lyre.engine.sequence import FinishReason, Request
from lyre.engine.stream import RequestStream

__all__ = ["Bookkeeper"]


class Bookkeeper:
    """Opens, books and ends the requests of one engine (``adapters``: its registry, None when it serves none)."""

    def __init__(self, scheduler: Scheduler, outbox: Outbox, adapters: AdapterRegistry | None) -> None:
        self._scheduler, self._outbox, self._adapters = scheduler, outbox, adapters

    def open(self, req: Request, abort: Callable[[str], None]) -> RequestStream:
        """Queue ``req`` and open the stream its tokens go to (``abort`` ends it early). Raises ValueError for an
        adapter not loaded, and what `Scheduler.add` raises (length, queue room, id)."""
        entry = None
        if req.adapter is not None:
            assert self._adapters is not None
            entry = self._adapters.get(req.adapter)
            if not entry.resident:
                raise ValueError(f"adapter {req.adapter!r} is not loaded; lease it first (Engine.adapters.lease)")
        self._scheduler.add(req)
        if entry is not None:  # held while the request runs: not evicted under it
            self._adapters.hold(entry)  # type: ignore[union-attr]
            req.adapter_slot, req.salt = entry.slot, entry.salt
        return self._outbox.open(req, abort)

    def book(self, reqs: list[Request], tokens: list[int], step: int) -> None:
        """Each request's new token from ``step``: appended, sent to its stream, and the request finished if it
        is done."""
        for req, token in zip(reqs, tokens):
            if req.finished:  # aborted while the step ran
                continue
            if req.first_token_step is None:
                req.first_token_step = step
            done = self._scheduler.append_token(req, token)
            if done:
                req.finish_step = step
            self._send(req, [] if req.finish_reason is FinishReason.STOP else [token])

    def abort(self, request_id: str, step: int) -> None:
        """End the request, if it is still the scheduler's, as aborted at ``step``."""
        req = self._scheduler.find(request_id)
        if req is not None:
            self._scheduler.finish(req, FinishReason.ABORT)
            req.finish_step = step
            self._send(req, [])

    def end(self, req: Request, reason: FinishReason, error: BaseException | None = None) -> None:
        """End ``req`` for ``reason``; its stream raises ``error``, if one is given, once it has its tokens."""
        self._scheduler.finish(req, reason)
        self._send(req, [], error)

    def end_all(self, reason: FinishReason) -> None:
        """End every request, running or waiting, for ``reason``."""
        for req in list(self._scheduler.running.values()) + list(self._scheduler.waiting):
            self.end(req, reason)

    def fail(self, which: Callable[[Request], bool], message: str) -> None:
        """End every request ``which`` picks as aborted, its stream raising an error saying ``message``."""
        for req in [*self._scheduler.running.values(), *self._scheduler.waiting]:
            if which(req):
                self.end(req, FinishReason.ABORT, RuntimeError(message))

    def _send(self, req: Request, tokens: list[int], error: BaseException | None = None) -> None:
        """Queue a step's tokens for the request's stream, with its end once it has finished."""
        if req.finished and req.adapter is not None and self._adapters is not None:
            entry = self._adapters.entries.get(req.adapter)
            if entry is not None and req.adapter_slot is not None:
                self._adapters.release(entry)
                req.adapter_slot = None
        self._outbox.send(req, tokens, error)
