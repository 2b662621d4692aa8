"""The baseline's generation: transformers' generate, one call per request in its own thread."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from transformers import LlamaForCausalLM, LogitsProcessor, LogitsProcessorList, StoppingCriteria, StoppingCriteriaList
from transformers.generation.streamers import BaseStreamer

from lyre import orpheus
from lyre.engine import EngineStats, SamplingParams
from lyre.tts.sampling import AUDIO_CONSTRAINT

__all__ = ["Generation", "NaiveEngine"]


@dataclass(eq=False)
class Generation:
    """One request's generate thread; ``error`` is what ended it, if it failed."""

    thread: threading.Thread = field(init=False)
    error: Exception | None = None

    @property
    def running(self) -> bool:
        return self.thread.is_alive()


class _TokenStreamer(BaseStreamer):
    """Passes each new token id from the generate thread to the stream's event loop."""

    def __init__(self, loop: asyncio.AbstractEventLoop, queue: asyncio.Queue[int | None], cancel: threading.Event,
                 count: Callable[[int], None]) -> None:
        self._loop = loop
        self._queue = queue
        self._cancel = cancel
        self._count = count
        self._prompt_seen = False

    def put(self, value: torch.Tensor) -> None:
        if not self._prompt_seen:  # generate first puts the prompt back
            self._prompt_seen = True
            return
        ids = value.reshape(-1).tolist()  # (1,) at batch 1
        self._count(len(ids))
        for token in ids:
            self.send(token)

    def end(self) -> None:
        self.send(None)

    def send(self, item: int | None) -> None:
        try:
            self._loop.call_soon_threadsafe(self._queue.put_nowait, item)
        except RuntimeError:  # the loop is closed: nobody reads any more, so stop
            self._cancel.set()


class _Cancelled(StoppingCriteria):
    """Ends generate at the next token once the request is closed or the pipeline shuts down."""

    def __init__(self, *flags: threading.Event) -> None:
        self._flags = flags

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor | None,
                 **kwargs: Any) -> torch.BoolTensor:
        stop = any(flag.is_set() for flag in self._flags)
        return torch.full((input_ids.shape[0],), stop, dtype=torch.bool, device=input_ids.device)


class _ValidAudioOnly(LogitsProcessor):
    """Masks every id not valid at the next token's frame position, as a user's processor would.

    transformers runs custom processors after the repetition penalty and before
    its sampling warpers (temperature, top-p), so top-p sees only valid ids.
    """

    def __init__(self, prompt_len: int) -> None:
        self._prompt_len = prompt_len

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        allowed = AUDIO_CONSTRAINT.allowed(input_ids.shape[1] - self._prompt_len)
        mask = torch.full_like(scores, float("-inf"))  # (batch, vocab)
        mask[:, allowed.start : allowed.stop] = 0.0
        mask[:, list(allowed.extra)] = 0.0
        return scores + mask


def _generate_kwargs(params: SamplingParams) -> dict[str, Any]:
    if params.temperature > 0:
        sampling = {"do_sample": True, "temperature": params.temperature, "top_p": params.top_p,
                    "top_k": params.top_k}
    else:
        sampling = {"do_sample": False}
    return {"max_new_tokens": params.max_tokens, "repetition_penalty": params.repetition_penalty,
            "eos_token_id": orpheus.STOP_TOKEN, "pad_token_id": orpheus.PAD, **sampling}


class NaiveEngine:
    """transformers' Llama: every request runs its own ``generate`` in its own thread."""

    def __init__(self, model: LlamaForCausalLM, valid_audio_only: bool = False) -> None:
        self.model = model
        self.valid_audio_only = valid_audio_only
        self.device = next(model.parameters()).device
        self._closed = threading.Event()
        self._lock = threading.Lock()
        self._running = 0
        self._admitted = 0
        self._tokens = 0

    def start(self, prompt_ids: list[int], params: SamplingParams, sink: asyncio.Queue[int | None],
              cancel: threading.Event) -> Generation:
        """Start generating in a new thread, until ``cancel`` is set.

        Call it from the event loop that reads ``sink``: each token id arrives
        there, then None at the end (with `Generation.error` set first if it failed).
        """
        if self._closed.is_set():
            raise RuntimeError("the naive engine is shut down")
        streamer = _TokenStreamer(asyncio.get_running_loop(), sink, cancel, self._count)
        with self._lock:
            self._running += 1
            self._admitted += 1
        generation = Generation()
        generation.thread = threading.Thread(target=self._generate, name="naive-generate", daemon=True,
                                             args=(prompt_ids, params, streamer, cancel, generation))
        generation.thread.start()
        return generation

    def _generate(self, prompt_ids: list[int], params: SamplingParams, streamer: _TokenStreamer,
                  cancel: threading.Event, generation: Generation) -> None:
        try:
            ids = torch.tensor([prompt_ids], device=self.device)  # (1, prompt)
            masks = [_ValidAudioOnly(len(prompt_ids))] if self.valid_audio_only else []
            with torch.inference_mode():
                self.model.generate(ids, attention_mask=torch.ones_like(ids), streamer=streamer,
                                    logits_processor=LogitsProcessorList(masks),
                                    stopping_criteria=StoppingCriteriaList([_Cancelled(cancel, self._closed)]),
                                    **_generate_kwargs(params))
        except Exception as exc:  # noqa: BLE001 -- handed to the stream, which raises it to its reader
            generation.error = exc
            streamer.end()
        finally:
            with self._lock:
                self._running -= 1

    def _count(self, tokens: int) -> None:
        with self._lock:
            self._tokens += tokens

    def stats(self) -> EngineStats:
        """Honest counts: no queue, and each running request is a batch of one, one token a step."""
        with self._lock:
            running, tokens, admitted = self._running, self._tokens, self._admitted
        return EngineStats(waiting=0, running=running, parked=0, steps=tokens, tokens=tokens, admitted=admitted,
                           step_seconds=0.0, forward_seconds=0.0, queue_wait_total=0.0, queue_wait_max=0.0,
                           last_batch_size=1 if running else 0, deadline_misses=0, behind=0,
                           slack_p10_p50_p90=None, kv_cache_bytes=0)

    def shutdown(self) -> None:
        """Stop every running generate at its next token."""
        self._closed.set()
