"""Admission's queue (lyre.server.admission): a request not marked live waits for room, a live one is refused;
both wait for a free slot; the line is bounded in length and time, and leaves nothing behind."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack

import pytest

from lyre.server import admission as admission_module
from lyre.server.admission import Admission, Overloaded
from polling import eventually_async


class Rates:
    """What ``overloaded()`` answers, and how often it was asked."""

    def __init__(self, why: bool | str = False) -> None:
        self.why = why
        self.asked = 0

    def __call__(self) -> bool | str:
        self.asked += 1
        return self.why


def _run(main: Callable[[], Awaitable[None]]) -> None:
    asyncio.run(asyncio.wait_for(main(), 30))  # a guard against a hang, not a timing


def _hold(admission: Admission, exits: AsyncExitStack, overloaded: Rates | None = None,
          live: bool = True) -> asyncio.Task[float]:
    """A task that takes a slot and keeps it in ``exits`` (its result: the seconds it waited)."""
    return asyncio.ensure_future(exits.enter_async_context(admission.slot(overloaded, live=live)))


def test_a_request_not_marked_live_waits_for_room_instead_of_being_refused() -> None:
    async def main() -> None:
        admission, rates = Admission(max_active=4, max_queue=4, timeout_s=60), Rates("one more would not fit")
        with pytest.raises(Overloaded, match="one more would not fit"):
            async with admission.slot(rates):  # live (the default): refused at once
                pass
        async with AsyncExitStack() as exits:
            waiting = _hold(admission, exits, rates, live=False)
            assert await eventually_async(lambda: admission.queued == 1 and rates.asked >= 3)  # re-asked
            assert admission.active == 0 and not waiting.done()
            rates.why = False  # rates change with no stream ending: the periodic re-check admits it
            await waiting
            assert (admission.active, admission.queued) == (1, 0)
        assert (admission.active, admission.queued) == (0, 0)
    _run(main)


def test_a_stream_that_ends_admits_the_next_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(admission_module, "RECHECK_S", 3600.0)  # only a release can admit it

    async def main() -> None:
        admission, rates = Admission(max_active=1, max_queue=4, timeout_s=7200), Rates()
        first = AsyncExitStack()
        await _hold(admission, first)
        async with AsyncExitStack() as exits:
            waiting = _hold(admission, exits, rates, live=False)
            assert await eventually_async(lambda: admission.queued == 1)
            await first.aclose()
            await waiting
            assert (admission.active, admission.queued) == (1, 0)
        assert admission.active == 0
    _run(main)


def test_waiters_are_admitted_in_order_and_the_head_the_rates_refuse_holds_the_rest() -> None:
    async def main() -> None:
        admission, rates = Admission(max_active=4, max_queue=4, timeout_s=60), Rates(True)
        order: list[int] = []
        async with AsyncExitStack() as exits:
            async def take(i: int, overloaded: Rates | None, live: bool) -> None:
                await exits.enter_async_context(admission.slot(overloaded, live=live))
                order.append(i)
            tasks = [asyncio.ensure_future(take(0, rates, False))]
            assert await eventually_async(lambda: admission.queued == 1)
            tasks += [asyncio.ensure_future(take(i, Rates(), i == 2)) for i in (1, 2, 3)]
            assert await eventually_async(lambda: admission.queued == 4)
            assert order == []  # a free slot, but the head does not fit yet: those behind wait too
            rates.why = False
            await asyncio.gather(*tasks)
            assert order == [0, 1, 2, 3] and admission.active == 4
    _run(main)


def test_a_full_queue_and_a_wait_too_long_are_refused_naming_which() -> None:
    async def main() -> None:
        admission = Admission(max_active=1, max_queue=1, timeout_s=0.2)
        async with AsyncExitStack() as exits:
            await _hold(admission, exits)
            waiting = _hold(admission, exits, Rates(), live=False)
            assert await eventually_async(lambda: admission.queued == 1)
            with pytest.raises(Overloaded, match="its queue is full") as full:
                async with admission.slot(Rates(), live=False):
                    pass
            assert full.value.retry_after_s == 1
            with pytest.raises(Overloaded, match="in the queue for a free stream") as late:
                await waiting
            assert late.value.retry_after_s == 2 and (admission.active, admission.queued) == (1, 0)
        rates = Rates("2 of its 3 streams ran dry")
        with pytest.raises(Overloaded, match=r"for room at the measured rates \(2 of its 3 streams ran dry\)"):
            async with admission.slot(rates, live=False):
                pass
        assert (admission.active, admission.queued) == (0, 0)
    _run(main)


def test_a_waiter_cancelled_leaves_the_line_and_one_granted_as_it_leaves_passes_the_slot_on() -> None:
    async def main() -> None:
        admission = Admission(max_active=1, max_queue=4, timeout_s=60)
        first = AsyncExitStack()
        await _hold(admission, first)
        async with AsyncExitStack() as exits:
            gone = _hold(admission, exits, Rates(True), live=False)
            assert await eventually_async(lambda: admission.queued == 1)
            gone.cancel()  # its client left
            with pytest.raises(asyncio.CancelledError):
                await gone
            assert (admission.active, admission.queued) == (1, 0)
            granted = _hold(admission, exits, Rates(), live=False)
            after = _hold(admission, exits, Rates(), live=False)
            assert await eventually_async(lambda: admission.queued == 2)
            await first.aclose()  # grants `granted` its slot...
            granted.cancel()  # ...which it gives up before it runs again: `after` gets it
            with pytest.raises(asyncio.CancelledError):
                await granted
            await after
            assert (admission.active, admission.queued) == (1, 0)
        assert (admission.active, admission.queued) == (0, 0)
    _run(main)
