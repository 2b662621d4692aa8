"""The shared codec service (lyre.codec.service): each stream's frames decoded once, in calls shared by the
streams that have as many frames queued, most urgent first; its audio the whole utterance's decode; cancelling,
failing and closing free what a stream held."""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np
import pytest

from lyre.codec import BatchPolicy, CodecService, CodecServiceClosed, CodecWindow, SnacDecoder, load_snac
from lyre.models.demo import DemoPaths
from lyre.orpheus import SAMPLES_PER_FRAME, codes_to_snac_levels

from codec_cases import random_codes as frames, snr_db

# Long enough that a test's decodes are all queued before the deadline.
GATHER_MS = 200.0


@pytest.fixture(scope="module")
def decoder(demo: DemoPaths) -> SnacDecoder:
    return SnacDecoder(load_snac(demo.codec))


class Recorder:
    """Notes each call the service's streaming decoder makes: (rows, frames a row; 0 for finishes); a call
    holding a stream seeded ``fail_seed`` raises."""

    def __init__(self, service: CodecService) -> None:
        self.calls: list[tuple[int, int]] = []
        self.fail_seed: int | None = None
        snac = service.streaming
        push, finish = snac.push, snac.finish

        def recorded_push(feeds: Sequence[tuple[int, Sequence[Sequence[int]]]]) -> list[np.ndarray]:
            self.calls.append((len(feeds), len(feeds[0][1])))
            if any(snac._rows[slot].seed == self.fail_seed for slot, _ in feeds):
                raise RuntimeError("injected decode failure")
            return push(feeds)

        def recorded_finish(slots: Sequence[int]) -> list[np.ndarray]:
            self.calls.append((len(slots), 0))
            return finish(slots)

        snac.push, snac.finish = recorded_push, recorded_finish  # type: ignore[method-assign]


@pytest.fixture
def make_service(decoder: SnacDecoder) -> Iterator[Callable[..., tuple[CodecService, Recorder]]]:
    services: list[CodecService] = []

    def make(max_batch: int = 8, max_wait_ms: float = 0.0, max_frames: int = 4, **kw: Any) -> tuple[CodecService, Recorder]:
        service = CodecService(decoder, BatchPolicy(max_batch=max_batch, max_wait_ms=max_wait_ms,
                                                    max_frames=max_frames), **kw)
        services.append(service)
        return service, Recorder(service)

    yield make
    for service in services:
        service.close()


async def speak(service: CodecService, utterance: list[tuple[int, ...]], seed: int, split: list[int]) -> np.ndarray:
    stream = service.open(seed)
    out, at = [], 0
    for n in split:
        out.append(await stream.decode(utterance[at:at + n]))
        at += n
        await asyncio.sleep(random.random() * 0.01)
    out.append(await stream.finish())
    return np.concatenate(out)


def test_streams_sharing_the_service_each_get_their_whole_decode(decoder: SnacDecoder, make_service) -> None:
    service, recorder = make_service(max_batch=4, max_frames=2)
    utterances = [frames(n, 10 + k) for k, n in enumerate((7, 12, 4))]
    splits = [[1, 3, 2, 1], [2, 2, 5, 1, 1, 1], [4]]  # 3 and 5 frames go in calls of at most 2

    async def main() -> list[np.ndarray]:
        return await asyncio.gather(*(speak(service, u, k, s) for k, (u, s) in enumerate(zip(utterances, splits))))

    for k, (utterance, audio) in enumerate(zip(utterances, asyncio.run(main()))):
        whole = decoder.decode(codes_to_snac_levels(utterance), seed=k)
        assert audio.shape == (len(utterance) * SAMPLES_PER_FRAME,)
        assert snr_db(whole, audio) >= 100, k
    assert all(rows <= 4 and per_row <= 2 for rows, per_row in recorder.calls)
    stats = service.stats()
    assert stats.frames >= 23 and stats.dropped == 0 and stats.queued == 0 and stats.streams == 0
    assert service.streaming.open_slots == 0


def test_streams_with_as_many_frames_queued_share_one_call(make_service) -> None:
    service, recorder = make_service(max_batch=4, max_wait_ms=GATHER_MS)

    async def main() -> list[np.ndarray]:
        streams = [service.open(seed) for seed in range(5)]
        return await asyncio.gather(*(s.decode(frames(3, k)) for k, s in enumerate(streams[:4])),
                                    streams[4].decode(frames(1, 9)))

    audio = asyncio.run(main())
    # The four of 3 frames (the most urgent first: they came first) fill a call; the one of 1 goes alone.
    assert recorder.calls == [(4, 3), (1, 1)]
    assert [len(a) for a in audio] == [3 * SAMPLES_PER_FRAME - service.lookahead] * 4 + [0]
    stats = service.stats()
    assert (stats.batches, stats.max_batch, stats.mean_batch) == (2, 4, 2.5)


def test_the_first_audio_comes_with_the_third_frame_and_a_frame_a_call_after(make_service) -> None:
    service, _ = make_service()
    utterance = frames(6, 3)

    async def main() -> list[int]:
        stream = service.open(1)
        return [len(await stream.decode([frame])) for frame in utterance] + [len(await stream.finish())]

    lengths = asyncio.run(main())
    assert service.lookahead == 4757  # SNAC 24 kHz: 2.3 frames
    assert lengths == [0, 0, 3 * SAMPLES_PER_FRAME - 4757, SAMPLES_PER_FRAME, SAMPLES_PER_FRAME, SAMPLES_PER_FRAME,
                       4757]


def test_the_most_urgent_stream_is_decoded_first(make_service) -> None:
    service, recorder = make_service(max_batch=1)
    order: list[int] = []

    async def decode(stream: Any, n: int, due_in: float) -> None:
        await stream.decode(frames(n, n), due=time.monotonic() + due_in)
        order.append(n)

    async def main() -> None:
        streams = [service.open(seed) for seed in range(4)]
        first = asyncio.create_task(decode(streams[0], 1, 0.0))
        while not recorder.calls:  # the worker has taken the first
            await asyncio.sleep(0.001)
        await asyncio.gather(first, decode(streams[1], 2, 3.0), decode(streams[2], 3, 1.0),
                             decode(streams[3], 4, 2.0))

    asyncio.run(main())
    assert order == [1, 3, 4, 2]
    assert recorder.calls == [(1, 1), (1, 3), (1, 4), (1, 2)]


def test_streams_far_ahead_wait_longer_to_share_a_call(make_service) -> None:
    service, recorder = make_service(max_batch=4, max_wait_ms=40.0)

    async def main() -> None:
        async def decode(seed: int, due_in: float, after: float) -> None:
            stream = service.open(seed)
            await asyncio.sleep(after)
            await stream.decode(frames(2, seed), due=time.monotonic() + due_in)

        # One due now goes after max_wait (40 ms) alone; two due in 5 s wait up to FAR_WAIT_FACTOR x 40 ms, so
        # the third, 70 ms later, still joins their call.
        await asyncio.gather(decode(1, 0.0, 0.0), decode(2, 5.0, 0.5), decode(3, 5.0, 0.5), decode(4, 5.0, 0.57))

    asyncio.run(main())
    assert recorder.calls == [(1, 2), (3, 2)]


def test_a_cancelled_decode_closes_its_stream_and_frees_its_slot(make_service) -> None:
    service, recorder = make_service(max_batch=2, max_wait_ms=GATHER_MS)

    async def main() -> None:
        stream, other = service.open(1), service.open(2)
        task = asyncio.create_task(stream.decode(frames(2, 1)))
        await asyncio.sleep(0.02)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert stream.closed
        with pytest.raises(CodecServiceClosed, match="closed"):
            await stream.decode(frames(1, 1))
        assert len(await other.decode(frames(3, 2))) == 3 * SAMPLES_PER_FRAME - service.lookahead
        other.close()

    asyncio.run(main())
    stats = service.stats()
    assert stats.dropped == 1 and stats.streams == 0 and stats.queued == 0
    assert recorder.calls == [(1, 3)]  # the cancelled one's frames never reached the decoder
    asyncio.run(_one_more(service))  # the next call frees the closed stream's slot first
    assert service.streaming.open_slots == 0


async def _one_more(service: CodecService) -> None:
    stream = service.open(7)
    await stream.decode(frames(1, 7))
    await stream.finish()


def test_a_failed_call_fails_its_streams_alone_and_the_worker_carries_on(make_service) -> None:
    service, recorder = make_service(max_batch=1)
    recorder.fail_seed = 666

    async def main() -> None:
        bad, good = service.open(666), service.open(5)
        with pytest.raises(RuntimeError, match="injected"):
            await bad.decode(frames(2, 1))
        bad.close()
        assert len(await good.decode(frames(3, 5))) == 3 * SAMPLES_PER_FRAME - service.lookahead
        await good.finish()

    asyncio.run(main())
    asyncio.run(_one_more(service))
    assert service.streaming.open_slots == 0 and service.stats().streams == 0


def test_bad_frames_are_named_and_nothing_is_queued(make_service) -> None:
    service, recorder = make_service()

    async def main() -> None:
        stream = service.open(1)
        with pytest.raises(ValueError, match="frame 1 has a code outside"):
            await stream.decode([(1,) * 7, (1, 2, 3, 4, 5, 6, 4096)])
        with pytest.raises(ValueError, match="frame 0 has 6 codes"):
            await stream.decode([(1,) * 6])
        with pytest.raises(ValueError, match="at least one frame"):
            await stream.decode([])
        assert len(await stream.finish()) == 0  # it never had a frame: nothing to bring out
        with pytest.raises(ValueError, match="seed"):
            service.open(-1)

    asyncio.run(main())
    assert recorder.calls == [] and service.stats().streams == 0


def test_the_pool_of_slots_grows_when_every_one_is_taken(decoder: SnacDecoder, make_service) -> None:
    service, _ = make_service(slots=2)
    utterances = [frames(4, 20 + k) for k in range(5)]

    async def main() -> list[np.ndarray]:
        return await asyncio.gather(*(speak(service, u, k, [2, 2]) for k, u in enumerate(utterances)))

    for k, (utterance, audio) in enumerate(zip(utterances, asyncio.run(main()))):
        assert snr_db(decoder.decode(codes_to_snac_levels(utterance), seed=k), audio) >= 100
    assert service.streaming.slots >= 5


def test_close_fails_pending_decodes(make_service) -> None:
    service, _ = make_service(max_batch=4, max_wait_ms=60_000.0)

    async def main() -> None:
        tasks = [asyncio.create_task(service.open(i).decode(frames(1, i))) for i in range(2)]
        await asyncio.sleep(0.02)
        service.close()
        for task in tasks:
            with pytest.raises(CodecServiceClosed):
                await asyncio.wait_for(task, timeout=5)
        with pytest.raises(CodecServiceClosed):
            service.open(5)

    asyncio.run(main())
    assert service.stats().batches == 0
    service.close()  # idempotent


def test_batch_policy() -> None:
    assert BatchPolicy.for_device("cuda:0") == BatchPolicy(max_batch=64, max_wait_ms=15.0, max_frames=4)
    cpu = BatchPolicy.for_device("cpu")
    assert cpu.max_batch >= 1 and cpu.max_wait_ms == 0
    with pytest.raises(ValueError, match="max_batch"):
        BatchPolicy(max_batch=0)
    with pytest.raises(ValueError, match="max_wait_ms"):
        BatchPolicy(max_wait_ms=-1)
    with pytest.raises(ValueError, match="max_frames"):
        BatchPolicy(max_frames=0)


def test_the_warm_cost_leaves_out_each_shapes_first_call(make_service) -> None:
    service, _ = make_service(max_batch=2)
    cold_s = 1.0  # 250 ms a frame on a call of 4: far above any real decode of the demo codec
    push, seen = service.streaming.push, set()

    def cold_first(feeds: Sequence[tuple[int, Sequence[Sequence[int]]]]) -> list[np.ndarray]:
        if (shape := (len(feeds), len(feeds[0][1]))) not in seen:
            seen.add(shape)
            time.sleep(cold_s)
        return push(feeds)

    service.streaming.push = cold_first  # type: ignore[method-assign]
    stream = service.open(1)

    async def decode(n: int) -> None:
        await stream.decode(frames(n, n))

    asyncio.run(decode(4))
    assert service.recent_seconds_per_frame > cold_s / 4  # every call counts in the recent cost...
    assert service.warm_seconds_per_frame == 0.0  # ...but no shape has been decoded warm yet
    asyncio.run(decode(4))
    warm = service.warm_seconds_per_frame
    assert 0.0 < warm < cold_s / 4 / 2  # the second call of the shape alone
    assert service.recent_seconds_per_frame > cold_s / 4 / 2  # the median of both holds half the cold one
    asyncio.run(decode(3))  # a new shape: cold again, left out of the warm cost
    assert service.warm_seconds_per_frame == warm


def test_windows_like_the_reference_decoder_are_far_from_the_whole_decode(decoder: SnacDecoder,
                                                                           make_service) -> None:
    """What the stream replaces: the Orpheus reference's windows (4 frames for each new one, the second kept)
    seam where their context runs out; the stream is the whole decode to float rounding."""
    service, _ = make_service()
    utterance = frames(16, 4)
    whole = decoder.decode(codes_to_snac_levels(utterance), seed=3)
    windows = [CodecWindow(tuple(utterance[i - 3:i + 1]), start_frame=i - 3, keep=(1, 2), seed=3)
               for i in range(3, len(utterance))]
    reference = np.concatenate([decoder.decode_windows([w])[0] for w in windows])
    assert snr_db(whole[SAMPLES_PER_FRAME:(len(utterance) - 2) * SAMPLES_PER_FRAME], reference) < 60
    assert snr_db(whole, asyncio.run(speak(service, utterance, 3, [1] * 16))) >= 100


def test_a_stream_closed_as_its_call_takes_its_first_slot_still_frees_it(make_service) -> None:
    service, recorder = make_service()
    slot_for = service._slot

    def closed_first(stream: Any) -> int:  # the stream closes between the call's forming and its slot's opening
        if stream.seed == 13:
            service.drop(stream)
        return slot_for(stream)

    service._slot = closed_first  # type: ignore[method-assign]

    async def main() -> None:
        with pytest.raises(CodecServiceClosed):
            await service.open(13).decode(frames(1, 13))
        await _one_more(service)  # its call frees the closed stream's slot first

    asyncio.run(main())
    assert service.streaming.open_slots == 0 and service.stats().streams == 0
