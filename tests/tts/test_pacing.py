"""How a stream paces its frames into the codec (lyre.tts.pacing): the first chunk held until it covers the next
frame's making and decoding, frames gathered only while the listener is well ahead."""

from __future__ import annotations

import pytest

from lyre.orpheus import FRAME_SECONDS, SAMPLES_PER_FRAME
from lyre.tts.pacing import Pacer, PacingPolicy, Rates

LOOKAHEAD = 4757  # SNAC 24 kHz's, in samples
THIRD = 3 * SAMPLES_PER_FRAME - LOOKAHEAD  # the audio out once three frames are decoded: 1,387 samples
FOURTH = THIRD + SAMPLES_PER_FRAME

CPU = Rates(play_s=FRAME_SECONDS, generate_s=0.03, decode_s=0.02)  # one stream on the 2-core CPU
FAST = Rates(play_s=FRAME_SECONDS, generate_s=0.005, decode_s=0.002, wait_s=0.001)


def test_the_first_chunk_covers_the_next_frames_making_and_its_slow_decode() -> None:
    pacer = Pacer()
    need_s = 0.03 + 1.5 * 0.02 + 0.03  # generation, decode at half again its cost, margin
    assert pacer.first_samples(CPU) == pytest.approx(need_s / FRAME_SECONDS * SAMPLES_PER_FRAME, abs=1)
    assert THIRD < pacer.first_samples(CPU) <= FOURTH  # the fourth frame's audio is the first chunk
    assert pacer.first_samples(FAST) <= THIRD  # the first audio the lookahead lets out is enough
    # Two streams sharing a CPU's codec calls: each frame waits for the other's, and the chunk is longer.
    shared = Rates(play_s=FRAME_SECONDS, generate_s=0.03, decode_s=0.04)
    assert pacer.first_samples(shared) > pacer.first_samples(CPU)
    # At half speed (a listener playing at 2x) the same seconds are twice the samples.
    assert Pacer().first_samples(Rates(FRAME_SECONDS / 2, 0.03, 0.02)) == pytest.approx(
        2 * pacer.first_samples(CPU), abs=2)


def test_nobody_listening_holds_nothing_and_a_cap_bounds_the_first_chunk() -> None:
    assert Pacer().first_samples(None) == 0
    slow = Rates(play_s=FRAME_SECONDS, generate_s=0.5, decode_s=0.5)  # no first chunk spares its listener gaps
    assert Pacer().first_samples(slow) == 8 * SAMPLES_PER_FRAME
    assert Pacer(PacingPolicy(first_most=2)).first_samples(slow) == 2 * SAMPLES_PER_FRAME


def test_frames_gather_only_while_the_listener_is_well_ahead() -> None:
    pacer = Pacer(PacingPolicy(gather_frames=4, gather_s=0.5))
    assert (pacer.frames_wanted(0.2, CPU), pacer.patience(0.2, CPU)) == (1, None)  # short buffer: each frame
    assert pacer.frames_wanted(1.5, CPU) == 4 and pacer.patience(1.5, CPU) == pytest.approx(1.0)
    assert (pacer.frames_wanted(0.0, None), pacer.patience(0.0, None)) == (4, None)  # a whole file: gather
    assert pacer.held_frames(LOOKAHEAD) == 4 + 3 + 1


def test_a_bad_policy_is_named() -> None:
    for kwargs, name in (({"gather_frames": 0}, "gather_frames"), ({"gather_s": -1}, "gather_s"),
                         ({"spread": -0.5}, "spread"), ({"first_most": 0}, "first_most")):
        with pytest.raises(ValueError, match=name):
            PacingPolicy(**kwargs)
