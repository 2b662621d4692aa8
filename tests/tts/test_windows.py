"""The window planner emits every frame exactly once, with context, as early as it can."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lyre.codec import CodecWindow
from lyre.tts.windows import WindowPlanner, WindowPolicy


def _frame(i: int) -> tuple[int, ...]:
    return (i % 4096,) * 7


def _emitted(window: CodecWindow) -> list[int]:
    a, b = window.keep
    return [window.start_frame + k for k in range(a, b)]


def _run(n: int, policy: WindowPolicy, ahead: list[float]) -> list[CodecWindow]:
    planner = WindowPlanner(policy)
    windows = []
    for i in range(n):
        planner.push(_frame(i))
        while (w := planner.next_window(ahead[i % len(ahead)])) is not None:
            windows.append(w)
    return windows + planner.finish()


@settings(max_examples=150, deadline=None)
@given(
    n=st.integers(1, 60),
    max_new=st.integers(1, 10),
    ahead=st.lists(st.sampled_from([0.0, 0.2, 1.0, 5.0]), min_size=1, max_size=8),
)
def test_every_frame_is_emitted_exactly_once_in_order_with_its_context(n: int, max_new: int, ahead: list[float]) -> None:
    policy = WindowPolicy(max_new=max_new)
    windows = _run(n, policy, ahead)
    emitted = [f for w in windows for f in _emitted(w)]
    assert emitted == list(range(n))
    for w in windows:
        first, last = _emitted(w)[0], _emitted(w)[-1]
        assert w.start_frame == max(0, first - 1)  # one frame of left context where one exists
        assert w.start_frame + len(w.frames) == min(n, last + 3)  # two on the right, or the true end
        assert list(w.frames) == [_frame(i) for i in range(w.start_frame, w.start_frame + len(w.frames))]
        assert len(_emitted(w)) <= max_new


def test_first_audio_needs_three_frames() -> None:
    planner = WindowPlanner(WindowPolicy())
    for i in range(2):
        planner.push(_frame(i))
        assert planner.next_window(0.0) is None
    planner.push(_frame(2))
    window = planner.next_window(0.0)
    assert window is not None
    assert (window.start_frame, len(window.frames), window.keep) == (0, 3, (0, 1))


def test_a_longer_first_chunk_waits_for_its_frames_then_goes_back_to_one() -> None:
    planner = WindowPlanner(WindowPolicy(first_new=3))
    for i in range(4):
        planner.push(_frame(i))
        assert planner.next_window(0.0) is None
    planner.push(_frame(4))
    first = planner.next_window(0.0)
    assert first is not None and first.keep == (0, 3) and len(first.frames) == 5
    planner.push(_frame(5))
    second = planner.next_window(0.0)
    assert second is not None and second.keep == (1, 2) and second.start_frame == 2
    with pytest.raises(ValueError, match="first_new"):
        WindowPolicy(first_new=9, max_new=8)


def test_one_frame_windows_are_the_reference_windows() -> None:
    windows = _run(12, WindowPolicy(max_new=1), [0.0])
    for w in windows:
        frame = _emitted(w)[0]
        if 1 <= frame <= 12 - 3:  # the reference decodes frames [j-1, j+2] and keeps j
            assert (w.start_frame, len(w.frames), w.keep) == (frame - 1, 4, (1, 2))


def test_ahead_of_playback_windows_widen_and_frames_cost_less() -> None:
    n, k = 80, 8
    behind = _run(n, WindowPolicy(max_new=k), [0.0])
    ahead = _run(n, WindowPolicy(max_new=k), [10.0])
    assert all(len(_emitted(w)) == 1 for w in behind[:-1])  # the flush takes the last two at once
    assert max(len(_emitted(w)) for w in ahead) == k
    decoded = sum(len(w.frames) for w in ahead)
    assert decoded / n <= (k + 3) / k + 0.1  # the reference decodes every frame 4 times
    assert sum(len(w.frames) for w in behind) / n > 3


def test_policy_values_are_checked() -> None:
    with pytest.raises(ValueError, match="max_new"):
        WindowPolicy(max_new=0)
    with pytest.raises(ValueError, match="ahead_s"):
        WindowPolicy(ahead_s=-1)
