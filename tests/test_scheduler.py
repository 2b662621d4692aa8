"""Slot and queue bookkeeping, without tensors."""

from __future__ import annotations

import pytest

from lyre.engine.sampling import SamplingParams
from lyre.engine.scheduler import EngineFull, RequestTooLong, Scheduler
from lyre.engine.sequence import FinishReason, Request, RequestStatus


def _req(rid: str, prompt: int = 4, max_tokens: int = 8, stop: tuple[int, ...] = ()) -> Request:
    return Request(rid, list(range(prompt)), SamplingParams(max_tokens=max_tokens, stop_ids=stop), seed=0)


def test_admits_in_arrival_order_into_the_lowest_free_slots() -> None:
    s = Scheduler(max_batch=2, max_seq_len=64, max_waiting=8)
    reqs = [_req(f"r{i}") for i in range(3)]
    for r in reqs:
        s.add(r)
    batch = s.schedule()
    assert [r.request_id for r in batch.prefill] == ["r0", "r1"] and not batch.decode
    assert [r.slot for r in batch.prefill] == [0, 1]
    assert reqs[2].status is RequestStatus.WAITING
    batch = s.schedule()
    assert not batch.prefill and [r.request_id for r in batch.decode] == ["r0", "r1"]


def test_finishing_frees_the_slot_for_the_next_in_line() -> None:
    s = Scheduler(max_batch=2, max_seq_len=64, max_waiting=8)
    reqs = [_req(f"r{i}") for i in range(3)]
    for r in reqs:
        s.add(r)
    s.schedule()
    s.finish(reqs[1], FinishReason.ABORT)
    assert s.free_slots == 1 and reqs[1].finish_reason is FinishReason.ABORT
    batch = s.schedule()
    assert batch.prefill == [reqs[2]] and reqs[2].slot == 1
    assert batch.decode == [reqs[0]]


def test_stop_and_length_end_a_request() -> None:
    s = Scheduler(max_batch=2, max_seq_len=64, max_waiting=8)
    by_stop, by_length = _req("a", stop=(99,)), _req("b", max_tokens=2)
    s.add(by_stop)
    s.add(by_length)
    s.schedule()
    assert not s.append_token(by_stop, 5)
    assert s.append_token(by_stop, 99)
    assert by_stop.output_ids == [5] and by_stop.finish_reason is FinishReason.STOP  # stop id not kept
    assert not s.append_token(by_length, 1)
    assert s.append_token(by_length, 2)
    assert by_length.finish_reason is FinishReason.LENGTH
    assert s.free_slots == 2 and not s.running


def test_aborting_a_waiting_request_removes_it_from_the_queue() -> None:
    s = Scheduler(max_batch=1, max_seq_len=64, max_waiting=8)
    a, b = _req("a"), _req("b")
    s.add(a)
    s.add(b)
    s.schedule()
    s.finish(b, FinishReason.ABORT)
    assert not s.waiting and s.find("b") is None and s.find("a") is a
    s.finish(b, FinishReason.ABORT)  # ending twice is harmless
    assert s.free_slots == 0


def test_refuses_what_can_never_fit_and_what_the_queue_cannot_hold() -> None:
    s = Scheduler(max_batch=1, max_seq_len=16, max_waiting=1)
    with pytest.raises(RequestTooLong, match="4 prompt \\+ 13 max_tokens = 17"):
        s.add(_req("long", prompt=4, max_tokens=13))
    s.add(_req("fits", prompt=4, max_tokens=12))
    with pytest.raises(EngineFull):
        s.add(_req("more"))
    with pytest.raises(ValueError, match="already in use"):
        s.add(_req("fits"))
