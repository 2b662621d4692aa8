"""Slot, block and queue bookkeeping, without tensors."""

from __future__ import annotations

import pytest

from lyre.engine.block_manager import BlockManager
from lyre.engine.sampling import SamplingParams
from lyre.engine.scheduler import EngineFull, RequestTooLong, Scheduler
from lyre.engine.scheduling_policy import SchedulingPolicy
from lyre.engine.sequence import FinishReason, Request, RequestStatus


def _req(rid: str, prompt: int = 4, max_tokens: int = 8, stop: tuple[int, ...] = ()) -> Request:
    return Request(rid, list(range(prompt)), SamplingParams(max_tokens=max_tokens, stop_ids=stop), seed=0)


def test_admits_in_arrival_order_into_the_lowest_free_slots() -> None:
    s = Scheduler(max_batch=2, max_seq_len=64, max_waiting=8)
    reqs = [_req(f"r{i}") for i in range(3)]
    for r in reqs:
        s.add(r)
    batch = s.schedule()
    assert [c.req.request_id for c in batch.prefill] == ["r0", "r1"] and not batch.decode
    assert [c.req.slot for c in batch.prefill] == [0, 1]
    assert reqs[2].status is RequestStatus.WAITING
    s.ran(batch)
    batch = s.schedule()
    assert not batch.prefill and [r.request_id for r in batch.decode] == ["r0", "r1"]


def test_finishing_frees_the_slot_for_the_next_in_line() -> None:
    s = Scheduler(max_batch=2, max_seq_len=64, max_waiting=8)
    reqs = [_req(f"r{i}") for i in range(3)]
    for r in reqs:
        s.add(r)
    s.ran(s.schedule())
    s.finish(reqs[1], FinishReason.ABORT)
    assert s.free_slots == 1 and reqs[1].finish_reason is FinishReason.ABORT
    batch = s.schedule()
    assert [c.req for c in batch.prefill] == [reqs[2]] and reqs[2].slot == 1
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


# ---- playback deadlines -------------------------------------------------------

PACE = 0.1  # seconds of playback per token, round for hand arithmetic


def _stream(rid: str, deadline: float | None, pace: float | None = PACE) -> Request:
    req = _req(rid, max_tokens=100)
    req.pace, req.deadline = pace, deadline
    return req


def _resident(s: Scheduler, *reqs: Request, now: float = 0.0) -> None:
    for r in reqs:
        s.add(r)
    batch = s.schedule(now)
    assert len(batch.prefill) == len(reqs)
    s.ran(batch)


def _ids(batch: list[Request]) -> list[str]:
    return [r.request_id for r in batch]


def test_first_audio_first_then_least_slack_then_requests_nobody_plays_live() -> None:
    s = Scheduler(max_batch=8, max_seq_len=256, max_waiting=8, policy=SchedulingPolicy(park_above_s=50.0,
                                                                                       unpark_below_s=10.0))
    file, loose, tight, fresh = (_stream("file", None, pace=None), _stream("loose", 9.0), _stream("tight", 1.5),
                                 _stream("fresh", None))
    _resident(s, file, loose, tight, fresh)
    assert _ids(s.schedule(now=1.0).decode) == ["fresh", "tight", "loose", "file"]
    # Time passes: "tight" is behind its listener now, and still first among the streams.
    assert _ids(s.schedule(now=3.0).decode) == ["fresh", "tight", "loose", "file"]
    assert s.behind == 1 and s.deadline_misses == 1
    assert sorted(s.slacks) == [-1.5, 6.0]
    # It finishes: an engine that goes idle now must not keep reporting a stream behind (and refusing work).
    s.finish(tight, FinishReason.STOP)
    assert s.behind == 0 and s.deadline_misses == 1


def test_the_compute_batch_takes_the_most_pressing_of_the_resident_streams() -> None:
    s = Scheduler(max_batch=6, max_seq_len=256, max_waiting=8,
                  policy=SchedulingPolicy(compute_batch=2, park_above_s=50.0, unpark_below_s=10.0))
    reqs = [_stream(f"s{i}", deadline) for i, deadline in enumerate([4.0, 1.0, 3.0, 2.0])]
    _resident(s, *reqs)
    assert len(s.running) == 4
    assert _ids(s.schedule(now=0.0).decode) == ["s1", "s3"]
    # Advanced streams gain slack with each token; the ones left out move up.
    for req in reqs[1], reqs[3]:
        for _ in range(30):
            s.append_token(req, 7)
    assert _ids(s.schedule(now=0.0).decode) == ["s2", "s0"]


def test_a_stream_far_ahead_is_parked_until_it_falls_below_the_low_mark() -> None:
    s = Scheduler(max_batch=2, max_seq_len=256, max_waiting=8,
                  policy=SchedulingPolicy(park_above_s=2.0, unpark_below_s=1.0))
    ahead, other = _stream("ahead", 2.5), _stream("other", 0.5)
    _resident(s, ahead, other)
    assert _ids(s.schedule(now=0.0).decode) == ["other"] and ahead.parked and s.parked == 1
    assert _ids(s.schedule(now=1.0).decode) == ["other"]  # slack 1.5: between the marks, still parked
    assert _ids(s.schedule(now=1.6).decode) == ["other", "ahead"] and not ahead.parked  # slack 0.9
    for _ in range(20):  # two more seconds of audio made: above the high mark again
        s.append_token(ahead, 7)
    assert _ids(s.schedule(now=1.6).decode) == ["other"] and ahead.parked


def test_playback_start_sets_the_deadline_from_the_tokens_the_listener_will_hear() -> None:
    s = Scheduler(max_batch=1, max_seq_len=256, max_waiting=8)
    req = _stream("r", None)
    _resident(s, req)
    for _ in range(12):
        s.append_token(req, 7)
    assert req.deadline is None  # nobody is listening yet: no deadline, only first-audio priority
    s.start_playback(req, at=100.0, skipped_tokens=2)
    assert req.deadline == pytest.approx(100.0 + 10 * PACE)
    s.append_token(req, 7)
    assert req.deadline == pytest.approx(100.0 + 11 * PACE)


def test_fcfs_advances_every_resident_request_in_admission_order() -> None:
    s = Scheduler(max_batch=4, max_seq_len=256, max_waiting=8, policy=SchedulingPolicy("fcfs"))
    reqs = [_stream("a", 9.0), _stream("b", 0.1), _stream("c", 50.0)]
    _resident(s, *reqs)
    assert _ids(s.schedule(now=0.0).decode) == ["a", "b", "c"] and s.parked == 0
    assert _ids(s.schedule(now=1.0).decode) == ["a", "b", "c"]
    assert s.behind == 1 and s.deadline_misses == 1  # it still keeps count, to compare


def test_parking_counts_only_the_slack_past_what_the_consumer_holds_in_flight() -> None:
    s = Scheduler(max_batch=2, max_seq_len=256, max_waiting=8,
                  policy=SchedulingPolicy(park_above_s=2.0, unpark_below_s=1.0))
    held, bare = _stream("held", 3.0), _stream("bare", 2.5)
    held.lag_s = 1.5  # up to 1.5 s of its tokens may still be waiting to be decoded
    _resident(s, held, bare)
    assert _ids(s.schedule(now=0.0).decode) == ["held"] and bare.parked and not held.parked
    assert sorted(s.slacks) == [2.5, 3.0] and s.behind == 0


@pytest.mark.parametrize("policy", [dict(kind="lifo"), dict(compute_batch=0), dict(park_above_s=1.0,
                                                                                   unpark_below_s=1.0)])
def test_bad_policies_are_refused(policy: dict) -> None:
    with pytest.raises(ValueError):
        SchedulingPolicy(**policy)


def test_with_every_stream_parked_the_engine_knows_how_long_to_sleep() -> None:
    s = Scheduler(max_batch=2, max_seq_len=256, max_waiting=8,
                  policy=SchedulingPolicy(park_above_s=2.0, unpark_below_s=1.0))
    a, b = _stream("a", 5.0), _stream("b", 4.0)
    b.lag_s = 0.5
    _resident(s, a, b)
    assert s.idle_for(now=0.0) is None  # nothing parked yet
    assert not s.schedule(now=0.0).decode and s.parked == 2
    assert s.idle_for(now=0.0) == pytest.approx(2.5)  # b: 4.0 - 0.5 - 1.0
    s.add(_req("new"))  # no free row for it until a resident stream ends, which needs a step
    assert not s.schedule(now=0.0) and s.idle_for(now=0.0) == pytest.approx(2.5)


def test_with_every_stream_parked_and_the_queue_waiting_for_blocks_the_engine_sleeps() -> None:
    # Two streams far ahead of their listeners hold every block; the queue's head needs more. Nothing a
    # step could do changes that before a parked stream is due back (an abort or a new request wakes the
    # engine sooner): the engine must sleep, not retake its lock in a loop.
    s = Scheduler(max_batch=4, max_seq_len=128, max_waiting=8, blocks=BlockManager(9, 16),
                  policy=SchedulingPolicy(park_above_s=2.0, unpark_below_s=1.0))
    a, b = _req("a", prompt=60, max_tokens=60), _req("b", prompt=60, max_tokens=60)
    a.pace, a.deadline, b.pace, b.deadline = PACE, 5.0, PACE, 4.0
    _resident(s, a, b)  # four blocks each: one of the nine left
    s.add(_req("head", prompt=20))
    assert not s.schedule(now=0.0) and s.parked == 2 and len(s.waiting) == 1
    assert s.idle_for(now=0.0) == pytest.approx(3.0)  # b: 4.0 - 1.0


# ---- the KV cache's blocks: chunks, admission, preemption -------------------------------------------


def _chunks(batch: list) -> list[tuple[str, int, int]]:  # type: ignore[type-arg]
    return [(c.req.request_id, c.start, c.end) for c in batch]


def test_a_long_prompt_is_prefilled_in_chunks_beside_the_decode_rows() -> None:
    s = Scheduler(max_batch=4, max_seq_len=256, max_waiting=8, step_tokens=20)
    short = _req("short", prompt=5)
    _resident(s, short)
    s.append_token(short, 7)
    s.add(_req("long", prompt=50))
    batch = s.schedule(0.0)
    assert _ids(batch.decode) == ["short"] and _chunks(batch.prefill) == [("long", 0, 19)]  # 20 less one decode row
    assert not batch.prefill[0].final and batch.sampled == [short]
    s.ran(batch)
    s.append_token(short, 7)
    batch = s.schedule(0.0)
    assert _chunks(batch.prefill) == [("long", 19, 38)]
    s.ran(batch)
    s.append_token(short, 7)
    batch = s.schedule(0.0)
    assert _chunks(batch.prefill) == [("long", 38, 50)] and batch.prefill[0].final
    assert [r.request_id for r in batch.sampled] == ["long", "short"]
    s.ran(batch)
    assert not s.running["long"].prefilling


def test_a_request_waits_for_blocks_and_nobody_jumps_the_queue() -> None:
    s = Scheduler(max_batch=4, max_seq_len=16, max_waiting=8, blocks=BlockManager(6, 4))
    big, small = _req("big", prompt=12, max_tokens=4), _req("small", prompt=2, max_tokens=4)
    _resident(s, big)  # 3 blocks
    other = _req("also-big", prompt=12, max_tokens=4)
    other.prompt_ids = [t + 50 for t in other.prompt_ids]  # not big's prefix
    s.add(other)
    s.add(small)
    batch = s.schedule(0.0)
    assert not batch.prefill and len(s.waiting) == 2  # 3 free, less the watermark: not enough for 12 tokens
    s.finish(big, FinishReason.STOP)
    assert _chunks(s.schedule(0.0).prefill) == [("also-big", 0, 12), ("small", 0, 2)]


def test_a_dry_pool_preempts_the_request_that_can_best_wait_and_it_resumes_with_its_tokens() -> None:
    s = Scheduler(max_batch=4, max_seq_len=16, max_waiting=8, blocks=BlockManager(4, 4),
                  policy=SchedulingPolicy(park_above_s=50.0, unpark_below_s=10.0))
    playing, file = _req("playing", max_tokens=10), _req("file", max_tokens=10)
    playing.pace, playing.deadline = PACE, 1.0
    file.prompt_ids = [t + 50 for t in file.prompt_ids]
    _resident(s, playing, file)  # 1 block each
    for req in playing, file:
        s.append_token(req, 7)  # 5 tokens each: the next key needs a second block
    batch = s.schedule(0.0)
    s.ran(batch)
    assert _ids(batch.decode) == ["playing", "file"] and s.blocks.free == 0
    for _ in range(4):
        s.append_token(playing, 7)
        s.append_token(file, 8)
    batch = s.schedule(0.0)  # both need a third block; one is left for both: the file gives way
    assert _ids(batch.decode) == ["playing"] and s.preemptions == 1 and file.preemptions == 1
    assert file.status is RequestStatus.WAITING and file.slot is None and file.kv is None
    assert list(s.waiting) == [file]
    s.ran(batch)
    s.finish(playing, FinishReason.STOP)
    batch = s.schedule(0.0)
    # Its prompt and the 5 it made, less its first block, still cached from before.
    assert _chunks(batch.prefill) == [("file", 4, 9)] and batch.prefill[0].first
    assert file.tokens == list(range(50, 54)) + [7] + [8] * 4


def test_a_pool_too_small_for_one_request_or_a_budget_with_no_room_for_prompts_is_refused() -> None:
    with pytest.raises(ValueError, match="cannot hold one request of max_seq_len 64"):
        Scheduler(max_batch=2, max_seq_len=64, max_waiting=8, blocks=BlockManager(3, 16))
    with pytest.raises(ValueError, match="step_tokens"):
        Scheduler(max_batch=8, max_seq_len=64, max_waiting=8, step_tokens=8)
