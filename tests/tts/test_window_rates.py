"""The window planner's rule with measured rates (lyre.tts.windows): the first chunk and the widths, by hand."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lyre.orpheus import FRAME_SECONDS
from lyre.tts.windows import Rates, WindowPlanner, WindowPolicy

CPU = Rates(play_s=FRAME_SECONDS, generate_s=0.05, decode_s=0.04)  # a codec slower than a frame plays
GPU = Rates(play_s=FRAME_SECONDS, generate_s=0.02, decode_s=0.001, wait_s=0.01)


def _planner(frames: int) -> WindowPlanner:
    planner = WindowPlanner(WindowPolicy())
    for i in range(frames):
        planner.push((i,) * 7)
    return planner


def test_the_first_chunk_and_the_steady_width_follow_the_measured_costs() -> None:
    planner = _planner(0)
    # steady: max(n 0.05, (n + 3) 0.04) <= n 0.0853 first holds at n = 3 (0.24 <= 0.256);
    # first: max(0, 3 x 0.05 - (n + 2) 0.04) + 6 x 0.04 + 0.03 <= n 0.0853 first holds at n = 4 (0.27 <= 0.341).
    assert (planner.steady_frames(CPU), planner.first_frames(CPU)) == (3, 4)
    assert (planner.steady_frames(GPU), planner.first_frames(GPU)) == (1, 1)
    nothing = Rates(play_s=FRAME_SECONDS, generate_s=0.0, decode_s=0.0)  # before anything was measured
    assert (planner.steady_frames(nothing), planner.first_frames(nothing)) == (1, 1)
    hopeless = Rates(play_s=FRAME_SECONDS, generate_s=0.2, decode_s=0.2)
    assert planner.first_frames(hopeless) == planner.steady_frames(hopeless) == 8  # max_new


def test_the_first_window_waits_for_its_frames_then_later_ones_wait_while_the_buffer_covers_them() -> None:
    planner = _planner(5)  # 3 frames with their right context: one short of the first chunk's 4
    assert planner.next_window(0.0, CPU) is None and planner.frames_wanted(0.0, CPU) == 1
    planner.push((5,) * 7)
    first = planner.next_window(0.0, CPU)
    assert first is not None and first.keep == (0, 4) and first.n_frames == 6
    for i in range(6, 8):
        planner.push((i,) * 7)  # 2 ready now
    # 0.341 s buffered: one more frame (0.05) and a 3-new window's decode (6 x 0.04) leave 0.021 s: wait.
    assert planner.next_window(0.341, CPU) is None
    assert planner.patience(0.341, CPU) == pytest.approx(0.021)
    assert planner.frames_wanted(0.341, CPU) == 6  # towards a full window
    window = planner.next_window(0.3, CPU)  # no longer: decode the 2 ready frames
    assert window is not None and window.keep == (1, 3) and window.start_frame == 3


def test_a_decoded_window_is_the_widest_that_is_ready_before_the_listener_runs_dry() -> None:
    planner = _planner(6)
    assert planner.next_window(0.0, CPU) is not None  # frames 0-3
    for i in range(6, 14):
        planner.push((i,) * 7)  # 8 ready: a full window, but 11 x 0.04 s is more than the buffer
    window = planner.next_window(0.3, CPU)
    assert window is not None and window.keep[1] - window.keep[0] == 3  # 6 x 0.04 + 0.03 <= 0.3
    window = planner.next_window(10.0, CPU)  # far ahead: the rest, 5 frames, are ready but not 8: wait
    assert window is None
    assert [w.keep[1] - w.keep[0] for w in planner.finish()] == [7]


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 60), st.lists(st.floats(0.0, 2.0), min_size=1, max_size=8),
       st.floats(0.0, 0.2), st.floats(0.0, 0.2))
def test_every_frame_goes_out_exactly_once_in_order_whatever_the_rates(
        n: int, aheads: list[float], generate_s: float, decode_s: float) -> None:
    rates = Rates(play_s=FRAME_SECONDS, generate_s=generate_s, decode_s=decode_s)
    planner, emitted = WindowPlanner(WindowPolicy()), []
    for i in range(n):
        planner.push((i,) * 7)
        while (w := planner.next_window(aheads[i % len(aheads)], rates)) is not None:
            emitted += [w.start_frame + k for k in range(*w.keep)]
    for w in planner.finish():
        emitted += [w.start_frame + k for k in range(*w.keep)]
    assert emitted == list(range(n))


def test_a_cap_on_the_first_chunk_trades_the_rule_for_time_to_first_audio() -> None:
    planner = WindowPlanner(WindowPolicy(first_most=2))
    assert planner.first_frames(CPU) == 2 and planner.first_frames(GPU) == 1
    with pytest.raises(ValueError, match="first_most"):
        WindowPolicy(first_most=9)
