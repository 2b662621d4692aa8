"""torch's intra-op threads per worker thread: how the engine's and the codec's share a CPU.

The engine's thread and the codec's each run torch ops. On a CPU, left alone, each asks for every core, so on
two cores four compute threads fight over two, and every engine step is slower while the codec decodes
(docs/benchmarks.md, "Listener": generation 37-53 ms a frame with both at 2 threads, 26-29 ms with one each,
the codec's cost per frame unchanged). `split_cores` gives each its own share, and `use_threads` sets it in
the thread that calls it, leaving every other thread's count (and the one new threads start with) as it was.
On a GPU neither thread computes on the CPU much; nothing is split there.
"""

from __future__ import annotations

import os
import threading

import torch

__all__ = ["split_cores", "threads_apart", "use_threads"]


def split_cores(cores: int) -> tuple[int, int]:
    """(engine threads, codec threads) for ``cores`` CPU threads: half each, the engine the smaller half, at
    least one each (one core: both share it)."""
    if cores < 1:
        raise ValueError(f"cores must be >= 1, got {cores}")
    engine = max(1, cores // 2)
    return engine, max(1, cores - engine)


def threads_apart(engine: int | None, codec: int | None) -> bool:
    """Whether the engine's and the codec's threads (as set with `use_threads`) fit the cores this process may
    run on side by side, so that neither slows the other."""
    return engine is not None and codec is not None and engine + codec <= len(os.sched_getaffinity(0))


def use_threads(threads: int | None) -> None:
    """Run this thread's torch ops on ``threads`` intra-op threads from now on (None: leave it as it is).

    torch keeps one count per thread, taken from a process-wide default when the thread first asks; setting
    it sets both. So this thread takes its count first, sets its own, and a helper thread puts the default
    back for the threads that have not asked yet."""
    if threads is None:
        return
    if threads < 1:
        raise ValueError(f"threads must be >= 1, got {threads}")
    before = torch.get_num_threads()  # this thread's count is now its own
    if threads == before:
        return
    torch.set_num_threads(threads)
    restore = threading.Thread(target=torch.set_num_threads, args=(before,), name="lyre-threads-default")
    restore.start()
    restore.join()
