"""The streaming SNAC decoder (lyre.codec.streaming): each stream's audio equals the whole utterance's decode of
the same codes and seed, however its frames are split into calls and whatever streams share them."""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch

from lyre.codec import SnacDecoder, load_snac
from lyre.codec.snac import prepare_snac
from lyre.codec.streaming import StreamingSnac
from lyre.models.demo import DemoPaths, demo_snac
from lyre.orpheus import SAMPLES_PER_FRAME, codes_to_snac_levels

from codec_cases import random_codes as _frames, snr_db as _snr_db, stub_cuda_streams


@pytest.fixture(scope="module")
def model32(demo: DemoPaths) -> object:
    return load_snac(demo.codec)


def _streamed(stream: StreamingSnac, frames: list[tuple[int, ...]], split: list[int], seed: int | None) -> np.ndarray:
    slot = stream.open(seed)
    out, at = [], 0
    for n in split:
        out += stream.push([(slot, frames[at:at + n])])
        at += n
    assert at == len(frames)
    out += stream.finish([slot])
    return np.concatenate(out)


def test_in_float64_the_stream_is_the_whole_decode_bit_for_bit() -> None:
    model = prepare_snac(demo_snac()).to(torch.float64)
    whole, stream = SnacDecoder(model), StreamingSnac(model, slots=2)
    assert stream.lookahead == 4757  # samples after a sample that it depends on (2.3 frames)
    frames = _frames(5, 1)
    reference = whole.decode(codes_to_snac_levels(frames), seed=9)
    for split in ([1] * 5, [3, 2]):
        audio = _streamed(stream, frames, split, seed=9)
        assert audio.shape == (5 * SAMPLES_PER_FRAME,)
        assert np.array_equal(audio, reference), split
    assert stream.open_slots == 0


@pytest.mark.parametrize("seed", [3, None])
def test_in_float32_any_chunking_is_the_whole_decode_to_100_db(model32: object, seed: int | None) -> None:
    whole, stream = SnacDecoder(model32), StreamingSnac(model32, slots=2)  # type: ignore[arg-type]
    frames = _frames(17, 2)
    reference = whole.decode(codes_to_snac_levels(frames), seed=seed)
    rng = random.Random(4)
    for _ in range(2):
        split, left = [], 17
        while left:
            split.append(rng.randint(1, min(left, 5)))
            left -= split[-1]
        assert _snr_db(reference, _streamed(stream, frames, split, seed)) >= 100, split


def test_streams_start_end_and_are_cancelled_inside_shared_calls(model32: object) -> None:
    """Four streams of different lengths, each starting at its own call, in batches of whoever is live; one
    cancelled halfway (its slot then taken by a fifth, which must start from silence, not its state)."""
    whole, stream = SnacDecoder(model32), StreamingSnac(model32, slots=4)  # type: ignore[arg-type]
    lengths, starts = (6, 12, 9, 3, 5), (0, 2, 4, 7, 9)
    utterances = [_frames(n, 10 + k) for k, n in enumerate(lengths)]
    slots: dict[int, int] = {}
    fed = [0] * 5
    heard: dict[int, list[np.ndarray]] = {k: [] for k in range(5)}
    cancel_at = (1, 5)  # stream 1, after 5 frames
    for call in range(20):
        if cancel_at[0] in slots and fed[cancel_at[0]] == cancel_at[1]:
            stream.close(slots.pop(cancel_at[0]))
        for k, start in enumerate(starts):
            if start == call and k not in slots and not fed[k]:
                slots[k] = stream.open(seed=k)
        live = [k for k in slots if fed[k] < lengths[k]]
        for k, audio in zip(live, stream.push([(slots[k], utterances[k][fed[k]:fed[k] + 1]) for k in live])):
            heard[k].append(audio)
            fed[k] += 1
        ended = [k for k in live if fed[k] == lengths[k]]
        for k, audio in zip(ended, stream.finish([slots[k] for k in ended])):
            heard[k].append(audio)
            del slots[k]
    assert not slots and stream.open_slots == 0
    for k in (0, 2, 3, 4):
        reference = whole.decode(codes_to_snac_levels(utterances[k]), seed=k)
        assert _snr_db(reference, np.concatenate(heard[k])) >= 100, k
    # The cancelled one's audio so far is the start of its whole decode, up to the lookahead.
    partial = np.concatenate(heard[1])
    reference = whole.decode(codes_to_snac_levels(utterances[1]), seed=1)
    assert partial.size == 5 * SAMPLES_PER_FRAME - stream.lookahead
    assert _snr_db(reference[:partial.size], partial) >= 100


def test_a_long_stream_does_not_drift(model32: object) -> None:
    whole, stream = SnacDecoder(model32), StreamingSnac(model32, slots=1)  # type: ignore[arg-type]
    frames = _frames(120, 5)  # 10.2 s of audio, four frames a call
    reference = whole.decode(codes_to_snac_levels(frames), seed=2)
    audio = _streamed(stream, frames, [4] * 30, seed=2)
    tail = slice(-12 * SAMPLES_PER_FRAME, None)
    assert _snr_db(reference, audio) >= 100 and _snr_db(reference[tail], audio[tail]) >= 100


def test_misuse_is_named(model32: object) -> None:
    stream = StreamingSnac(model32, slots=1)  # type: ignore[arg-type]
    slot = stream.open()
    other = stream.open()  # every slot taken: the pool grows
    assert stream.slots == 2 and other != slot and stream.bytes_per_slot > 400_000
    with pytest.raises(ValueError, match="same number of frames"):
        stream.push([(slot, [])])
    with pytest.raises(ValueError, match="appears twice"):
        stream.push([(slot, _frames(1, 0)), (slot, _frames(1, 1))])
    stream.close(slot)
    with pytest.raises(ValueError, match=f"slot {slot} is not an open stream"):
        stream.push([(slot, _frames(1, 0))])
    with pytest.raises(ValueError, match=f"slot {slot} is not an open stream"):
        stream.finish([slot])


def test_a_fixed_shape_stream_pads_its_rows_to_a_bucket_and_is_still_the_whole_decode(model32: object) -> None:
    """What a CUDA graph replays: masks always on, three rows padded to four with the scratch slot's."""
    whole, stream = SnacDecoder(model32), StreamingSnac(model32, slots=3, fixed_shape=True)  # type: ignore[arg-type]
    utterances = [_frames(5, 30 + k) for k in range(3)]
    slots = [stream.open(seed=k) for k in range(3)]
    assert stream.scratch == 0 and 0 not in slots
    heard: list[list[np.ndarray]] = [[], [], []]
    for i in range(5):
        for k, audio in enumerate(stream.push([(slot, u[i:i + 1]) for slot, u in zip(slots, utterances)])):
            heard[k].append(audio)
    for k, audio in enumerate(stream.finish(slots)):
        heard[k].append(audio)
    for k, utterance in enumerate(utterances):
        reference = whole.decode(codes_to_snac_levels(utterance), seed=k)
        assert _snr_db(reference, np.concatenate(heard[k])) >= 100, k
    assert stream.open() != 0  # the pool grows past its three, never handing out the scratch slot
    with pytest.raises(ValueError, match="fixed-shape"):
        StreamingSnac(model32, slots=1).capture_graphs(4)  # type: ignore[arg-type]


def test_stream_graphs_capture_every_shape_when_built_and_none_while_serving(monkeypatch: pytest.MonkeyPatch,
                                                                            caplog: pytest.LogCaptureFixture,
                                                                            model32: object) -> None:
    """No GPU here: CUDA's stream calls are stubbed and each capture recorded, to check which shapes are
    captured, that a shape without a graph decodes eagerly, and that a pool grown past its graphs drops them."""
    from types import SimpleNamespace

    from lyre.codec.graphs import StreamGraphs

    stub_cuda_streams(monkeypatch)
    captured: list[tuple[int, int]] = []

    def capture(self: StreamGraphs, steps: int, bucket: int, side: object, pool: object) -> SimpleNamespace:
        assert torch.is_inference_mode_enabled()
        captured.append((steps, bucket))
        return SimpleNamespace(graph=SimpleNamespace(pool=lambda: (0, 1)))

    monkeypatch.setattr(StreamGraphs, "_capture", capture)
    stream = StreamingSnac(model32, slots=1, fixed_shape=True)  # type: ignore[arg-type]
    monkeypatch.setattr(stream, "device", torch.device("cuda"))
    assert stream.capture_graphs(4, buckets=(1, 2, 4)) == 15  # 4, 8, 12, 16 latent steps and a finish's 10
    assert sorted(captured) == sorted((t, b) for t in (4, 8, 10, 12, 16) for b in (1, 2, 4))
    assert captured[0] == (16, 4)  # the largest first: the smaller ones fit in its memory pool
    graphs = stream.graphs
    assert graphs is not None and graphs.replay(*[torch.zeros(1)], torch.zeros(8, 4, 768)) is None  # no bucket 8
    stream.open()
    with caplog.at_level("WARNING"):
        stream.open()  # the pool is full: it grows, and the graphs (reading the old state) are dropped
    assert stream.graphs is None and "without its CUDA graphs" in caplog.text
    assert len(captured) == 15  # nothing was captured while serving
