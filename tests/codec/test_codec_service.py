"""The shared codec service: batching by shape, fairness, cancellation, close."""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Callable, Iterator, Sequence

import numpy as np
import pytest
import torch
from snac import SNAC

from lyre.codec import BatchPolicy, CodecService, CodecServiceClosed, CodecWindow, SnacDecoder, load_snac
from lyre.models.demo import DemoPaths

# Batched and single decodes run different conv kernels: equal to float32 rounding.
BATCH_TOL = {"rtol": 1e-5, "atol": 1e-5}
# Long enough that a test's windows are all queued before the deadline.
GATHER_MS = 200.0
FAULTY_SEED = 2**40  # no other test window uses it


def window(n: int, seed: int, start: int = 0, keep: tuple[int, int] | None = None) -> CodecWindow:
    rng = random.Random(seed)
    frames = tuple(tuple(rng.randrange(4096) for _ in range(7)) for _ in range(n))
    return CodecWindow(frames, start_frame=start, keep=keep or (0, n), seed=seed)


class RecordingDecoder(SnacDecoder):
    """The real decoder, noting the frame counts of every batch it decodes;
    a window seeded FAULTY_SEED makes its batch fail."""

    def __init__(self, model: SNAC) -> None:
        super().__init__(model)
        self.batches: list[list[int]] = []

    def decode_windows(self, windows: Sequence[CodecWindow]) -> list[np.ndarray]:
        self.batches.append([w.n_frames for w in windows])
        if any(w.seed == FAULTY_SEED for w in windows):
            raise RuntimeError("injected decode failure")
        return super().decode_windows(windows)


@pytest.fixture(scope="module")
def decoder(demo: DemoPaths) -> RecordingDecoder:
    return RecordingDecoder(load_snac(demo.codec))


@pytest.fixture
def make_service(decoder: RecordingDecoder) -> Iterator[Callable[..., CodecService]]:
    services: list[CodecService] = []

    def make(max_batch: int, max_wait_ms: float) -> CodecService:
        decoder.batches.clear()
        services.append(CodecService(decoder, BatchPolicy(max_batch=max_batch, max_wait_ms=max_wait_ms)))
        return services[-1]

    yield make
    for service in services:
        service.close()


def assert_audio(actual: np.ndarray, expected: np.ndarray) -> None:
    torch.testing.assert_close(torch.from_numpy(actual), torch.from_numpy(expected), **BATCH_TOL)


def test_concurrent_decodes_get_their_own_audio(decoder: RecordingDecoder, make_service) -> None:
    service = make_service(max_batch=4, max_wait_ms=20.0)
    windows = [window(n=1 + i % 2, seed=i, start=3 * i, keep=(0, 1)) for i in range(6)]

    async def main() -> list[np.ndarray]:
        return await asyncio.gather(*(service.decode(w) for w in windows))

    results = asyncio.run(main())
    for w, audio in zip(windows, results):
        assert_audio(audio, decoder.decode_windows([w])[0])
    stats = service.stats()
    assert stats.windows == 6 and stats.frames == 9 and stats.dropped == 0 and stats.queued == 0
    assert stats.batches < 6  # some windows shared a call
    assert len(stats.recent_waits_s) == 6 and stats.queue_wait_max_s <= stats.queue_wait_total_s


def test_same_shape_windows_form_one_batch(decoder: RecordingDecoder, make_service) -> None:
    service = make_service(max_batch=4, max_wait_ms=GATHER_MS)

    async def main() -> None:
        await asyncio.gather(*(service.decode(window(n=1, seed=i)) for i in range(4)))

    asyncio.run(main())
    stats = service.stats()
    assert (stats.batches, stats.last_batch, stats.max_batch, stats.mean_batch) == (1, 4, 4, 4.0)
    # A full batch goes at once, without waiting out max_wait_ms.
    assert stats.queue_wait_max_s < GATHER_MS / 1000


def test_shapes_are_never_mixed(decoder: RecordingDecoder, make_service) -> None:
    service = make_service(max_batch=4, max_wait_ms=GATHER_MS)
    windows = [window(n=1 + i % 2, seed=i) for i in range(5)]

    async def main() -> list[np.ndarray]:
        return await asyncio.gather(*(service.decode(w) for w in windows))

    results = asyncio.run(main())
    assert sorted(decoder.batches) == [[1, 1, 1], [2, 2]]
    assert [len(audio) for audio in results] == [2048 * w.n_frames for w in windows]


def test_max_batch_one_decodes_singly(decoder: RecordingDecoder, make_service) -> None:
    service = make_service(max_batch=1, max_wait_ms=0.0)

    async def main() -> None:
        await asyncio.gather(*(service.decode(window(n=1, seed=i)) for i in range(4)))

    asyncio.run(main())
    assert decoder.batches == [[1]] * 4
    assert service.stats().max_batch == 1


def test_cancelled_decodes_are_dropped(decoder: RecordingDecoder, make_service) -> None:
    service = make_service(max_batch=2, max_wait_ms=GATHER_MS)

    async def main() -> np.ndarray:
        # Queued: skipped, never decoded.
        queued = asyncio.create_task(service.decode(window(n=1, seed=1)))
        await asyncio.sleep(0.02)
        queued.cancel()
        with pytest.raises(asyncio.CancelledError):
            await queued
        # Already decoding: the result is discarded.
        running = asyncio.create_task(service.decode(window(n=4, seed=2)))
        while service.stats().queued or not decoder.batches:
            await asyncio.sleep(0.001)
        running.cancel()
        with pytest.raises(asyncio.CancelledError):
            await running
        return await service.decode(window(n=1, seed=3))

    audio = asyncio.run(main())
    assert_audio(audio, decoder.decode_windows([window(n=1, seed=3)])[0])
    stats = service.stats()
    assert stats.dropped == 2
    assert stats.windows == 2  # the running one and the last; the queued one never ran


def test_other_shape_is_not_starved(decoder: RecordingDecoder, make_service) -> None:
    service = make_service(max_batch=2, max_wait_ms=0.0)
    in_flight = 4  # shape-A windows kept queued at all times
    total = 12
    served_after: list[int] = []

    async def main() -> None:
        a_flowing = asyncio.Event()
        await asyncio.gather(stream_a(a_flowing), one_b(a_flowing))

    async def stream_a(flowing: asyncio.Event) -> None:
        pending: set[asyncio.Task] = set()
        for i in range(total):
            pending.add(asyncio.create_task(service.decode(window(n=1, seed=i))))
            if len(pending) >= in_flight:
                done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
                for task in done:
                    task.result()
                flowing.set()
        await asyncio.gather(*pending)

    async def one_b(a_flowing: asyncio.Event) -> None:
        await a_flowing.wait()
        submitted = len(decoder.batches)
        await service.decode(window(n=2, seed=99))
        served_after.append(len(decoder.batches) - submitted)

    asyncio.run(main())
    b_batch = decoder.batches.index([2])
    assert decoder.batches[b_batch + 1 :], "shape A was still arriving when B was served"
    # At most the running batch plus the A windows queued before B go first.
    assert served_after[0] <= 1 + in_flight // 2 + 1


def test_decode_errors_reach_the_caller_and_the_worker_survives(decoder: RecordingDecoder, make_service) -> None:
    service = make_service(max_batch=1, max_wait_ms=0.0)

    async def main() -> np.ndarray:
        with pytest.raises(RuntimeError, match="injected"):
            await service.decode(window(n=1, seed=FAULTY_SEED))
        return await service.decode(window(n=1, seed=4))

    assert len(asyncio.run(main())) == 2048


def test_close_fails_pending_decodes(make_service) -> None:
    service = make_service(max_batch=4, max_wait_ms=60_000.0)

    async def main() -> None:
        tasks = [asyncio.create_task(service.decode(window(n=1, seed=i))) for i in range(2)]
        await asyncio.sleep(0.02)
        service.close()
        for task in tasks:
            with pytest.raises(CodecServiceClosed):
                await asyncio.wait_for(task, timeout=5)
        with pytest.raises(CodecServiceClosed):
            await service.decode(window(n=1, seed=5))

    asyncio.run(main())
    assert service.stats().windows == 0
    service.close()  # idempotent


def test_batch_policy() -> None:
    assert BatchPolicy.for_device("cuda:0") == BatchPolicy(max_batch=64, max_wait_ms=15.0)
    cpu = BatchPolicy.for_device("cpu")
    assert cpu.max_batch >= 1 and cpu.max_wait_ms >= 0
    with pytest.raises(ValueError, match="max_batch"):
        BatchPolicy(max_batch=0)
    with pytest.raises(ValueError, match="max_wait_ms"):
        BatchPolicy(max_wait_ms=-1)


def test_the_most_urgent_window_is_decoded_first(decoder: RecordingDecoder, make_service) -> None:
    # max_batch 1: while the first window decodes, three more queue with different due times.
    service = make_service(max_batch=1, max_wait_ms=0.0)
    order: list[int] = []

    async def decode(n: int, due_in: float) -> None:
        await service.decode(window(n=n, seed=n), due=time.monotonic() + due_in)
        order.append(n)

    async def main() -> None:
        first = asyncio.create_task(decode(1, 0.0))
        while not decoder.batches:  # the worker has taken the first window
            await asyncio.sleep(0.001)
        await asyncio.gather(first, decode(2, 3.0), decode(3, 1.0), decode(4, 2.0))

    asyncio.run(main())
    assert order == [1, 3, 4, 2]
    assert decoder.batches == [[1], [3], [4], [2]]


def test_windows_far_ahead_wait_longer_to_share_a_batch(decoder: RecordingDecoder, make_service) -> None:
    service = make_service(max_batch=4, max_wait_ms=40.0)

    async def main() -> list[float]:
        async def timed(seed: int, due_in: float, after: float) -> float:
            await asyncio.sleep(after)
            start = time.monotonic()
            await service.decode(window(n=2, seed=seed), due=time.monotonic() + due_in)
            return time.monotonic() - start

        # A window due now goes after max_wait (40 ms) with whatever joined it; two windows due in
        # 5 s wait up to FAR_WAIT_FACTOR x 40 ms, so the third, 70 ms later, still joins their batch.
        return await asyncio.gather(timed(1, 0.0, 0.0), timed(2, 5.0, 0.5), timed(3, 5.0, 0.5),
                                    timed(4, 5.0, 0.57))

    asyncio.run(main())
    assert decoder.batches == [[2], [2, 2, 2]]


class ColdFirstDecoder(SnacDecoder):
    """The real decoder, plus ``cold_s`` of waiting the first time it meets a batch shape, as building a
    shape's kernels costs on a device."""

    def __init__(self, model: SNAC, cold_s: float) -> None:
        super().__init__(model)
        self.cold_s = cold_s
        self.seen: set[tuple[int, int]] = set()

    def decode_windows(self, windows: Sequence[CodecWindow]) -> list[np.ndarray]:
        if (shape := (windows[0].n_frames, len(windows))) not in self.seen:
            self.seen.add(shape)
            time.sleep(self.cold_s)
        return super().decode_windows(windows)


def test_the_warm_cost_leaves_out_each_shapes_first_decode(demo: DemoPaths) -> None:
    cold_s = 1.0  # 250 ms a frame on a 4-frame window: far above any real decode of the demo codec
    service = CodecService(ColdFirstDecoder(load_snac(demo.codec), cold_s), BatchPolicy(max_batch=2, max_wait_ms=0.0))
    try:
        async def decode(*windows: CodecWindow) -> None:
            await asyncio.gather(*(service.decode(w) for w in windows))

        asyncio.run(decode(window(n=4, seed=1)))
        assert service.recent_seconds_per_frame > cold_s / 4  # every decode counts in the recent cost...
        assert service.warm_seconds_per_frame == 0.0  # ...but no shape has been decoded warm yet
        asyncio.run(decode(window(n=4, seed=2)))
        warm = service.warm_seconds_per_frame
        assert 0.0 < warm < cold_s / 4 / 2  # the second decode of the shape alone
        assert service.recent_seconds_per_frame > cold_s / 4 / 2  # the median of both holds half the cold one
        asyncio.run(decode(window(n=5, seed=3)))  # a new shape: cold again, left out of the warm cost
        assert service.warm_seconds_per_frame == warm
    finally:
        service.close()
