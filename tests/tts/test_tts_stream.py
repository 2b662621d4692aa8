"""The TTS pipeline end to end on the demo model: chunks, segments, text in pieces, cancellation, bad input."""

from __future__ import annotations

import asyncio
import gc
import math
import time
from collections.abc import Iterator

import numpy as np
import pytest

from lyre.models.demo import DemoPaths
from lyre.engine import FinishReason
from lyre.orpheus import SAMPLES_PER_FRAME
from lyre.tts import TTS, IdleStream, ServingConfig, SpeechOptions, TextError, TextOptions, TTSConfig
from polling import eventually, eventually_async


@pytest.fixture(scope="module")
def tts(demo: DemoPaths) -> Iterator[TTS]:
    tts = TTS.load(demo.model, demo.codec, ServingConfig(max_streams=4, max_seq_len=1024),
                   TTSConfig(segment_chars=40, flush_after_s=0.4))
    yield tts
    tts.close()


def _options(seed: int, max_tokens: int = 70) -> SpeechOptions:
    return SpeechOptions(seed=seed, max_tokens=max_tokens)


def _snr_db(reference: np.ndarray, other: np.ndarray) -> float:
    ref = reference.astype(np.float64)
    noise = np.sum((ref - other.astype(np.float64)) ** 2)
    return float(10 * np.log10(np.sum(ref**2) / max(noise, 1e-9)))


def test_chunks_are_int16_pcm_of_whole_frames_without_trim(tts: TTS) -> None:
    async def main() -> tuple[list[np.ndarray], object]:
        stream = tts.stream("Hello there.", "tara", _options(1), trim=False)
        return [c async for c in stream], stream

    chunks, stream = asyncio.run(main())
    assert chunks and all(c.dtype == np.int16 and c.ndim == 1 for c in chunks)
    total = sum(len(c) for c in chunks)
    assert total == stream.frames * SAMPLES_PER_FRAME and stream.frames == 10
    assert stream.trimmed_ms == 0 and stream.finish_reason is FinishReason.LENGTH
    # The first chunk: the audio of whole frames but the codec's lookahead (what follows it waits for the next
    # frames), of at least three frames (the first audio the lookahead lets out), as the measured rates ask
    # (lyre.tts.pacing).
    first = len(chunks[0]) + tts.codec.lookahead
    assert first % SAMPLES_PER_FRAME == 0 and first >= 3 * SAMPLES_PER_FRAME
    assert 0 < stream.ttfa_s < 30


def test_same_seed_gives_the_same_start_alone_or_beside_other_requests(tts: TTS) -> None:
    async def main() -> tuple[np.ndarray, list[np.ndarray]]:
        alone, _ = await tts.synthesize("Good morning.", "leo", _options(5), trim=False)
        busy = await asyncio.gather(*(tts.synthesize("Good morning.", "leo", _options(s), trim=False)
                                      for s in (5, 6, 7)))
        return alone, [pcm for pcm, _ in busy]

    alone, busy = asyncio.run(main())
    # The same seed draws the same numbers in a batch, but batched logits equal the lone ones only within
    # float error, so on some CPU a draw partway through may fall the other way and the two part from there
    # (docs/architecture/engine.md, Sampling). The first frames come from the first few draws, which float error cannot flip in
    # practice. So: a nearly identical start, and another seed's is not.
    start = 3 * SAMPLES_PER_FRAME
    assert min(len(alone), len(busy[0]), len(busy[1])) >= start
    assert _snr_db(alone[:start], busy[0][:start]) > 25
    assert _snr_db(busy[0][:start], busy[1][:start]) < 5


def test_long_text_is_one_stream_of_segments_and_the_next_starts_before_the_last_plays(tts: TTS) -> None:
    text = "The first sentence is here. A second one follows it. And then a third, to finish."

    async def main():  # type: ignore[no-untyped-def]
        stream = tts.stream(text, "mia", _options(3, max_tokens=42), trim=False)
        return [c async for c in stream], stream

    chunks, stream = asyncio.run(main())
    assert stream.segments == 3 and len(stream.finish_reasons) == 3
    assert sum(len(c) for c in chunks) == stream.frames * SAMPLES_PER_FRAME == 3 * 6 * SAMPLES_PER_FRAME
    for index in range(stream.segments - 1):
        # the next segment was submitted before this one's last chunk was handed out
        assert stream.segment_started[index + 1] < stream.segment_done[index]


def test_text_in_pieces_is_one_stream_with_one_seed_and_no_gap_at_sentence_boundaries(tts: TTS) -> None:
    pieces = ["The first sen", "tence is here. A sec", "ond one follows it. ", "And then a third, to finish."]

    async def main():  # type: ignore[no-untyped-def]
        stream = tts.open("mia", _options(3, max_tokens=42), trim=False)
        for piece in pieces:  # all of it before the first audio: every segment is ready in time
            stream.push(piece)
        stream.end()
        return [c async for c in stream], stream

    chunks, stream = asyncio.run(main())
    assert stream.segments == 3 and stream.frames == 18
    for index in range(stream.segments - 1):
        assert stream.segment_started[index + 1] < stream.segment_done[index]
    # The same seed and segments as the whole text at once: the same audio (the codec decodes each stream
    # exactly, however its frames come; the bound leaves room for a draw flipped by float error).
    whole, _ = asyncio.run(tts.synthesize("".join(pieces), "mia", _options(3, max_tokens=42), trim=False))
    assert len(whole) == sum(len(c) for c in chunks)
    assert _snr_db(whole, np.concatenate(chunks)) > 25


def test_time_to_first_audio_counts_from_the_first_text(tts: TTS) -> None:
    async def main():  # type: ignore[no-untyped-def]
        stream = tts.open("zoe", _options(4, max_tokens=28), trim=False)
        consumer = asyncio.create_task(_drain(stream))
        await asyncio.sleep(0.5)  # nobody has said anything yet: this is not the stream's latency
        sent = time.perf_counter()
        stream.push("Now it speaks.")
        stream.end()
        await consumer
        return stream, sent

    stream, sent = asyncio.run(main())
    assert stream.started_at == pytest.approx(sent, abs=0.01)
    assert stream.ttfa_s == pytest.approx(stream.first_chunk_at - sent, abs=0.01)


async def _drain(stream: object) -> list[np.ndarray]:
    return [c async for c in stream]  # type: ignore[attr-defined]


def test_pending_text_without_a_sentence_end_is_spoken_after_a_pause(tts: TTS) -> None:
    async def main() -> float:
        stream = tts.open("dan", _options(6, max_tokens=14), trim=False)
        stream.push("no full stop here")
        start = time.perf_counter()
        chunk = await stream.__anext__()
        await stream.aclose()
        assert len(chunk) > 0
        return time.perf_counter() - start

    waited = asyncio.run(main())
    assert waited >= tts.config.flush_after_s


def test_a_stream_whose_text_stops_coming_ends_with_an_error(tts: TTS) -> None:
    async def main() -> None:
        stream = tts.open("dan", _options(6, max_tokens=14), idle_timeout_s=0.3)
        with pytest.raises(IdleStream, match="idle for 0.3 s"):
            await stream.__anext__()

    asyncio.run(main())
    assert eventually(lambda: tts.engine.stats().running == 0)


def test_after_the_first_chunk_the_engine_knows_when_the_listener_runs_dry(tts: TTS) -> None:
    async def main() -> tuple[float | None, float, float]:
        stream = tts.stream("Deadlines, please.", "leo", _options(8, max_tokens=700), trim=False)
        await stream.__anext__()
        request = stream._live[0].request
        deadline, made, pace = request.deadline, len(request.output_ids), request.pace
        await stream.aclose()
        return deadline, made * pace, stream.clock.started_at

    deadline, made_s, started = asyncio.run(main())
    assert deadline is not None and deadline == pytest.approx(started + made_s, abs=0.2)


def test_closing_the_stream_aborts_generation_and_frees_the_slot(tts: TTS) -> None:
    async def main() -> None:
        stream = tts.stream("This one is interrupted.", "zoe", _options(9, max_tokens=700), trim=False)
        await stream.__anext__()
        await stream.aclose()
        assert await eventually_async(lambda: tts.engine.stats().running == 0)
        assert tts.engine.scheduler.free_slots == 4
        assert stream.finish_reason in (None, FinishReason.ABORT)

    asyncio.run(main())


def test_an_engine_stream_nobody_holds_any_more_is_aborted(tts: TTS) -> None:
    async def main() -> None:
        stream = tts.engine.generate([128259, 128000, 9906, 13, 128009, 128260, 128261, 128257],
                                     _options(11, max_tokens=700).sampling(768))
        await stream.take(1)
        del stream  # broke out of its loop without closing it
        gc.collect()
        assert await eventually_async(lambda: tts.engine.stats().running == 0)

    asyncio.run(main())


def test_cancelling_the_consumer_aborts_generation(tts: TTS) -> None:
    async def main() -> None:
        stream = tts.stream("This one is cancelled.", "dan", _options(10, max_tokens=700), trim=False)
        task = asyncio.create_task(_drain(stream))
        assert await eventually_async(lambda: stream.first_chunk_at is not None)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert await eventually_async(lambda: tts.engine.stats().running == 0 and tts.codec.stats().queued == 0)

    asyncio.run(main())


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"text": "   "}, TextError, "empty"),
        ({"text": "x" * 5000}, TextError, "5000"),
        ({"text": "Hi.", "voice": "nobody"}, ValueError, "unknown voice 'nobody'.*tara"),
        ({"text": "Hello there.", "options": SpeechOptions(max_tokens=1015)}, ValueError,
         "max_tokens: 1015 is over this server's limit of 768"),
        ({"text": "<speak><sub>Hi</sub></speak>", "reading": TextOptions(ssml=True)}, ValueError, "needs an alias"),
    ],
)
def test_bad_input_is_refused_before_any_work(tts: TTS, kwargs: dict, error: type, match: str) -> None:
    gc.disable()  # the refused stream's listener must leave at once, not whenever a collection finds it
    try:
        with pytest.raises(error, match=match):
            tts.stream(**kwargs)
        assert tts.engine.stats().waiting == 0
        assert len(tts.context.listeners) == 0  # else the next client is refused for streams that never ran
    finally:
        gc.enable()


def test_text_pushed_past_the_limit_is_refused() -> None:
    from lyre.tts.intake import TextIntake

    intake = TextIntake(max_chars=10, segment_chars=40, flush_after_s=1.0)
    intake.push("x" * 10)
    with pytest.raises(TextError, match="11 characters, over the limit of 10"):
        intake.push("y")
    intake.end()
    with pytest.raises(TextError, match="ended"):
        intake.push("z")


@pytest.mark.parametrize(("field", "value"), [("temperature", math.inf), ("top_p", math.nan), ("top_k", -1),
                                              ("max_tokens", 0), ("seed", -1)])
def test_bad_options_are_refused_naming_the_field(field: str, value: float) -> None:
    with pytest.raises(ValueError, match=field):
        SpeechOptions(**{field: value})
