"""The engine: one loop that serves every request, off the asyncio event loop.

``generate()`` returns a `RequestStream` of token ids; ``abort()`` ends a
request at the next step. Inside, a worker thread repeats one step:
take new submissions and aborts, schedule, run the model, hand tokens back.
"""

from __future__ import annotations

import asyncio
import itertools
import secrets
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable
from pathlib import Path

from lyre.engine.config import EngineConfig
from lyre.engine.constraint import Constraint, SliceFamily
from lyre.engine.adapters import AdapterRegistry, EngineAdapters
from lyre.engine.fp8 import quantize_fp8
from lyre.engine.lora import LoraBank, attach_lora
from lyre.engine.loader import load_llama
from lyre.engine.llama import Llama
from lyre.engine.runner import ModelRunner, Runner
from lyre.engine.sampling import SamplingParams
from lyre.engine.scheduler import ScheduledBatch, Scheduler
from lyre.engine.sequence import FinishReason, Playback, Request
from lyre.engine.stats import EngineStats, StatsRecorder
from lyre.engine.stream import RequestStream
from lyre.loops import call_soon_per_loop, settle_futures

__all__ = ["Engine", "RequestStream"]

class Engine:
    """Continuous-batching generation over a preallocated KV cache."""

    def __init__(self, model: Llama | None, config: EngineConfig, family: SliceFamily | None = None,
                 *, runner: Runner | None = None) -> None:
        """``family``: the constraint family most requests use; fixed-shape (graph) steps serve rows of
        that family (None: unconstrained rows), any other step runs eagerly. ``runner`` replaces the
        `ModelRunner` built from ``model`` (a test or the host-overhead benchmark; ``model`` is then None)."""
        self.config = config
        self.adapters: EngineAdapters | None = None
        if runner is None:
            if model is None:
                raise ValueError("an engine needs a model or a runner")
            if config.quantize == "fp8":
                quantize_fp8(model)
            bank = None
            if config.max_adapters:
                bank = LoraBank(config.max_adapters, config.lora_rank, model.output_weight.dtype,
                                model.output_weight.device)
                attach_lora(model, bank)
                registry = AdapterRegistry(config.max_adapters, config.adapter_max_bytes)
                self.adapters = EngineAdapters(self, bank, registry, model.config)
            runner = ModelRunner(model, config, family, bank=bank)
        self.runner: Runner = runner
        self.scheduler = Scheduler(config.max_batch, config.max_seq_len, config.max_waiting, config.policy())
        self.recorder = StatsRecorder(runner.kv_cache_bytes)
        # Weak: a stream nobody holds is collected, and its finalizer aborts the request.
        self._streams: weakref.WeakValueDictionary[str, RequestStream] = weakref.WeakValueDictionary()
        self._outbox: list[tuple[asyncio.AbstractEventLoop, _Delivery]] = []
        self._aborts: deque[str] = deque()
        self._ops: deque[tuple[Callable[[], None], asyncio.AbstractEventLoop, asyncio.Future[None]]] = deque()
        self._wake = threading.Condition()
        self._ids = itertools.count()
        self._seeds = secrets.SystemRandom() if config.seed is None else None
        self._seed_base = config.seed
        self._closed = False
        self._thread = threading.Thread(target=self._run, name="lyre-engine", daemon=True)
        self._thread.start()

    @classmethod
    def from_folder(cls, folder: Path, config: EngineConfig | None = None, family: SliceFamily | None = None) -> Engine:
        """Load a Hugging Face Llama checkpoint folder and start an engine on it."""
        config = config or EngineConfig()
        model = load_llama(folder, config.max_seq_len, config.device, config.resolved_dtype)
        return cls(model, config, family)

    # -- public API (call from the event loop) -------------------------------
    def generate(
        self,
        prompt_ids: list[int],
        sampling: SamplingParams,
        request_id: str | None = None,
        constraint: Constraint | None = None,
        adapter: str | None = None,
        playback: Playback | None = None,
    ) -> RequestStream:
        """Submit a request; iterate the result for its token ids as they are made.

        ``playback``: how a listener plays it as it streams (None: nobody
        does); scheduled on that listener's deadline, which `start_playback`
        sets once playback starts. Raises ValueError for a bad prompt,
        RequestTooLong when prompt + max_tokens can never fit a slot,
        EngineFull when the queue is full.
        """
        if self._closed:
            raise RuntimeError("engine is shut down")
        if adapter is not None and self.adapters is None:
            raise ValueError(f"adapter {adapter!r}: this engine serves no adapters (start it with adapter slots)")
        vocab = self.runner.vocab_size
        if not prompt_ids:
            raise ValueError("prompt_ids is empty")
        if not all(isinstance(t, int) and 0 <= t < vocab for t in prompt_ids):
            raise ValueError(f"prompt_ids must be token ids in [0, {vocab})")
        bad_stop = [t for t in sampling.stop_ids if t >= vocab]
        if bad_stop:
            raise ValueError(f"stop_ids {bad_stop} are outside the vocabulary [0, {vocab})")
        request_id = request_id or f"req-{next(self._ids)}"
        req = Request(
            request_id=request_id,
            prompt_ids=list(prompt_ids),
            sampling=sampling,
            seed=self._seed_for(sampling),
            constraint=constraint,
            adapter=adapter,
            pace=playback.pace if playback else None,
            lag_s=playback.lag_s if playback else 0.0,
            deadline=playback.deadline if playback else None,
        )
        with self._wake:
            req.submit_step = self.recorder.steps
            entry = None
            if adapter is not None:
                assert self.adapters is not None
                entry = self.adapters.registry.get(adapter)
                if not entry.resident:
                    raise ValueError(f"adapter {adapter!r} is not loaded; lease it first (Engine.adapters.lease)")
            self.scheduler.add(req)  # validates length, queue room and id under the lock
            if entry is not None:  # held while the request runs: not evicted under it
                self.adapters.registry.hold(entry)  # type: ignore[union-attr]
                req.adapter_slot = entry.slot
            stream = RequestStream(self.abort, req)
            self._streams[request_id] = stream
            self._wake.notify()
        return stream

    def abort(self, request_id: str) -> None:
        """Stop a request at the next step and free its slot (no-op once it has ended)."""
        with self._wake:
            self._aborts.append(request_id)
            self._wake.notify()

    def start_playback(self, request_id: str, at: float, skipped_tokens: int = 0) -> None:
        """The request's listener started playing at ``at`` (monotonic): from now on its tokens have a deadline.
        ``skipped_tokens`` were made but will not be heard (trimmed silence)."""
        with self._wake:
            req = self.scheduler.find(request_id)
            if req is not None:
                self.scheduler.start_playback(req, at, skipped_tokens)

    def stats(self) -> EngineStats:
        with self._wake:
            return self.recorder.snapshot(self.scheduler, self.runner.forward_seconds)

    @property
    def lock(self) -> threading.Condition:
        """The engine's lock: hold it to read or change what the loop thread reads between steps."""
        return self._wake

    async def between_steps(self, op: Callable[[], None]) -> None:
        """Run ``op`` on the engine's thread, between two steps and under the lock; wait for it.
        What it raises is raised here."""
        loop = asyncio.get_running_loop()
        done: asyncio.Future[None] = loop.create_future()
        with self._wake:
            if self._closed:
                raise RuntimeError("engine is shut down")
            self._ops.append((op, loop, done))
            self._wake.notify()
        await done

    def fail_requests(self, which: Callable[[Request], bool], message: str) -> None:
        """End every request ``which`` picks with an error saying ``message`` (call under the lock)."""
        for req in [*self.scheduler.running.values(), *self.scheduler.waiting]:
            if which(req):
                self.scheduler.finish(req, FinishReason.ABORT)
                self._send(req, [], RuntimeError(message))

    def shutdown(self) -> None:
        """Abort everything and stop the loop thread."""
        with self._wake:
            self._closed = True
            self._wake.notify()
        self._thread.join()

    # -- the loop (worker thread) ----------------------------------------------
    def _seed_for(self, sampling: SamplingParams) -> int:
        if sampling.seed is not None:
            return sampling.seed
        if self._seeds is not None:
            return self._seeds.randrange(2**63)
        assert self._seed_base is not None
        return (self._seed_base * 1_000_003 + next(self._ids)) % 2**63

    def _run(self) -> None:
        while True:
            self._flush()
            with self._wake:
                while (not self._closed and not self._aborts and not self._ops and not self.scheduler.waiting
                       and not self.scheduler.running):
                    self._wake.wait()
                if self._closed:
                    self._finish_all(FinishReason.ABORT)
                    self._apply_ops()
                    self._flush()
                    return
                self._apply_ops()
                self._apply_aborts()
                batch = self.scheduler.schedule()
                if not batch and (idle := self.scheduler.idle_for(time.monotonic())) is not None:
                    # Every stream is parked far ahead of its listener: sleep until the first is due
                    # back (a new request, an abort or a playback start wakes the loop sooner).
                    self._wake.wait(idle)
            if batch:
                self._step(batch)

    def _step(self, batch: ScheduledBatch) -> None:
        """Run one scheduled batch: launch it, deliver the last step's tokens while the device works,
        then take this step's tokens (its one device-to-host copy) and book them."""
        reqs = batch.prefill + batch.decode
        start = time.perf_counter()
        try:
            pending = self.runner.launch(batch.prefill, batch.decode)
            self._flush()
            tokens = pending.tokens()
        except Exception as exc:  # a failed step must not strand its requests
            with self._wake:
                for req in reqs:
                    self.scheduler.finish(req, FinishReason.ERROR)
                    self._send(req, [], RuntimeError(f"engine step failed: {exc}"))
            return
        with self._wake:
            self.runner.forward_seconds += pending.forward_seconds
            self.recorder.record_step(batch, time.perf_counter() - start)
            step = self.recorder.steps
            for req, token in zip(reqs, tokens):
                if req.finished:  # aborted while the step ran
                    continue
                if req.first_token_step is None:
                    req.first_token_step = step
                done = self.scheduler.append_token(req, token)
                if done:
                    req.finish_step = step
                self._send(req, [] if req.finish_reason is FinishReason.STOP else [token])

    def _apply_ops(self) -> None:
        """Work queued by `between_steps` (installing an adapter, unloading one), then its callers settled."""
        settled = []
        while self._ops:
            op, loop, done = self._ops.popleft()
            outcome: BaseException | None = None
            try:
                if self._closed:
                    raise RuntimeError("engine is shut down")
                op()
            except Exception as exc:  # the caller gets it; the engine carries on
                outcome = exc
            settled.append((loop, done, outcome))
        settle_futures(settled)

    def _apply_aborts(self) -> None:
        while self._aborts:
            req = self.scheduler.find(self._aborts.popleft())
            if req is not None:
                self.scheduler.finish(req, FinishReason.ABORT)
                req.finish_step = self.recorder.steps
                self._send(req, [])

    def _finish_all(self, reason: FinishReason) -> None:
        for req in list(self.scheduler.running.values()) + list(self.scheduler.waiting):
            self.scheduler.finish(req, reason)
            self._send(req, [])

    def _send(self, req: Request, tokens: list[int], error: BaseException | None = None) -> None:
        """Queue a step's tokens for the request's stream, with its end once it has finished (under the lock)."""
        if req.finished and req.adapter is not None and self.adapters is not None:
            entry = self.adapters.registry.entries.get(req.adapter)
            if entry is not None and req.adapter_slot is not None:
                self.adapters.registry.release(entry)
                req.adapter_slot = None
        stream = self._streams.pop(req.request_id, None) if req.finished else self._streams.get(req.request_id)
        if stream is not None and (tokens or req.finished):
            self._outbox.append((stream.loop, (stream, tokens, req.finished, error)))

    def _flush(self) -> None:
        """Hand the queued tokens to their event loops: one wake-up per loop, not per token."""
        with self._wake:
            outbox, self._outbox = self._outbox, []
        call_soon_per_loop(outbox, _deliver_all)


_Delivery = tuple[RequestStream, list[int], bool, "BaseException | None"]


def _deliver_all(deliveries: list[_Delivery]) -> None:
    for stream, tokens, ended, error in deliveries:
        stream._deliver(tokens, ended, error)
