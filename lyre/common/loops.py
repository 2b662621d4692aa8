"""Handing results from a worker thread to the asyncio event loops waiting for them.

The engine, the codec service and the transcriber each run on a thread of
their own and finish work for callers on one or more event loops. Waking a
loop costs a system call, so a batch of results goes to each loop in one
thread-safe call, never one per result.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

__all__ = ["call_soon_per_loop", "settle_futures"]

T = TypeVar("T")


def call_soon_per_loop(items: Iterable[tuple[asyncio.AbstractEventLoop, T]],
                       handler: Callable[[list[T]], None]) -> None:
    """Run ``handler(items of that loop)`` on each loop, once per loop. Thread-safe.

    A loop that has closed has nobody left waiting: its items are dropped.
    """
    by_loop: dict[asyncio.AbstractEventLoop, list[T]] = {}
    for loop, item in items:
        by_loop.setdefault(loop, []).append(item)
    for loop, batch in by_loop.items():
        try:
            loop.call_soon_threadsafe(handler, batch)
        except RuntimeError:  # the loop is closed
            pass


def settle_futures(outcomes: Iterable[tuple[asyncio.AbstractEventLoop, asyncio.Future[Any], object]]) -> None:
    """Set each future's result (an exception when the outcome is one) on its own loop. Thread-safe.

    A future already done (its caller was cancelled) is left alone.
    """
    call_soon_per_loop(((loop, (future, outcome)) for loop, future, outcome in outcomes), _settle)


def _settle(items: list[tuple[asyncio.Future[Any], object]]) -> None:
    for future, outcome in items:
        if future.done():
            continue
        if isinstance(outcome, BaseException):
            future.set_exception(outcome)
        else:
            future.set_result(outcome)
