"""SNAC loading, seeded position-keyed noise, and batched window decode."""

from __future__ import annotations

import random

import numpy as np
import pytest
import snac
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from lyre.codec import CodecWindow, SnacDecoder, load_snac
from lyre.codec.noise import NOISE_BLOCKS, NoiseControl, SeededNoiseBlock, install_seeded_noise, position_noise
from lyre.models.demo import DemoPaths
from lyre.orpheus import SAMPLES_PER_FRAME, codes_to_snac_levels

from codec_cases import stub_cuda_streams

# Time steps per coarse frame at each noise block (decoder_rates 8, 8, 4, 2 on
# a latent of 4 steps per frame).
STEPS_PER_FRAME = (32, 256, 1024, 2048)
# Batched and single decodes run different conv kernels: equal to float32 rounding.
BATCH_TOL = {"rtol": 1e-5, "atol": 1e-5}


def random_frames(n: int, seed: int) -> tuple[tuple[int, ...], ...]:
    rng = random.Random(seed)
    return tuple(tuple(rng.randrange(4096) for _ in range(7)) for _ in range(n))


def codes_tensors(frames: tuple[tuple[int, ...], ...]) -> list[torch.Tensor]:
    return [torch.tensor(level)[None] for level in codes_to_snac_levels(frames)]  # (1, n), (1, 2n), (1, 4n)


@pytest.fixture(scope="module")
def decoder(demo: DemoPaths) -> SnacDecoder:
    return SnacDecoder(load_snac(demo.codec))


@pytest.fixture(scope="module")
def silent_reference(demo: DemoPaths) -> snac.SNAC:
    """snac's own model, weight norm intact, with every NoiseBlock's linear weight zeroed."""
    model = snac.SNAC.from_pretrained(str(demo.codec))
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, snac.layers.NoiseBlock):
                # Weight norm: weight = g * v / |v|; g = 0 makes it exactly 0.
                module.linear.parametrizations.weight.original0.zero_()
    return model


def test_load_snac_folds_weight_norm_without_changing_output(demo: DemoPaths, silent_reference: snac.SNAC) -> None:
    folded = load_snac(demo.codec)
    assert not any(torch.nn.utils.parametrize.is_parametrized(m) for m in folded.modules())
    with torch.no_grad():
        for module in folded.modules():
            if isinstance(module, snac.layers.NoiseBlock):
                module.linear.weight.zero_()
    codes = codes_tensors(random_frames(2, seed=1))
    with torch.inference_mode():
        expected = silent_reference.decode(codes)
        actual = folded.decode(codes)
    # Bit-exact on this CPU: folding stores the very tensor the parametrisation computes.
    torch.testing.assert_close(actual, expected, rtol=0, atol=0)


def test_compile_is_for_cuda_only(demo: DemoPaths) -> None:
    with pytest.raises(ValueError, match="CUDA"):
        load_snac(demo.codec, compile=True)


def test_noise_off_equals_snac_with_zeroed_noise(decoder: SnacDecoder, silent_reference: snac.SNAC) -> None:
    frames = random_frames(2, seed=2)
    (audio,) = decoder.decode_windows([CodecWindow(frames, start_frame=4, keep=(0, 2), seed=None)])
    with torch.inference_mode():
        expected = silent_reference.decode(codes_tensors(frames))[0, 0].numpy()
    np.testing.assert_array_equal(audio, expected)


def test_noise_is_seeded_and_keyed_by_start_frame(decoder: SnacDecoder) -> None:
    frames = random_frames(2, seed=3)

    def windows(*keys: tuple[int | None, int]) -> list[CodecWindow]:
        return [CodecWindow(frames, start_frame=start, keep=(0, 2), seed=seed) for seed, start in keys]

    (base,) = decoder.decode_windows(windows((7, 10)))
    np.testing.assert_array_equal(decoder.decode_windows(windows((7, 10)))[0], base)
    # Another seed, another start frame, no noise: each far from base (batching moves audio ~1e-6 at most).
    for other in decoder.decode_windows(windows((8, 10), (7, 11), (None, 10))):
        assert np.abs(other - base).max() > 1e-3


def test_decode_wrapper_matches_window_from_frame_zero(decoder: SnacDecoder) -> None:
    frames = random_frames(2, seed=4)
    levels = codes_to_snac_levels(frames)
    (window,) = decoder.decode_windows([CodecWindow(frames, start_frame=0, keep=(0, 2), seed=5)])
    audio = decoder.decode(levels, seed=5)
    assert audio.dtype == np.float32
    np.testing.assert_array_equal(audio, window)
    with pytest.raises(ValueError, match="n, 2n, 4n"):
        decoder.decode((levels[0], levels[1][:-1], levels[2]))
    with pytest.raises(ValueError, match="codes must be"):
        decoder.decode((levels[0], levels[1], levels[2][:-1] + [4096]))
    with pytest.raises(ValueError, match="seed"):
        decoder.decode(levels, seed=-1)


def test_batch_equals_each_window_alone(decoder: SnacDecoder) -> None:
    windows = [
        CodecWindow(random_frames(2, seed=10), start_frame=0, keep=(0, 2), seed=0),
        CodecWindow(random_frames(2, seed=11), start_frame=9, keep=(1, 2), seed=1),
        CodecWindow(random_frames(2, seed=12), start_frame=2, keep=(0, 1), seed=None),
    ]
    batched = decoder.decode_windows(windows)
    for window, audio in zip(windows, batched):
        (alone,) = decoder.decode_windows([window])
        assert audio.dtype == np.float32
        assert audio.shape == (window.kept_frames * SAMPLES_PER_FRAME,)
        torch.testing.assert_close(torch.from_numpy(audio), torch.from_numpy(alone), **BATCH_TOL)


def test_keep_slices_the_decoded_window(decoder: SnacDecoder) -> None:
    frames = random_frames(3, seed=13)
    (full,) = decoder.decode_windows([CodecWindow(frames, start_frame=3, keep=(0, 3), seed=2)])
    assert full.shape == (3 * SAMPLES_PER_FRAME,)
    for a, b in ((0, 1), (1, 3)):
        (part,) = decoder.decode_windows([CodecWindow(frames, start_frame=3, keep=(a, b), seed=2)])
        np.testing.assert_array_equal(part, full[a * SAMPLES_PER_FRAME : b * SAMPLES_PER_FRAME])


def test_mixed_frame_counts_are_rejected(decoder: SnacDecoder) -> None:
    windows = [CodecWindow(random_frames(n, seed=n), start_frame=0, keep=(0, 1)) for n in (1, 2)]
    with pytest.raises(ValueError, match="equal frame counts"):
        decoder.decode_windows(windows)
    assert decoder.decode_windows([]) == []


@pytest.mark.parametrize(
    ("frames", "start", "keep", "seed", "match"),
    [
        ((), 0, (0, 1), 0, "at least one frame"),
        (((1,) * 6,), 0, (0, 1), 0, "6 codes"),
        (((1,) * 6 + (4096,),), 0, (0, 1), 0, "outside"),
        (((1,) * 6 + (-1,),), 0, (0, 1), 0, "outside"),
        (((1,) * 7,), -1, (0, 1), 0, "start_frame"),
        (((1,) * 7,), 0, (1, 1), 0, "keep"),
        (((1,) * 7,), 0, (0, 2), 0, "keep"),
        (((1,) * 7,), 0, (-1, 1), 0, "keep"),
        (((1,) * 7,), 0, (0, 1), -1, "seed"),
        (((1,) * 7,), 0, (0, 1), 2**63, "seed"),
    ],
)
def test_codec_window_validation(frames: tuple, start: int, keep: tuple[int, int], seed: int, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        CodecWindow(frames, start_frame=start, keep=keep, seed=seed)


def test_codec_window_normalises_lists() -> None:
    window = CodecWindow([[1] * 7, [2] * 7], start_frame=0, keep=[0, 2])  # type: ignore[arg-type]
    assert window.frames == ((1,) * 7, (2,) * 7) and window.keep == (0, 2)
    assert window.n_frames == 2 and window.kept_frames == 2


def test_install_replaces_four_blocks_and_keeps_weights(demo: DemoPaths) -> None:
    model = load_snac(demo.codec)
    before = model.state_dict()
    control = install_seeded_noise(model)
    blocks = [m for m in model.modules() if isinstance(m, SeededNoiseBlock)]
    assert [b.index for b in blocks] == list(range(NOISE_BLOCKS))
    assert not any(isinstance(m, snac.layers.NoiseBlock) for m in model.modules())
    after = model.state_dict()
    assert after.keys() == before.keys()
    assert all(torch.equal(after[k], before[k]) for k in before)
    # A second decoder on the same model shares its noise settings and lock.
    assert install_seeded_noise(model) is control


def test_position_noise_is_standard_normal() -> None:
    seeds = torch.tensor([0, 1, 2**40 + 1], dtype=torch.long)  # (3,)
    positions = torch.arange(100_000).expand(3, -1)  # (3, T)
    z = position_noise(seeds, 0, positions)
    assert z.dtype == torch.float32 and z.shape == (3, 100_000)
    for row in z:
        assert abs(row.mean().item()) < 0.02 and abs(row.std().item() - 1.0) < 0.02
    # Seeds differing only above bit 32, and different blocks, give independent noise.
    assert abs(torch.corrcoef(torch.stack([z[1], z[2]]))[0, 1].item()) < 0.02
    other_block = position_noise(seeds, 1, positions)
    assert abs(torch.corrcoef(torch.stack([z[0], other_block[0]]))[0, 1].item()) < 0.02
    with pytest.raises(ValueError, match="block"):
        position_noise(seeds, NOISE_BLOCKS, positions)


def _block_noise(block: int, seed: int, start_frame: int, n_frames: int) -> torch.Tensor:
    """The noise a SeededNoiseBlock adds for one window: (n_frames * steps,)."""
    linear = nn.Conv1d(1, 1, kernel_size=1, bias=False)
    nn.init.ones_(linear.weight)  # linear(x) = x, so x = 1 gives 1 + noise
    control = NoiseControl()
    layer = SeededNoiseBlock(linear, block, control)
    x = torch.ones(1, 1, n_frames * STEPS_PER_FRAME[block])  # (B, C, T)
    one = torch.ones(1, dtype=torch.long)
    control.set(seed * one, start_frame * one, one.bool(), n_frames)
    with torch.no_grad():
        return layer(x)[0, 0] - 1.0


@settings(max_examples=25, deadline=None)
@given(
    block=st.integers(0, NOISE_BLOCKS - 1),
    seed=st.integers(0, 2**63 - 1),
    frame=st.integers(2, 10_000),
    offset=st.integers(1, 2),
)
def test_block_noise_depends_on_absolute_position_only(block: int, seed: int, frame: int, offset: int) -> None:
    # Frame `frame` at window index 0 (window starts there) and at index `offset`.
    steps = STEPS_PER_FRAME[block]
    at_front = _block_noise(block, seed, frame, n_frames=1)
    inside = _block_noise(block, seed, frame - offset, n_frames=offset + 2)
    torch.testing.assert_close(at_front, inside[offset * steps : (offset + 1) * steps], rtol=0, atol=0)


def test_noise_block_is_identity_when_off() -> None:
    linear = nn.Conv1d(4, 4, kernel_size=1, bias=False)
    control = NoiseControl()
    layer = SeededNoiseBlock(linear, 0, control)
    x = torch.randn(2, 4, 64)  # (B, C, T)
    assert layer(x) is x
    # Per row: row 1 has no seed and passes through, row 0 gets noise.
    control.set(torch.tensor([3, 3]), torch.tensor([0, 0]), torch.tensor([True, False]), 2)
    with torch.no_grad():
        y = layer(x)
    assert torch.equal(y[1], x[1]) and not torch.equal(y[0], x[0])


def test_codec_batches_pad_to_the_next_graph_bucket() -> None:
    from lyre.common.batching import bucket_for
    from lyre.codec.graphs import CODEC_BUCKETS, SnacGraphs

    assert [bucket_for(n, CODEC_BUCKETS) for n in (1, 2, 3, 5, 33, 64)] == [1, 2, 4, 8, 64, 64]
    assert bucket_for(65, CODEC_BUCKETS) is None and CODEC_BUCKETS[-1] == 64
    with pytest.raises(ValueError, match="CUDA"):
        SnacGraphs(None, None, torch.device("cpu"))  # type: ignore[arg-type]


def test_codec_graph_shapes_are_every_window_width_and_bucket_largest_first() -> None:
    from lyre.codec.graphs import CODEC_BUCKETS, MAX_GRAPH_FRAMES, graph_shapes

    shapes = graph_shapes(MAX_GRAPH_FRAMES)
    assert sorted(shapes) == sorted((n, b) for n in range(1, MAX_GRAPH_FRAMES + 1) for b in CODEC_BUCKETS)
    sizes = [n * b for n, b in shapes]
    assert shapes[0] == (MAX_GRAPH_FRAMES, CODEC_BUCKETS[-1]) and sizes == sorted(sizes, reverse=True)


def test_codec_graphs_capture_every_shape_when_built_and_none_while_serving(monkeypatch: pytest.MonkeyPatch) -> None:
    """No GPU here: CUDA's stream calls are stubbed and each capture recorded, to check *when* captures happen."""
    from types import SimpleNamespace

    from lyre.codec.graphs import SnacGraphs, graph_shapes

    stub_cuda_streams(monkeypatch)
    control, captured = NoiseControl(), []

    def capture(self: SnacGraphs, n: int, bucket: int, side: object, pool: object) -> SimpleNamespace:
        assert torch.is_inference_mode_enabled() and control.lock.locked()
        control.set(torch.zeros(bucket, dtype=torch.long), torch.zeros(bucket, dtype=torch.long),
                    torch.zeros(bucket, dtype=torch.bool), n)
        captured.append((n, bucket))
        return SimpleNamespace(graph=SimpleNamespace(pool=lambda: (0, 1)))

    monkeypatch.setattr(SnacGraphs, "_capture", capture)
    graphs = SnacGraphs(None, control, torch.device("cuda"), max_frames=11)  # type: ignore[arg-type]
    assert captured == graph_shapes(11) and graphs.captured == 77
    assert control.enabled is None  # noise off again for eager decodes
    wide = [torch.zeros(3, width * 12, dtype=torch.long) for width in (1, 2, 4)]  # 12 frames: wider than captured
    assert graphs.decode(wide, torch.zeros(3, dtype=torch.long), torch.zeros(3, dtype=torch.long),
                         torch.ones(3, dtype=torch.bool)) is None
    assert len(captured) == 77  # the caller decodes eagerly; nothing was captured while serving


def test_snac_runs_in_bfloat16_close_to_float32(demo: DemoPaths) -> None:
    frames = [tuple(range(k * 100, k * 100 + 7)) for k in range(4)]
    window = CodecWindow(frames=tuple(frames), start_frame=0, keep=(0, 4), seed=None)
    full = SnacDecoder(load_snac(demo.codec)).decode_windows([window])[0]
    half = SnacDecoder(load_snac(demo.codec, dtype="bfloat16")).decode_windows([window])[0]
    assert half.dtype == np.float32 and half.shape == full.shape
    snr = 10 * np.log10(np.sum(full**2) / np.sum((full - half) ** 2))
    assert snr > 15, snr
    with pytest.raises(ValueError, match="dtype"):
        load_snac(demo.codec, dtype="float16")
