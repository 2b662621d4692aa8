"""Decode batch buckets and the CUDA graphs captured for them.

A graph replays fixed shapes, so a decode batch is padded up to the next
bucket (rows that write only the cache's spare slot and are dropped). One
graph per bucket, captured largest first into one shared memory pool, as
nano-vllm does. The bucket arithmetic is plain Python; only `DecodeGraphs`
needs a GPU.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable

import torch

__all__ = ["DecodeGraphs", "batch_buckets", "bucket_for"]


def batch_buckets(max_batch: int) -> tuple[int, ...]:
    """1, 2, 4, 8, then every multiple of 16, and ``max_batch`` itself: padding wastes at most 15 rows."""
    if max_batch < 1:
        raise ValueError(f"max_batch must be >= 1, got {max_batch}")
    sizes = {b for b in (1, 2, 4, 8) if b < max_batch} | set(range(16, max_batch, 16)) | {max_batch}
    return tuple(sorted(sizes))


def bucket_for(rows: int, buckets: tuple[int, ...]) -> int:
    """The smallest bucket that holds ``rows``."""
    i = bisect.bisect_left(buckets, rows)
    if rows < 1 or i == len(buckets):
        raise ValueError(f"{rows} rows do not fit the buckets {buckets}")
    return buckets[i]


class DecodeGraphs:
    """``step(bucket)`` captured once per bucket on a CUDA device, replayed by `run`.

    ``step`` must read and write only persistent tensors (its inputs are
    written before `run`, its outputs read after) and make no host wait.
    """

    def __init__(self, step: Callable[[int], None], buckets: tuple[int, ...], device: torch.device) -> None:
        if device.type != "cuda":
            raise ValueError(f"CUDA graphs need a CUDA device, got {device}")
        self.buckets = buckets
        self._graphs: dict[int, torch.cuda.CUDAGraph] = {}
        pool = None
        side = torch.cuda.Stream(device)
        side.wait_stream(torch.cuda.current_stream(device))
        with torch.cuda.stream(side):
            for bucket in reversed(buckets):  # largest first: the smaller ones fit in its pool
                for _ in range(2):  # warm up: compile, autotune, allocate workspaces outside the capture
                    step(bucket)
                graph = torch.cuda.CUDAGraph()
                with torch.cuda.graph(graph, pool=pool, stream=side):
                    step(bucket)
                pool = graph.pool() if pool is None else pool
                self._graphs[bucket] = graph
        torch.cuda.current_stream(device).wait_stream(side)
        torch.cuda.synchronize(device)

    def run(self, bucket: int) -> None:
        self._graphs[bucket].replay()
