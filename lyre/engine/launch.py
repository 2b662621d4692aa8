"""A launched step: what the engine's loop needs of a runner, and the step's sampled ids on their way to the host.

A step's only device-to-host transfer is its sampled ids, started
asynchronously as the step is launched, so the engine can do host work
(deliver the last step's tokens) while the device runs; `Pending.tokens`
waits for them.
"""

from __future__ import annotations

import time
from typing import Protocol

import torch

from lyre.engine.batch import PrefillChunk
from lyre.engine.sequence import Request

__all__ = ["Pending", "PendingTokens", "Runner"]


class Pending(Protocol):
    """A launched step's sampled ids: `PendingTokens`, or what a stand-in runner hands back."""

    forward_seconds: float  # the step's compute time, once `tokens` has returned

    def tokens(self) -> list[int]: ...


class Runner(Protocol):
    """What the engine's loop needs of a runner: `ModelRunner`, or a stand-in that makes no tensors."""

    vocab_size: int
    kv_cache_bytes: int
    kv_blocks: int  # blocks in the KV cache's pool
    block_size: int  # positions per block
    forward_seconds: float  # cumulative, kept by the engine

    def launch(self, prefill: list[PrefillChunk], decode: list[Request]) -> Pending: ...


class PendingTokens:
    """A step's sampled ids on their way to the host; `tokens` waits for them."""

    def __init__(self, ids: torch.Tensor, host: torch.Tensor, started: float,
                 events: tuple[torch.cuda.Event, torch.cuda.Event] | None) -> None:
        self._host = host[: len(ids)]
        self._host.copy_(ids, non_blocking=True)
        self._events = events
        self._done = torch.cuda.Event() if events is not None else None
        if self._done is not None:
            self._done.record()
        # Off CUDA the work ran inside the launch; on CUDA the events time it once it is done.
        self.forward_seconds = time.perf_counter() - started

    def tokens(self) -> list[int]:
        if self._done is not None:
            self._done.synchronize()
            assert self._events is not None
            self.forward_seconds = self._events[0].elapsed_time(self._events[1]) / 1000.0
        return self._host.tolist()
