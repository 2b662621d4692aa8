"""Decode batch buckets and the CUDA graphs captured for them.

A graph replays fixed shapes, so a decode batch is padded up to the next
bucket (rows that write only the cache's spare slot and are dropped). One
graph per bucket, captured largest first into one shared memory pool, as
nano-vllm does. The bucket arithmetic is plain Python; only `DecodeGraphs`
needs a GPU.

Warm-up and capture run under ``torch.inference_mode()``, whoever calls
them: with autograd on, a step that writes the KV cache from weights that
require grad makes the cache part of an autograd graph, so every warm-up
pass's activations would stay alive through the cache for the life of the
process (about a GiB per layer per pass at bucket 256 with gather attention).
"""

from __future__ import annotations

from collections.abc import Callable

import torch

__all__ = ["WARM_UP_PASSES", "DecodeGraphs", "batch_buckets", "warm_up"]

WARM_UP_PASSES = 2  # before a capture: compile, autotune, allocate workspaces outside the graph


def batch_buckets(max_batch: int) -> tuple[int, ...]:
    """1, 2, 4, 8, then every multiple of 16, and ``max_batch`` itself: padding wastes at most 15 rows."""
    if max_batch < 1:
        raise ValueError(f"max_batch must be >= 1, got {max_batch}")
    sizes = {b for b in (1, 2, 4, 8) if b < max_batch} | set(range(16, max_batch, 16)) | {max_batch}
    return tuple(sorted(sizes))


@torch.inference_mode()
def warm_up(step: Callable[[int], None], buckets: tuple[int, ...]) -> None:
    """Run ``step`` `WARM_UP_PASSES` times per bucket, largest first, with autograd off.

    What `DecodeGraphs` runs before each capture; on its own it runs on any
    device, which is how a CPU test checks that it leaves no autograd state.
    """
    for bucket in sorted(buckets, reverse=True):
        for _ in range(WARM_UP_PASSES):
            step(bucket)


class DecodeGraphs:
    """``step(bucket)`` captured once per bucket on a CUDA device, replayed by `run`.

    ``step`` must read and write only persistent tensors (its inputs are
    written before `run`, its outputs read after) and make no host wait.
    Build it at start-up, before anything else launches work on the device:
    the capture runs in CUDA's default ("global") capture mode, in which
    another thread's launch or allocation during a capture is an error.
    """

    @torch.inference_mode()
    def __init__(self, step: Callable[[int], None], buckets: tuple[int, ...], device: torch.device) -> None:
        if device.type != "cuda":
            raise ValueError(f"CUDA graphs need a CUDA device, got {device}")
        self.buckets = buckets
        self._graphs: dict[int, torch.cuda.CUDAGraph] = {}
        pool = None
        side = torch.cuda.Stream(device)
        side.wait_stream(torch.cuda.current_stream(device))
        with torch.cuda.stream(side):
            for bucket in sorted(buckets, reverse=True):  # largest first: the smaller ones fit in its pool
                warm_up(step, (bucket,))
                graph = torch.cuda.CUDAGraph()
                with torch.cuda.graph(graph, pool=pool, stream=side):
                    step(bucket)
                pool = graph.pool() if pool is None else pool
                self._graphs[bucket] = graph
        torch.cuda.current_stream(device).wait_stream(side)
        torch.cuda.synchronize(device)

    def run(self, bucket: int) -> None:
        self._graphs[bucket].replay()
