"""The engine: one loop that serves every request, off the asyncio event loop.

``generate()`` returns an async iterator of token ids; ``abort()`` ends a
request at the next step. Inside, a worker thread repeats one step:
take new submissions and aborts, schedule, run the model, hand tokens back.
"""

from __future__ import annotations

import asyncio
import itertools
import secrets
import threading
import time
from collections import defaultdict, deque
from pathlib import Path

from lyre.engine.config import EngineConfig
from lyre.engine.constraint import Constraint
from lyre.engine.loader import load_llama
from lyre.engine.llama import Llama
from lyre.engine.runner import ModelRunner
from lyre.engine.sampling import SamplingParams
from lyre.engine.scheduler import Scheduler
from lyre.engine.sequence import FinishReason, Request
from lyre.engine.stats import EngineStats, StatsRecorder

__all__ = ["Engine", "RequestStream"]

_END = object()  # marks the end of a request's token stream


class RequestStream:
    """Async iterator over one request's tokens. Closing it aborts the request."""

    def __init__(self, engine: Engine, req: Request) -> None:
        self._engine = engine
        self._req = req
        self._items: deque[object] = deque()
        self._arrived = asyncio.Event()
        self._loop = asyncio.get_running_loop()

    @property
    def request_id(self) -> str:
        return self._req.request_id

    @property
    def finish_reason(self) -> FinishReason | None:
        """Why the request ended, once it has."""
        return self._req.finish_reason

    @property
    def request(self) -> Request:
        return self._req

    def __aiter__(self) -> RequestStream:
        return self

    async def __anext__(self) -> int:
        while not self._items:
            self._arrived.clear()
            try:
                await self._arrived.wait()
            except asyncio.CancelledError:
                self._engine.abort(self.request_id)
                raise
        item = self._items[0]
        if item is _END:
            raise StopAsyncIteration  # _END stays: the stream stays exhausted
        self._items.popleft()
        if isinstance(item, BaseException):
            raise item
        assert isinstance(item, int)
        return item

    def take_ready(self) -> list[int]:
        """The tokens already made and not yet taken, without waiting."""
        tokens = []
        while self._items and isinstance(self._items[0], int):
            tokens.append(self._items.popleft())
        return tokens

    async def aclose(self) -> None:
        """Stop consuming: the engine frees the request's slot at its next step."""
        self._engine.abort(self.request_id)

    async def __aenter__(self) -> RequestStream:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    def _deliver(self, items: list[object]) -> None:
        self._items.extend(items)
        self._arrived.set()


class Engine:
    """Continuous-batching generation over a preallocated KV cache."""

    def __init__(self, model: Llama, config: EngineConfig) -> None:
        self.config = config
        self.model_config = model.config
        self.runner = ModelRunner(model, config)
        self.scheduler = Scheduler(config.max_batch, config.max_seq_len, config.max_waiting)
        self.recorder = StatsRecorder()
        self._streams: dict[str, RequestStream] = {}
        self._outbox: list[tuple[RequestStream, list[object]]] = []
        self._aborts: deque[str] = deque()
        self._wake = threading.Condition()
        self._ids = itertools.count()
        self._seeds = secrets.SystemRandom() if config.seed is None else None
        self._seed_base = config.seed
        self._closed = False
        self._thread = threading.Thread(target=self._run, name="lyre-engine", daemon=True)
        self._thread.start()

    @classmethod
    def from_folder(cls, folder: Path, config: EngineConfig | None = None) -> Engine:
        """Load a Hugging Face Llama checkpoint folder and start an engine on it."""
        config = config or EngineConfig()
        model = load_llama(folder, config.max_seq_len, config.device, config.resolved_dtype)
        return cls(model, config)

    # -- public API (call from the event loop) -------------------------------
    def generate(
        self,
        prompt_ids: list[int],
        sampling: SamplingParams,
        request_id: str | None = None,
        constraint: Constraint | None = None,
        adapter: str | None = None,
        deadline: float | None = None,
    ) -> RequestStream:
        """Submit a request; iterate the result for its token ids as they are made.

        Raises ValueError for a bad prompt, RequestTooLong when prompt +
        max_tokens can never fit a slot, EngineFull when the queue is full.
        """
        if self._closed:
            raise RuntimeError("engine is shut down")
        if adapter is not None:
            raise ValueError(f"adapter {adapter!r}: this engine serves no adapters")
        vocab = self.model_config.vocab_size
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
            deadline=deadline,
        )
        with self._wake:
            req.submit_step = self.recorder.steps
            self.scheduler.add(req)  # validates length, queue room and id under the lock
            stream = RequestStream(self, req)
            self._streams[request_id] = stream
            self._wake.notify()
        return stream

    def abort(self, request_id: str) -> None:
        """Stop a request at the next step and free its slot (no-op once it has ended)."""
        with self._wake:
            self._aborts.append(request_id)
            self._wake.notify()

    def stats(self) -> EngineStats:
        with self._wake:
            return self.recorder.snapshot(
                waiting=len(self.scheduler.waiting),
                running=len(self.scheduler.running),
                forward_seconds=self.runner.forward_seconds,
            )

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
                while not self._closed and not self._aborts and not self.scheduler.waiting and not self.scheduler.running:
                    self._wake.wait()
                if self._closed:
                    self._finish_all(FinishReason.ABORT)
                    self._flush()
                    return
                self._apply_aborts()
                batch = self.scheduler.schedule()
            if not batch:
                continue
            start = time.perf_counter()
            try:
                tokens = self.runner.step(batch.prefill, batch.decode)
            except Exception as exc:  # a failed step must not strand its requests
                with self._wake:
                    for req in batch.prefill + batch.decode:
                        self.scheduler.finish(req, FinishReason.ERROR)
                        self._send(req, [RuntimeError(f"engine step failed: {exc}"), _END])
                continue
            with self._wake:
                self.recorder.record_step(batch, time.perf_counter() - start)
                step = self.recorder.steps
                for req, token in zip(batch.prefill + batch.decode, tokens):
                    if req.finished:  # aborted while the step ran
                        continue
                    if req.first_token_step is None:
                        req.first_token_step = step
                    done = self.scheduler.append_token(req, token)
                    if done:
                        req.finish_step = step
                    items: list[object] = [] if req.finish_reason is FinishReason.STOP else [token]
                    if done:
                        items.append(_END)
                    self._send(req, items)

    def _apply_aborts(self) -> None:
        while self._aborts:
            req = self.scheduler.find(self._aborts.popleft())
            if req is not None:
                self.scheduler.finish(req, FinishReason.ABORT)
                req.finish_step = self.recorder.steps
                self._send(req, [_END])

    def _finish_all(self, reason: FinishReason) -> None:
        for req in list(self.scheduler.running.values()) + list(self.scheduler.waiting):
            self.scheduler.finish(req, reason)
            self._send(req, [_END])

    def _send(self, req: Request, items: list[object]) -> None:
        """Queue items for the request's stream (called under the lock)."""
        if req.finished:
            stream = self._streams.pop(req.request_id, None)
        else:
            stream = self._streams.get(req.request_id)
        if stream is not None and items:
            self._outbox.append((stream, items))

    def _flush(self) -> None:
        """Hand a step's tokens to their event loops: one wake-up per loop, not per token."""
        with self._wake:
            outbox, self._outbox = self._outbox, []
        by_loop: dict[asyncio.AbstractEventLoop, list[tuple[RequestStream, list[object]]]] = defaultdict(list)
        for stream, items in outbox:
            by_loop[stream._loop].append((stream, items))
        for loop, deliveries in by_loop.items():
            try:
                loop.call_soon_threadsafe(_deliver_all, deliveries)
            except RuntimeError:  # that loop has closed; nobody is listening
                pass


def _deliver_all(deliveries: list[tuple[RequestStream, list[object]]]) -> None:
    for stream, items in deliveries:
        stream._deliver(items)
