"""Decode buckets and the CUDA graphs captured for them.

A graph replays fixed shapes, so a decode batch is padded up to the next
batch bucket (rows that write only the cache's spare slot and are dropped),
and its attention reads each row's blocks up to the next context bucket
(past a row's length, masked): a step at 128 keys reads what a bucket of
256 holds, not every block a table can hold (``max_seq_len``), whatever
``max_seq_len`` is. One graph per (batch, context) pair, captured largest
first into one shared memory pool, as nano-vllm does. The bucket arithmetic
is plain Python; only `DecodeGraphs` needs a GPU.

Warm-up and capture run under ``torch.inference_mode()``, whoever calls
them: with autograd on, a step that writes the KV cache from weights that
require grad makes the cache part of an autograd graph, so every warm-up
pass's activations would stay alive through the cache for the life of the
process (about a GiB per layer per pass at bucket 256 with gather attention).
"""

from __future__ import annotations

from collections.abc import Callable

import torch

__all__ = ["LEAST_CONTEXT", "WARM_UP_PASSES", "DecodeGraphs", "batch_buckets", "context_buckets", "warm_up"]

WARM_UP_PASSES = 2  # before a capture: compile, autotune, allocate workspaces outside the graph
LEAST_CONTEXT = 256  # keys the smallest context bucket holds


def batch_buckets(max_batch: int) -> tuple[int, ...]:
    """1, 2, 4, 8, then every multiple of 16, and ``max_batch`` itself: padding wastes at most 15 rows."""
    if max_batch < 1:
        raise ValueError(f"max_batch must be >= 1, got {max_batch}")
    sizes = {b for b in (1, 2, 4, 8) if b < max_batch} | set(range(16, max_batch, 16)) | {max_batch}
    return tuple(sorted(sizes))


def context_buckets(max_blocks: int, block_size: int) -> tuple[int, ...]:
    """Blocks a fixed-shape step reads per row: `LEAST_CONTEXT` keys' worth, doubling, and ``max_blocks``. A
    step reads at most twice its longest row's keys (or `LEAST_CONTEXT`); 2,048 positions give 4 buckets of
    blocks of 16 (256 to 2,048 keys), 8,192 give 6."""
    if max_blocks < 1 or block_size < 1:
        raise ValueError(f"context buckets need blocks, got {max_blocks} of {block_size} positions")
    sizes, blocks = {max_blocks}, max(1, LEAST_CONTEXT // block_size)
    while blocks < max_blocks:
        sizes.add(blocks)
        blocks *= 2
    return tuple(sorted(sizes))


@torch.inference_mode()
def warm_up(step: Callable[[int, int], None], shapes: tuple[tuple[int, int], ...]) -> None:
    """Run ``step(rows, blocks)`` `WARM_UP_PASSES` times per shape, largest first, with autograd off.

    What `DecodeGraphs` runs before each capture; on its own it runs on any
    device, which is how a CPU test checks that it leaves no autograd state.
    """
    for shape in sorted(shapes, reverse=True):
        for _ in range(WARM_UP_PASSES):
            step(*shape)


class DecodeGraphs:
    """``step(rows, blocks)`` captured once per shape on a CUDA device, replayed by `run`.

    ``step`` must read and write only persistent tensors (its inputs are
    written before `run`, its outputs read after) and make no host wait.
    Build it at start-up, before anything else launches work on the device:
    the capture runs in CUDA's default ("global") capture mode, in which
    another thread's launch or allocation during a capture is an error.
    """

    @torch.inference_mode()
    def __init__(self, step: Callable[[int, int], None], shapes: tuple[tuple[int, int], ...],
                 device: torch.device) -> None:
        if device.type != "cuda":
            raise ValueError(f"CUDA graphs need a CUDA device, got {device}")
        self.shapes = shapes
        self._graphs: dict[tuple[int, int], torch.cuda.CUDAGraph] = {}
        pool = None
        side = torch.cuda.Stream(device)
        side.wait_stream(torch.cuda.current_stream(device))
        with torch.cuda.stream(side):
            for shape in sorted(shapes, reverse=True):  # largest first: the smaller ones fit in its pool
                warm_up(step, (shape,))
                graph = torch.cuda.CUDAGraph()
                with torch.cuda.graph(graph, pool=pool, stream=side):
                    step(*shape)
                pool = graph.pool() if pool is None else pool
                self._graphs[shape] = graph
        torch.cuda.current_stream(device).wait_stream(side)
        torch.cuda.synchronize(device)

    def run(self, rows: int, blocks: int) -> None:
        self._graphs[(rows, blocks)].replay()
