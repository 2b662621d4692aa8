"""Continuous batching on playback deadlines: who runs this step. Plain Python, no tensors.

A request that streams to a listener carries a ``pace`` (seconds of playback
each token buys) and, once its listener has started playing, a ``deadline``:
when the listener runs dry if no more tokens come. Its slack is the deadline
minus now. Each step the scheduler

1. fills the compute batch (``compute_batch`` rows, which may be fewer than
   the resident requests) with running requests in this order: those still
   waiting for their first audio, then streams by least slack, then requests
   nobody is listening to in real time (no pace: a whole file);
2. parks a stream whose slack rises above ``park_above_s`` (its KV cache stays,
   it leaves the compute batch) until its slack falls below ``unpark_below_s``;
   both marks count only the slack beyond the request's ``lag_s``, the tokens
   its consumer holds in flight before they can play;
3. makes room in the KV cache for each chosen row's next token, a block at
   a time; when the pool runs dry it preempts the resident request that can
   best wait (a whole-file request, then the stream with the most slack, the
   latest admitted first): its blocks go back to the pool, and it waits at
   the head of the queue to run its tokens again (recompute, as vLLM does:
   reserving every request's longest length would hold the blocks it is
   meant to share);
4. spends what is left of the step's token budget (``step_tokens``) on
   prompts: the next chunk of those already admitted, then new admissions
   (a free row and blocks for the whole prompt, its cached prefix reused).
   A stream about to run dry thus always outranks a prompt's next chunk, and
   no step runs more than the budget, however long a prompt.

A stream is behind while its slack is negative; each time one falls behind
counts one deadline miss. ``fcfs`` advances every resident request each step,
in admission order (the behaviour to compare against). The marks and the
order of preemption are the policy's (`lyre.engine.scheduling_policy`); the
step's work goes out as a `ScheduledBatch` (`lyre.engine.batch`).
"""

from __future__ import annotations

import time
from collections import deque

from lyre.engine.batch import PrefillChunk, ScheduledBatch
from lyre.engine.block_manager import BlockManager
from lyre.engine.scheduling_policy import SchedulingPolicy, expendability
from lyre.engine.sequence import FinishReason, Request, RequestStatus

__all__ = ["EngineFull", "RequestTooLong", "Scheduler"]


class RequestTooLong(ValueError):
    """The request can never fit in the KV cache."""


class EngineFull(RuntimeError):
    """The waiting queue is at its limit; the caller should retry later."""


class Scheduler:
    """Owns the waiting queue, the rows of resident requests and their KV-cache blocks; picks each step's work."""

    def __init__(self, max_batch: int, max_seq_len: int, max_waiting: int,
                 policy: SchedulingPolicy | None = None, blocks: BlockManager | None = None,
                 step_tokens: int | None = None) -> None:
        """``blocks``: the KV cache's pool (default: room for ``max_batch`` requests of ``max_seq_len``, in
        blocks of 16). ``step_tokens``: the tokens one step may run, decode rows and prompt chunks together
        (None: no limit)."""
        self.max_seq_len = max_seq_len
        self.max_waiting = max_waiting
        self.policy = policy or SchedulingPolicy()
        self.compute_batch = self.policy.compute_batch or max_batch
        self.blocks = blocks or BlockManager(max_batch * -(-max_seq_len // 16), 16)
        if self.blocks.blocks_for(max_seq_len) > self.blocks.num_blocks:
            raise ValueError(f"a KV cache of {self.blocks.num_blocks} blocks of {self.blocks.block_size} cannot hold "
                             f"one request of max_seq_len {max_seq_len}")
        if step_tokens is not None and step_tokens <= self.compute_batch:
            raise ValueError(f"step_tokens ({step_tokens}) must exceed the compute batch ({self.compute_batch}), "
                             "or decode rows would leave no room for prompts")
        self.step_tokens = step_tokens
        # Blocks kept free at admission, so running requests can grow a while before anyone is preempted.
        self.watermark = max(1, self.blocks.num_blocks // 100)
        self.waiting: deque[Request] = deque()
        self.running: dict[str, Request] = {}
        self._free_slots = list(range(max_batch - 1, -1, -1))  # pop() hands out the lowest
        self.deadline_misses = 0  # times a stream fell behind its listener
        self.preemptions = 0  # times a request's blocks were taken back
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
        """Choose this step's decode rows and make room for them, then fill the rest of the token budget
        with prompt chunks: those already admitted first, then new admissions."""
        now = time.monotonic() if now is None else now
        decode = self._make_room(self._pick([r for r in self.running.values() if not r.prefilling], now), now)
        budget = (self.step_tokens - len(decode)) if self.step_tokens is not None else None
        batch = ScheduledBatch(decode=decode)
        for req in [r for r in self.running.values() if r.prefilling]:
            if budget is not None and budget <= 0:
                return batch
            budget = self._chunk(batch, req, budget)
        while self.waiting and self._free_slots and (budget is None or budget > 0):
            req = self.waiting[0]
            table = self.blocks.admit(req.tokens, req.salt, spare=self.watermark if self.running else 0,
                                      expect=req.num_tokens + req.sampling.max_tokens - len(req.output_ids))
            if table is None:  # the queue's head waits for blocks; nothing jumps it
                break
            self.waiting.popleft()
            req.kv, req.prefilling, req.slot = table, True, self._free_slots.pop()
            req.status = RequestStatus.RUNNING
            if req.admitted_at is None:
                req.admitted_at = now
            self.running[req.request_id] = req
            budget = self._chunk(batch, req, budget)
        return batch

    def _chunk(self, batch: ScheduledBatch, req: Request, budget: int | None) -> int | None:
        assert req.kv is not None
        start = req.kv.computed
        end = req.num_tokens if budget is None else min(req.num_tokens, start + budget)
        batch.prefill.append(PrefillChunk(req, start, end))
        return None if budget is None else budget - (end - start)

    def ran(self, batch: ScheduledBatch) -> None:
        """Book what a step computed: each row's keys are in the cache up to its step's end; whole blocks
        are sealed for later prefixes. Call before the sampled tokens are appended."""
        for chunk in batch.prefill:
            if chunk.req.kv is not None and not chunk.req.finished:
                chunk.req.kv.computed = chunk.end
                chunk.req.prefilling = not chunk.final
                self.blocks.seal(chunk.req.kv, chunk.req.cacheable, chunk.req.salt)
        for req in batch.decode:
            if req.kv is not None and not req.finished:
                req.kv.computed = req.num_tokens
                if req.kv.computed % self.blocks.block_size == 0 and req.cache_output:
                    self.blocks.seal(req.kv, req.tokens, req.salt)

    def _make_room(self, decode: list[Request], now: float) -> list[Request]:
        """Blocks for each row's next key, in priority order; when the pool is dry, the resident request that
        can best wait gives its blocks back (perhaps the row itself, which then sits this step out)."""
        kept: list[Request] = []
        for req in decode:
            if req.status is not RequestStatus.RUNNING:  # preempted for an earlier row
                continue
            assert req.kv is not None
            while not self.blocks.grow(req.kv, req.num_tokens):
                victim = max((r for r in self.running.values() if r not in kept),
                             key=lambda r: expendability(r, now))
                self._preempt(victim)
                if victim is req:
                    break
            else:
                kept.append(req)
        return kept

    def _preempt(self, req: Request) -> None:
        self._leave(req)
        req.status, req.parked, req.slot = RequestStatus.WAITING, False, None
        req.preemptions += 1
        self.preemptions += 1
        self.waiting.appendleft(req)

    def _leave(self, req: Request) -> None:
        """Out of the resident set: its row and blocks back (a sealed block stays findable)."""
        del self.running[req.request_id]
        if req.behind:  # no longer behind anyone: an idle engine must not report it (and refuse work) forever
            self.behind = max(0, self.behind - 1)
            req.behind = False
        assert req.slot is not None and req.kv is not None
        self._free_slots.append(req.slot)
        self._free_slots.sort(reverse=True)
        self.blocks.release(req.kv)
        req.kv, req.prefilling = None, False

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
                self._track(req, slack)
                if not req.parked:
                    streams.append((slack, req))
        if not deadline:  # every resident request, in admission order (the slack is still counted)
            return running[: self.compute_batch]
        streams.sort(key=lambda pair: pair[0])
        return (first_audio + [req for _, req in streams] + background)[: self.compute_batch]

    def _track(self, req: Request, slack: float) -> None:
        """Park or unpark the stream as the policy says; count a miss each time it falls behind."""
        req.parked = self.policy.parked(req, slack)
        if slack < 0:
            self.behind += 1
            if not req.behind:
                req.behind = True
                self.deadline_misses += 1
        else:
            req.behind = False

    def idle_for(self, now: float) -> float | None:
        """Asked when `schedule` found nothing to run: with every resident stream parked, seconds until the
        first one is due back (None: not idle).

        The engine sleeps that long instead of spinning on empty steps. A request still waiting then waits
        for a row or blocks that only a resident request's end frees: a step (none is due before then) or
        an abort (which wakes the engine)."""
        if not self.running or self.policy.kind != "deadline":
            return None
        if not all(req.parked for req in self.running.values()):
            return None
        back = min(self.policy.due_back(req) for req in self.running.values())
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
        """End a request, whatever its state, and free its row and blocks."""
        if req.finished:
            return
        if req.status is RequestStatus.RUNNING:
            self._leave(req)
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
