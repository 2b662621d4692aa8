"""The engine: one loop that serves every request, off the asyncio event loop.

``generate()`` returns a `RequestStream` of token ids; ``abort()`` ends a
request at the next step. Inside, a worker thread repeats one step:
take new submissions and aborts, schedule, run the model, book the tokens
(`lyre.engine.bookkeeper`) and hand them back.

No stream waits forever: a step that fails (in the model or in the
bookkeeping around it) fails that step's requests and the loop goes on; a
failure outside any step, or steps that keep failing, ends the loop, fails
every request, and leaves the reason in `failure` (and in `stats`), which a
server's readiness reads.
"""

from __future__ import annotations

import itertools
import secrets
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from pathlib import Path

from lyre.common.threads import use_threads
from lyre.engine.adapter_registry import AdapterRegistry
from lyre.engine.adapters import EngineAdapters
from lyre.engine.batch import ScheduledBatch
from lyre.engine.block_manager import BlockManager
from lyre.engine.bookkeeper import Bookkeeper
from lyre.engine.config import EngineConfig
from lyre.engine.constraint import Constraint, SliceFamily
from lyre.engine.handoff import Outbox, StepOps
from lyre.models.loader import load_llama, prepare_model
from lyre.models.llama import Llama
from lyre.engine.launch import Runner
from lyre.engine.runner import ModelRunner
from lyre.engine.sampling import SamplingParams
from lyre.engine.scheduler import Scheduler
from lyre.engine.sequence import FinishReason, Playback, Request
from lyre.engine.stats import EngineStats, StatsRecorder
from lyre.engine.stream import RequestStream

__all__ = ["Engine", "RequestStream"]

# Steps failing one after another, each failing its own requests: past this many, whatever fails them (a lost
# device, a broken model) will fail the next as well, so the engine stops and says so instead.
_FAILED_STEPS_FATAL = 3
# The longest a step waits for sliced work (copying an adapter in) between two steps: a small adapter goes in at
# once, a large one over several steps, and no stream pauses for a whole one.
_PAUSE_S = 0.01


class Engine:
    """Continuous-batching generation over a preallocated KV cache."""

    def __init__(self, model: Llama | None, config: EngineConfig, family: SliceFamily | None = None,
                 *, runner: Runner | None = None) -> None:
        """``family``: the constraint family most requests use; fixed-shape (graph) steps serve rows of
        that family (None: unconstrained rows), any other step runs eagerly. ``runner`` replaces the
        `ModelRunner` built from ``model`` (a test or the host-overhead benchmark; ``model`` is then None)."""
        self.config = config
        # The engine holds each request's adapter in the registry while it runs; loading, leasing and
        # unloading are `adapters`' (which reaches the engine only as an `AdapterHost`).
        self.adapter_registry: AdapterRegistry | None = None
        self.adapters: EngineAdapters | None = None
        if runner is None:
            if model is None:
                raise ValueError("an engine needs a model or a runner")
            bank = prepare_model(model, config.quantize, config.max_adapters, config.lora_rank)
            runner = ModelRunner(model, config, family, bank=bank)
            if bank is not None:
                self.adapter_registry = AdapterRegistry(config.max_adapters, config.adapter_max_bytes)
                self.adapters = EngineAdapters(self, self.adapter_registry, bank, model.config)
        self.runner: Runner = runner
        blocks = BlockManager(runner.kv_blocks, runner.block_size, caching=config.prefix_caching)
        self.scheduler = Scheduler(config.max_batch, config.max_seq_len, config.max_waiting, config.policy(), blocks,
                                   config.step_tokens)
        self.recorder = StatsRecorder(runner.kv_cache_bytes)
        self._aborts: deque[str] = deque()
        self._ops = StepOps()
        self._wake = threading.Condition()
        self._outbox = Outbox(self._wake)
        self._books = Bookkeeper(self.scheduler, self._outbox, self.adapter_registry)
        self._ids = itertools.count()
        self._seeds = secrets.SystemRandom() if config.seed is None else None
        self._seed_base = config.seed
        self._closed = False
        self._failure: str | None = None  # why the loop stopped, if it failed
        self._failed_steps = 0  # steps failed one after another
        self._thread = threading.Thread(target=self._run, name="lyre-engine", daemon=True)
        self._thread.start()

    @classmethod
    def from_folder(cls, folder: Path, config: EngineConfig | None = None, family: SliceFamily | None = None) -> Engine:
        """Load a Hugging Face Llama checkpoint folder and start an engine on it."""
        config = config or EngineConfig()
        model = load_llama(folder, config.max_seq_len, config.device, config.resolved_dtype)
        return cls(model, config, family)

    # -- public API (call from the event loop) -------------------------------
    def generate(self, prompt_ids: list[int], sampling: SamplingParams, request_id: str | None = None,
                 constraint: Constraint | None = None, adapter: str | None = None,
                 playback: Playback | None = None, cache_output: bool = True) -> RequestStream:
        """Submit a request; iterate the result for its token ids as they are made.

        ``cache_output``: seal the blocks of what it generates for later
        prompts to reuse, as a conversation's next turn does (off: only its
        prompt's; for output no prompt ever repeats, which would only crowd
        the cache and scatter the pool's free blocks).

        ``playback``: how a listener plays it as it streams (None: nobody
        does); scheduled on that listener's deadline, which `start_playback`
        sets once playback starts. Raises ValueError for a bad prompt,
        RequestTooLong when prompt + max_tokens can never fit a slot,
        EngineFull when the queue is full.
        """
        self._check_serving()
        if adapter is not None and self.adapter_registry is None:
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
        req = Request(request_id=request_id, prompt_ids=list(prompt_ids), sampling=sampling,
                      seed=self._seed_for(sampling), constraint=constraint, adapter=adapter,
                      pace=playback.pace if playback else None, lag_s=playback.lag_s if playback else 0.0,
                      deadline=playback.deadline if playback else None, cache_output=cache_output)
        with self._wake:
            self._check_serving()  # the loop may have failed since
            req.submit_step = self.recorder.steps
            stream = self._books.open(req, self.abort)  # validates adapter, length, queue room and id
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
            return self.recorder.snapshot(self.scheduler, self.runner.forward_seconds, self._failure)

    @property
    def failure(self) -> str | None:
        """Why the engine stopped serving, once a failure ended its loop (None while it serves)."""
        return self._failure

    @property
    def lock(self) -> threading.Condition:
        """The engine's lock: hold it to read or change what the loop thread reads between steps."""
        return self._wake

    async def between_steps(self, op: Callable[[], None]) -> None:
        """Run ``op`` on the engine's thread, between two steps and under the lock; wait for it.
        What it raises is raised here."""
        with self._wake:
            self._check_serving()
            done = self._ops.add(op)
            self._wake.notify()
        await done

    async def in_slices(self, job: Iterator[None]) -> None:
        """Run ``job`` on the engine's thread without the lock, as many ``next`` between two steps as fit
        `_PAUSE_S`: work too long for one pause (copying an adapter into a slot no request uses). What it
        raises is raised here."""
        with self._wake:
            self._check_serving()
            done = self._ops.add_sliced(job)
            self._wake.notify()
        await done

    def fail_requests(self, which: Callable[[Request], bool], message: str) -> None:
        """End every request ``which`` picks with an error saying ``message`` (call under the lock)."""
        self._books.fail(which, message)

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

    def _check_serving(self) -> None:
        if self._failure is not None:
            raise RuntimeError(f"engine failed: {self._failure}")
        if self._closed:
            raise RuntimeError("engine is shut down")

    def _run(self) -> None:
        """Step until shut down. A failure outside a step (or `_FAILED_STEPS_FATAL` failed steps in a row)
        cannot be pinned on some requests and would recur: it ends the loop, failing everything."""
        try:
            use_threads(self.config.threads)
            while (batch := self._next_batch()) is not None:
                if batch:
                    self._step(batch)
                self._ops.run_slice(self._wake, _PAUSE_S)  # longer work between two steps, off the lock
        except Exception as exc:
            self._die(exc)

    def _next_batch(self) -> ScheduledBatch | None:
        """Wait for work; apply queued ops and aborts; schedule the next step (None once shut down)."""
        self._outbox.flush()
        with self._wake:
            while (not self._closed and not self._aborts and not self._ops and not self.scheduler.waiting
                   and not self.scheduler.running):
                self._wake.wait()
            if self._closed:
                self._books.end_all(FinishReason.ABORT)
                self._ops.run_all(refuse=RuntimeError("engine is shut down"))
                self._outbox.flush()
                return None
            self._ops.run_all()
            self._apply_aborts()
            batch = self.scheduler.schedule()
            if not batch and not self._ops and (idle := self.scheduler.idle_for(time.monotonic())) is not None:
                # Every stream is parked far ahead of its listener: sleep until the first is due
                # back (a new request, an abort or a playback start wakes the loop sooner).
                self._wake.wait(idle)
        return batch

    def _step(self, batch: ScheduledBatch) -> None:
        """Run one scheduled batch: launch it, deliver the last step's tokens while the device works,
        then take this step's tokens (its one device-to-host copy) and book them."""
        start = time.perf_counter()
        try:
            pending = self.runner.launch(batch.prefill, batch.decode)
            self._outbox.flush()
            tokens = pending.tokens()
            with self._wake:
                self.runner.forward_seconds += pending.forward_seconds
                self.recorder.record_step(batch, time.perf_counter() - start)
                self.scheduler.ran(batch)
                self._books.book(batch.sampled, tokens, self.recorder.steps)
        except Exception as exc:  # a failed step must not strand its requests, nor end the loop
            self._fail_step([c.req for c in batch.prefill] + batch.decode, exc)
            return
        self._failed_steps = 0

    def _fail_step(self, reqs: list[Request], exc: Exception) -> None:
        """End a failed step's requests with its error; raise once steps keep failing."""
        with self._wake:
            for req in reqs:
                if not req.finished:
                    self._books.end(req, FinishReason.ERROR, RuntimeError(f"engine step failed: {exc}"))
        self._failed_steps += 1
        if self._failed_steps >= _FAILED_STEPS_FATAL:
            raise RuntimeError(f"{self._failed_steps} steps in a row failed, the last with: {exc}") from exc

    def _die(self, exc: Exception) -> None:
        """The loop cannot go on: fail every stream and queued op with ``exc``, and refuse new work.

        The scheduler may be what broke, so the streams are failed from the engine's own table of them."""
        try:
            with self._wake:
                self._failure = f"{type(exc).__name__}: {exc}"
                self._closed = True
                error = RuntimeError(f"engine failed: {self._failure}")
                self._outbox.fail_all(error)
                self._ops.run_all(refuse=error)
        finally:
            self._outbox.flush()  # whatever else failed, the streams hear it

    def _apply_aborts(self) -> None:
        while self._aborts:
            self._books.abort(self._aborts.popleft(), self.recorder.steps)
