"""The TTS pipeline end to end on the demo model: chunks, segments, cancellation, bad input."""

from __future__ import annotations

import asyncio
import json
import math
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from lyre.demo_model import DemoPaths
from lyre.engine import EngineConfig, FinishReason, SamplingParams
from lyre.orpheus import SAMPLES_PER_FRAME, VOICES
from lyre.tts import TTS, TextError, TTSConfig, load_voices


@pytest.fixture(scope="module")
def tts(demo: DemoPaths) -> Iterator[TTS]:
    engine = EngineConfig(max_batch=4, max_seq_len=1024)
    tts = TTS.load(demo.model, demo.codec, engine, TTSConfig(segment_chars=40))
    yield tts
    tts.close()


def _sampling(seed: int, max_tokens: int = 70) -> SamplingParams:
    return SamplingParams(seed=seed, max_tokens=max_tokens)


def test_chunks_are_int16_pcm_of_whole_frames_without_trim(tts: TTS) -> None:
    async def main() -> tuple[list[np.ndarray], object]:
        stream = tts.stream("Hello there.", "tara", _sampling(1), trim=False)
        return [c async for c in stream], stream

    chunks, stream = asyncio.run(main())
    assert chunks and all(c.dtype == np.int16 and c.ndim == 1 for c in chunks)
    total = sum(len(c) for c in chunks)
    assert total == stream.frames * SAMPLES_PER_FRAME and stream.frames == 10
    assert stream.trimmed_ms == 0 and stream.finish_reason is FinishReason.LENGTH
    assert len(chunks[0]) == SAMPLES_PER_FRAME  # first audio is one frame, out as soon as it can be


def test_same_seed_gives_the_same_audio_alone_or_beside_other_requests(tts: TTS) -> None:
    async def main() -> tuple[np.ndarray, list[np.ndarray]]:
        alone, _ = await tts.synthesize("Good morning.", "leo", _sampling(5), trim=False)
        busy = await asyncio.gather(*(tts.synthesize("Good morning.", "leo", _sampling(s), trim=False)
                                      for s in (5, 6, 7)))
        return alone, [pcm for pcm, _ in busy]

    alone, busy = asyncio.run(main())
    # The tokens are identical; where the windows fall depends on timing (how far
    # ahead of playback each stream is), and a window edge shifts the last bits of
    # the frames beside it. So: nearly identical audio, and another seed is not.
    assert len(alone) == len(busy[0])
    assert _snr_db(alone, busy[0]) > 25
    assert _snr_db(busy[0], busy[1]) < 5


def _snr_db(reference: np.ndarray, other: np.ndarray) -> float:
    ref = reference.astype(np.float64)
    noise = np.sum((ref - other.astype(np.float64)) ** 2)
    return float(10 * np.log10(np.sum(ref**2) / max(noise, 1e-9)))


def test_long_text_is_one_stream_of_segments_and_the_next_starts_before_the_last_plays(tts: TTS) -> None:
    text = "The first sentence is here. A second one follows it. And then a third, to finish."

    async def main():  # type: ignore[no-untyped-def]
        stream = tts.stream(text, "mia", _sampling(3, max_tokens=42), trim=False)
        return [c async for c in stream], stream

    chunks, stream = asyncio.run(main())
    assert stream.segments == 3
    assert sum(len(c) for c in chunks) == stream.frames * SAMPLES_PER_FRAME == 3 * 6 * SAMPLES_PER_FRAME
    for index in range(stream.segments - 1):
        # the next segment was submitted before this one's last chunk was handed out
        assert stream.segment_started[index + 1] < stream.segment_done[index]


def test_closing_the_stream_aborts_generation_and_frees_the_slot(tts: TTS) -> None:
    async def main() -> None:
        stream = tts.stream("This one is interrupted.", "zoe", _sampling(9, max_tokens=700), trim=False)
        await stream.__anext__()
        await stream.aclose()
        await asyncio.sleep(0.2)
        assert tts.engine.stats().running == 0
        assert tts.engine.scheduler.free_slots == 4
        assert stream.finish_reason in (None, FinishReason.ABORT)

    asyncio.run(main())


def test_cancelling_the_consumer_aborts_generation(tts: TTS) -> None:
    async def main() -> None:
        stream = tts.stream("This one is cancelled.", "dan", _sampling(10, max_tokens=700), trim=False)

        async def consume() -> None:
            async for _ in stream:
                pass

        task = asyncio.create_task(consume())
        while stream.first_chunk_at is None:
            await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await asyncio.sleep(0.2)
        assert tts.engine.stats().running == 0
        assert tts.codec.stats().queued == 0

    asyncio.run(main())


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"text": "   "}, TextError, "empty"),
        ({"text": "x" * 5000}, TextError, "5000"),
        ({"text": "Hi.", "voice": "nobody"}, ValueError, "unknown voice 'nobody'.*tara"),
        ({"text": "Hello there, how are you today?", "sampling": SamplingParams(max_tokens=1015)}, ValueError,
         "max_tokens: 1015 plus"),
    ],
)
def test_bad_input_is_refused_before_any_work(tts: TTS, kwargs: dict, error: type, match: str) -> None:
    with pytest.raises(error, match=match):
        tts.stream(**kwargs)
    assert tts.engine.stats().waiting == 0


def test_non_finite_sampling_values_are_refused() -> None:
    with pytest.raises(ValueError, match="temperature"):
        SamplingParams(temperature=math.inf)
    with pytest.raises(ValueError, match="top_p"):
        SamplingParams(top_p=math.nan)


def test_voices_come_from_the_model_folder(tmp_path: Path) -> None:
    assert load_voices(tmp_path).names == VOICES
    (tmp_path / "voices.json").write_text(json.dumps(["pierre", "amelie"]))
    assert load_voices(tmp_path).names == ("pierre", "amelie")
    (tmp_path / "voices.json").write_text("{not json")
    with pytest.raises(ValueError, match="voices.json"):
        load_voices(tmp_path)
