"""Streamed windows against the reference decoder and against a whole-utterance decode."""

from __future__ import annotations

import numpy as np
import pytest

from lyre.codec import CodecWindow, SnacDecoder, load_snac
from lyre.models.demo import DemoPaths
from lyre.orpheus import SAMPLES_PER_FRAME as F
from lyre.tts.windows import WindowPlanner, WindowPolicy

N = 24  # frames in the test utterance
SEED = 11


@pytest.fixture(scope="module")
def decoder(demo: DemoPaths) -> SnacDecoder:
    return SnacDecoder(load_snac(demo.codec))


@pytest.fixture(scope="module")
def frames() -> list[tuple[int, ...]]:
    rng = np.random.default_rng(0)
    return [tuple(int(c) for c in rng.integers(0, 4096, 7)) for _ in range(N)]


def _decode_alone(decoder: SnacDecoder, windows: list[CodecWindow]) -> np.ndarray:
    return np.concatenate([decoder.decode_windows([w])[0] for w in windows])


def _lyre(decoder: SnacDecoder, frames: list[tuple[int, ...]], policy: WindowPolicy, ahead: float) -> np.ndarray:
    planner = WindowPlanner(policy, seed=SEED)
    windows = []
    for frame in frames:
        planner.push(frame)
        while (w := planner.next_window(ahead)) is not None:
            windows.append(w)
    return _decode_alone(decoder, windows + planner.finish())


def _reference(decoder: SnacDecoder, frames: list[tuple[int, ...]]) -> np.ndarray:
    """The reference scheme: after each new frame i >= 3, decode frames i-3..i and keep
    samples 2048:4096 (frame i-2). It emits frames 1 .. n-3 only."""
    windows = [
        CodecWindow(frames=tuple(frames[i - 3 : i + 1]), start_frame=i - 3, keep=(1, 2), seed=SEED)
        for i in range(3, len(frames))
    ]
    return _decode_alone(decoder, windows)


@pytest.fixture(scope="module")
def reference(decoder: SnacDecoder, frames: list[tuple[int, ...]]) -> np.ndarray:
    return _reference(decoder, frames)


@pytest.fixture(scope="module")
def one_frame(decoder: SnacDecoder, frames: list[tuple[int, ...]]) -> np.ndarray:
    """lyre's audio in one-frame windows, decoded once for both tests."""
    return _lyre(decoder, frames, WindowPolicy(max_new=1), ahead=0.0)


def _snr_db(signal: np.ndarray, estimate: np.ndarray) -> float:
    noise = np.sum((signal.astype(np.float64) - estimate) ** 2)
    return float(10 * np.log10(np.sum(signal.astype(np.float64) ** 2) / max(noise, 1e-30)))


def test_one_frame_windows_equal_the_reference_bit_for_bit_and_add_the_edges(
    one_frame: np.ndarray, reference: np.ndarray
) -> None:
    ours = one_frame
    assert len(ours) == N * F  # every frame, 2048 samples each
    assert len(reference) == (N - 3) * F
    assert np.array_equal(ours[F : (N - 2) * F], reference)  # frames 1 .. n-3
    assert np.abs(ours[:F]).max() > 0 and np.abs(ours[(N - 2) * F :]).max() > 0  # frame 0, last two


def test_streamed_audio_is_no_further_from_a_whole_decode_than_the_reference(
    decoder: SnacDecoder, frames: list[tuple[int, ...]], reference: np.ndarray, one_frame: np.ndarray
) -> None:
    whole = decoder.decode_windows([CodecWindow(frames=tuple(frames), start_frame=0, keep=(0, N), seed=SEED)])[0]
    span = slice(F, (N - 2) * F)  # the frames the reference emits at all
    snr_reference = _snr_db(whole[span], reference)
    figures = {"reference": snr_reference}
    for name, ours in (("lyre 1-frame", one_frame),
                       ("lyre 8-frame", _lyre(decoder, frames, WindowPolicy(max_new=8), ahead=10.0))):
        assert len(ours) == N * F
        figures[name] = _snr_db(whole[span], ours[span])
        figures[name + " (all frames)"] = _snr_db(whole, ours)
        assert figures[name] >= snr_reference - 1e-6
    print("SNR vs whole-utterance decode, dB:", {k: round(v, 2) for k, v in figures.items()})
    assert figures["lyre 8-frame"] > snr_reference  # wider windows: fewer edges
