"""One HTTP speech request's admission: a live one refused at once, any other waiting its turn (lyre.server.admission).

A request waiting in the queue must not count as a listener (lyre.tts.listeners): every stream's listener
counts from its creation, and ten waiters would each be judged against the streams running *and* the nine
others, so none would ever fit. Its listener leaves while it waits and is counted again only while the rates
are asked whether it fits, and for good once it does. A client that goes away while it waits leaves the line.
"""

from __future__ import annotations

import asyncio
from contextlib import AsyncExitStack
from typing import Any

from fastapi import Request

from lyre.server.admission import Check
from lyre.server.state import ServerState
from lyre.tts import Synthesizer

__all__ = ["admit_speech"]


async def admit_speech(state: ServerState, tts: Synthesizer, stream: Any, request: Request, live: bool,
                       exits: AsyncExitStack) -> float | None:
    """Seconds waited for a stream slot, the slot then held in ``exits``; None when the client left while it
    waited (nothing held). Overloaded (429) as `Admission.slot` refuses.

    The slot is asked for on this task, so the rates are asked in the same step the stream was made (on a
    task of its own, requests arriving together would all be made, and counted, before any was asked about).
    A client leaving cancels the wait, as `asyncio.timeout` cancels what it bounds."""
    overloaded: Check = tts.overloaded
    if not live:
        stream.leave()
        overloaded = _joining(tts, stream)
    task = asyncio.current_task()
    assert task is not None
    waiting = True

    def client_left(gone: asyncio.Future[None]) -> None:
        if waiting and not gone.cancelled() and gone.exception() is None:
            task.cancel()

    left = asyncio.ensure_future(_disconnected(request))
    left.add_done_callback(client_left)
    try:
        client = request.client.host if request.client else None
        return await exits.enter_async_context(state.admission.slot(overloaded, live=live, client=client))
    except asyncio.CancelledError:
        if left.done() and not left.cancelled() and left.exception() is None and task.uncancel() == 0:
            return None  # the wait was cancelled for the client's leaving alone
        raise
    finally:
        waiting = False
        left.cancel()


def _joining(tts: Synthesizer, stream: Any) -> Check:
    """``tts.overloaded`` with this stream's listener counted; it stays counted only when it fits."""
    def overloaded() -> bool | str:
        stream.join()
        why = tts.overloaded()
        if why:
            stream.leave()
        return why
    return overloaded


async def _disconnected(request: Request) -> None:
    """Returns when the client goes away (the body is already read, so nothing else arrives)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass
