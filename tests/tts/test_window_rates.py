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
    # first: max(0, 3 x 0.05 - (n + 2) 0.04) + 1.5 x 6 x 0.04 + 0.03 <= n 0.0853 first holds at n = 5 (0.39 <= 0.427):
    # the next window's decode at the slow end of its spread (x 1.5).
    assert (planner.steady_frames(CPU), planner.first_frames(CPU)) == (3, 5)
    assert WindowPlanner(WindowPolicy(spread=0.0)).first_frames(CPU) == 4  # 0.27 <= 0.341 at its measured cost
    assert (planner.steady_frames(GPU), planner.first_frames(GPU)) == (1, 1)
    nothing = Rates(play_s=FRAME_SECONDS, generate_s=0.0, decode_s=0.0)  # before anything was measured
    assert (planner.steady_frames(nothing), planner.first_frames(nothing)) == (1, 1)
    hopeless = Rates(play_s=FRAME_SECONDS, generate_s=0.2, decode_s=0.2)
    assert planner.first_frames(hopeless) == planner.steady_frames(hopeless) == 8  # max_new


def test_the_first_window_waits_for_its_frames_then_later_ones_wait_while_the_buffer_covers_them() -> None:
    planner = _planner(6)  # 4 frames with their right context: one short of the first chunk's 5
    assert planner.next_window(0.0, CPU) is None and planner.frames_wanted(0.0, CPU) == 1
    planner.push((6,) * 7)
    first = planner.next_window(0.0, CPU)
    assert first is not None and first.keep == (0, 5) and first.n_frames == 7
    for i in range(7, 9):
        planner.push((i,) * 7)  # 2 ready now
    # 0.46 s buffered: one more frame (0.05) and a 3-new window's decode at its slow end (1.5 x 6 x 0.04) leave
    # 0.02 s beyond the margin: wait.
    assert planner.next_window(0.46, CPU) is None
    assert planner.patience(0.46, CPU) == pytest.approx(0.02)
    assert planner.frames_wanted(0.46, CPU) == 6  # towards a full window
    window = planner.next_window(0.4, CPU)  # no longer: decode the 2 ready frames
    assert window is not None and window.keep == (1, 3) and window.start_frame == 4


def test_a_decoded_window_is_the_widest_that_is_ready_before_the_listener_runs_dry_and_never_narrower_than_k() -> None:
    planner = _planner(7)
    assert planner.next_window(0.0, CPU) is not None  # frames 0-4
    for i in range(7, 15):
        planner.push((i,) * 7)  # 8 ready: a full window, but 1.5 x 11 x 0.04 s is more than the buffer
    window = planner.next_window(0.5, CPU)
    assert window is not None and window.keep[1] - window.keep[0] == 4  # 1.5 x 7 x 0.04 + 0.03 <= 0.5
    # 0.3 s fits a one-frame window only; one costs four frames' decode (0.16 s), more than it plays (0.085 s), and
    # one-frame windows would drain the buffer until the listener ran dry: k* = 3 frames instead.
    window = planner.next_window(0.3, CPU)
    assert window is not None and window.keep[1] - window.keep[0] == 3
    window = planner.next_window(10.0, CPU)  # far ahead: the one frame left ready is not a full window: wait
    assert window is None
    assert [w.keep[1] - w.keep[0] for w in planner.finish()] == [3]


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
    with pytest.raises(ValueError, match="spread"):
        WindowPolicy(spread=-0.1)
