"""Waiting for a condition with a deadline, instead of sleeping a fixed time and hoping."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable


def eventually(condition: Callable[[], bool], timeout: float = 5.0, interval: float = 0.02) -> bool:
    """True as soon as ``condition()`` holds; False if it still does not after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(interval)
    return True


async def eventually_async(condition: Callable[[], bool], timeout: float = 5.0, interval: float = 0.02) -> bool:
    """`eventually` for a test running on an event loop: the loop keeps running while it waits."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(interval)
    return True
