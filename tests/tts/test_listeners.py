"""Admission by the listeners (lyre.tts.listeners): a listener run dry lately, and the measured rates' load."""

from __future__ import annotations

import gc
import time

import pytest

from lyre.orpheus import FRAME_SECONDS, TOKENS_PER_SECOND
from lyre.tts.clock import PlaybackClock
from lyre.tts.listeners import RECENT_S, Listeners
from lyre.tts.windows import WindowPolicy

WINDOW = WindowPolicy()  # 8 new frames a window at most, 3 of context


def test_the_load_adds_the_codecs_share_and_the_engines() -> None:
    listeners = Listeners()
    codec = 2 / FRAME_SECONDS * 11 / 8 * 0.025  # two streams' frames, each window of 8 decoding 11
    engine = TOKENS_PER_SECOND * 0.006  # steps a second at 6 ms a step
    assert listeners.load(2, 1.0, 0.006, 0.025, WINDOW) == pytest.approx(codec + engine)
    assert listeners.load(2, 0.5, 0.006, 0.025, WINDOW) == pytest.approx((codec + engine) / 2)


def test_a_lone_stream_is_always_admitted_and_a_second_only_within_the_rates() -> None:
    listeners = Listeners()
    running, new = PlaybackClock(), PlaybackClock()
    listeners.add(running)
    assert listeners.refuse(1.0, 1.0, 1.0, WINDOW) is None  # alone: however slow the device
    listeners.add(new)
    assert listeners.refuse(1.0, 0.001, 0.001, WINDOW) is None
    why = listeners.refuse(1.0, 0.006, 0.025, WINDOW)  # 2 x 0.40 + 0.49 of the device
    assert why is not None and "130% of the device" in why
    listeners.discard(new)
    assert len(listeners) == 1 and listeners.refuse(1.0, 0.006, 0.025, WINDOW) is None


def test_a_listener_run_dry_lately_refuses_new_streams_until_it_is_old_news() -> None:
    listeners = Listeners()
    starved, new = PlaybackClock(), PlaybackClock()
    now = time.monotonic()
    starved.start(now - 1.0)
    starved.send(2048, at=now - 1.0)
    starved.send(2048, at=now)  # ran dry for 0.915 s, ending now
    listeners.add(starved)
    listeners.add(new)
    why = listeners.refuse(1.0, 0.0, 0.0, WINDOW)  # rates that would admit it
    assert why is not None and "1 of its 1 streams ran dry" in why
    assert listeners.starving(now=now + RECENT_S / 2) == 1
    assert listeners.starving(now=now + RECENT_S) == 0


def test_a_stream_dropped_without_closing_leaves_with_its_clock() -> None:
    listeners = Listeners()
    listeners.add(PlaybackClock())
    gc.collect()
    assert len(listeners) == 0
