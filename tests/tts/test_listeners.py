"""Admission by the listeners (lyre.tts.listeners): a listener run dry lately, and the measured rates' load."""

from __future__ import annotations

import gc
import time

import pytest

from lyre.orpheus import FRAME_SECONDS, TOKENS_PER_SECOND
from lyre.tts.clock import PlaybackClock
from lyre.tts.listeners import RECENT_S, Listeners


def test_the_load_adds_the_codecs_share_and_the_engines() -> None:
    listeners = Listeners()
    codec = 2 / FRAME_SECONDS * 0.025  # two streams' frames, each decoded once
    engine = TOKENS_PER_SECOND * 0.006  # steps a second at 6 ms a step
    assert listeners.load(2, 1.0, 0.006, 0.025) == pytest.approx(codec + engine)
    assert listeners.load(2, 0.5, 0.006, 0.025) == pytest.approx((codec + engine) / 2)


def test_a_lone_stream_is_always_admitted_and_a_second_only_within_the_rates() -> None:
    listeners = Listeners()
    running, new = PlaybackClock(), PlaybackClock()
    listeners.add(running)
    assert listeners.refuse(1.0, 1.0, 1.0) is None  # alone: however slow the device
    listeners.add(new)
    assert listeners.refuse(1.0, 0.001, 0.001) is None
    why = listeners.refuse(1.0, 0.006, 0.025)  # 2 x 0.29 + 0.49 of the device
    assert why is not None and "108% of the device" in why
    listeners.discard(new)
    assert len(listeners) == 1 and listeners.refuse(1.0, 0.006, 0.025) is None


def test_a_listener_run_dry_lately_refuses_new_streams_until_it_is_old_news() -> None:
    listeners = Listeners()
    starved, new = PlaybackClock(), PlaybackClock()
    now = time.monotonic()
    starved.start(now - 1.0)
    starved.send(2048, at=now - 1.0)
    starved.send(2048, at=now)  # ran dry for 0.915 s, ending now
    listeners.add(starved)
    listeners.add(new)
    why = listeners.refuse(1.0, 0.0, 0.0)  # rates that would admit it
    assert why is not None and "1 of its 1 streams ran dry" in why
    assert listeners.starving(now=now + RECENT_S / 2) == 1
    assert listeners.starving(now=now + RECENT_S) == 0


def test_a_stream_dropped_without_closing_leaves_with_its_clock() -> None:
    listeners = Listeners()
    listeners.add(PlaybackClock())
    gc.collect()
    assert len(listeners) == 0


def test_with_cores_of_their_own_the_larger_share_counts() -> None:
    listeners = Listeners()
    codec = 2 / FRAME_SECONDS * 0.025
    engine = TOKENS_PER_SECOND * 0.006
    assert listeners.load(2, 1.0, 0.006, 0.025, apart=True) == pytest.approx(max(codec, engine))
    running, new = PlaybackClock(), PlaybackClock()
    listeners.add(running)
    listeners.add(new)
    assert listeners.refuse(1.0, 0.006, 0.025, apart=True) is None  # 0.59 of the codec's cores
    why = listeners.refuse(1.0, 0.006, 0.045, apart=True)  # 2 x 0.53 of them
    assert why is not None and "105% of the device" in why


def test_threads_are_apart_only_when_both_are_set_and_fit_the_cores() -> None:
    import os

    from lyre.common.threads import threads_apart

    cores = len(os.sched_getaffinity(0))
    assert threads_apart(1, max(1, cores - 1)) is (cores >= 2)
    assert not threads_apart(cores, 1) and not threads_apart(None, 1) and not threads_apart(1, None)


def test_a_codec_whose_calls_grow_with_their_frames_is_shared_by_every_live_listener() -> None:
    from types import SimpleNamespace

    from lyre.tts.deadlines import GenerationPace, ListenerDeadlines

    def rates(listeners: int, serial: bool):
        ctx = SimpleNamespace(listeners=Listeners(), codec=SimpleNamespace(
            serial=serial, recent_seconds_per_frame=0.025,
            recent_wait_s=0.01), engine=SimpleNamespace(stats=lambda: SimpleNamespace(
                recent_step_seconds=0.004, step_seconds=1.0, steps=10)))
        clocks = [PlaybackClock() for _ in range(listeners)]
        for clock in clocks:
            ctx.listeners.add(clock)
        return ListenerDeadlines(ctx, clocks[0], streamed=True).rates(GenerationPace())

    one, two, batched = rates(1, True), rates(2, True), rates(2, False)
    assert (one.decode_s, two.decode_s, batched.decode_s) == pytest.approx((0.025, 0.05, 0.025))
    assert one.generate_s == pytest.approx(7 * 0.004) and one.wait_s == 0.01
