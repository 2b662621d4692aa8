"""The engine end to end on the demo model: batching, joining, aborting, constraints."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator

import pytest
import torch
from transformers import LlamaForCausalLM

from forcing import assert_rows_match, forced_run, request
from lyre import orpheus
from lyre.models.demo import DemoPaths
from lyre.engine import (
    Engine,
    EngineConfig,
    EngineFull,
    FinishReason,
    PeriodicConstraint,
    Playback,
    RequestStream,
    RequestTooLong,
    SamplingParams,
)
from lyre.models.llama import Llama
from lyre.models.loader import load_llama
from lyre.engine.runner import ModelRunner
from lyre.engine.sequence import Request
from polling import eventually_async

AUDIO = PeriodicConstraint(
    tuple((r.start, r.stop) for r in map(orpheus.position_range, range(7))), boundary_ids=(orpheus.STOP_TOKEN,)
)
PROMPTS = [
    [128259, 128000, 83, 5169, 25, 22691, 13, 128009, 128260, 128261, 128257],
    [128259, 128000, 273, 64, 25, 3923, 264, 6555, 1938, 369, 264, 4321, 13, 128009, 128260, 128261, 128257],
    [128259, 128000, 40, 1093, 13, 128009, 128260, 128261, 128257],
    [128259, 128000, 9906, 1070, 11, 1268, 527, 499, 3432, 30, 128009, 128260, 128261, 128257],
]


@pytest.fixture(scope="module")
def model(demo: DemoPaths) -> Llama:
    return load_llama(demo.model, max_seq_len=1024, device="cpu", dtype="float32")


@pytest.fixture
def make_engine(model: Llama) -> Iterator[Callable[..., Engine]]:
    engines: list[Engine] = []

    def make(**kwargs: int) -> Engine:
        config = EngineConfig(**{"max_batch": 8, "max_seq_len": 1024, **kwargs})
        engines.append(Engine(model, config))
        return engines[-1]

    yield make
    for engine in engines:
        engine.shutdown()


async def _collect(stream: RequestStream) -> list[int]:
    return [token async for token in stream]


def _speech(seed: int, max_tokens: int = 56, **kwargs: float) -> SamplingParams:
    return SamplingParams(seed=seed, max_tokens=max_tokens, stop_ids=(orpheus.STOP_TOKEN,), **kwargs)


def test_requests_batched_together_get_the_logits_each_gets_alone(model: Llama) -> None:
    runner = ModelRunner(model, EngineConfig(max_batch=8, max_seq_len=1024), AUDIO.family)

    def reqs() -> list[Request]:
        return [request(p, i, _speech(i), i, constraint=AUDIO) for i, p in enumerate(PROMPTS)]

    alone = [forced_run(runner, [req], 21)[0] for req in reqs()]  # three frames, two frame boundaries
    together = forced_run(runner, reqs(), 21, feed=[a.fed for a in alone])
    assert_rows_match(together, alone, atol=1e-4)  # prompts of four lengths, right-padded into one prefill
    assert [t.drawn[:7] for t in together] == [a.drawn[:7] for a in alone]


def test_requests_batched_together_make_each_its_whole_stream(make_engine: Callable[..., Engine]) -> None:
    engine = make_engine()

    async def main() -> tuple[list[list[int]], list[list[int]]]:
        alone = [await _collect(engine.generate(p, _speech(i), constraint=AUDIO)) for i, p in enumerate(PROMPTS)]
        together = await asyncio.gather(
            *(_collect(engine.generate(p, _speech(i), constraint=AUDIO)) for i, p in enumerate(PROMPTS))
        )
        return alone, list(together)

    alone, together = asyncio.run(main())
    # Draws agree batched and alone only while float error flips none (tests/forcing.py): the first frame.
    assert [t[:7] for t in together] == [t[:7] for t in alone]
    assert all(len(tokens) == 56 for tokens in alone + together)
    assert len({tuple(t) for t in alone}) == len(PROMPTS)  # different seeds and prompts differ
    assert engine.stats().tokens == 2 * 56 * len(PROMPTS)


def test_same_seed_same_tokens_and_another_seed_differs(make_engine: Callable[..., Engine]) -> None:
    engine = make_engine()

    async def main() -> list[list[int]]:
        return [await _collect(engine.generate(PROMPTS[0], _speech(s), constraint=AUDIO)) for s in (7, 7, 8)]

    first, again, other = asyncio.run(main())
    assert first == again
    assert first != other


def test_request_joining_midway_gets_its_first_token_within_two_steps(make_engine: Callable[..., Engine]) -> None:
    engine = make_engine(max_batch=4)

    async def main() -> tuple[RequestStream, RequestStream, RequestStream, list[list[int]]]:
        a = engine.generate(PROMPTS[0], _speech(1, max_tokens=140), constraint=AUDIO)
        b = engine.generate(PROMPTS[1], _speech(2, max_tokens=140), constraint=AUDIO)
        head = [await a.__anext__() for _ in range(20)]
        c = engine.generate(PROMPTS[2], _speech(3, max_tokens=14), constraint=AUDIO)
        rest = await asyncio.gather(_collect(a), _collect(b), _collect(c))
        return a, b, c, [head + rest[0], rest[1], rest[2]]

    a, b, c, outputs = asyncio.run(main())
    joined = c.request
    assert joined.first_token_step is not None
    assert joined.first_token_step - joined.submit_step <= 2
    assert joined.submit_step >= a.request.first_token_step + 19  # it really joined mid-way
    for stream, tokens in ((a, outputs[0]), (b, outputs[1])):
        req = stream.request
        assert stream.finish_reason is FinishReason.LENGTH and len(tokens) == 140
        # one token every step from first to last: the newcomer's prefill stalled no one
        assert req.finish_step - req.first_token_step == len(tokens) - 1
    assert len(outputs[2]) == 14


def test_abort_frees_the_slot_and_a_queued_request_takes_it(make_engine: Callable[..., Engine]) -> None:
    engine = make_engine(max_batch=2)

    async def main() -> None:
        a = engine.generate(PROMPTS[0], _speech(1, max_tokens=700), constraint=AUDIO)
        b = engine.generate(PROMPTS[1], _speech(2, max_tokens=700), constraint=AUDIO)
        await a.__anext__()
        await b.__anext__()
        c = engine.generate(PROMPTS[2], _speech(3, max_tokens=21), constraint=AUDIO)
        assert await eventually_async(lambda: engine.stats().waiting == 1)
        assert c.request.slot is None
        slot_a = a.request.slot
        engine.abort(a.request_id)
        assert len(await _collect(c)) == 21
        assert c.request.slot == slot_a
        assert a.finish_reason is FinishReason.ABORT
        assert len(a.request.output_ids) < 700
        await _collect(a)  # an aborted stream simply ends
        await b.aclose()
        await _collect(b)
        assert b.finish_reason is FinishReason.ABORT

    asyncio.run(main())
    stats = engine.stats()
    assert stats.running == 0 and stats.waiting == 0
    assert engine.scheduler.free_slots == 2


def test_cancelling_the_consumer_aborts_the_request(make_engine: Callable[..., Engine]) -> None:
    engine = make_engine(max_batch=1)

    async def main() -> RequestStream:
        stream = engine.generate(PROMPTS[0], _speech(1, max_tokens=700), constraint=AUDIO)
        task = asyncio.create_task(_collect(stream))
        while not stream.request.output_ids:
            await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        # the single slot is free again: a new request runs to completion
        assert len(await _collect(engine.generate(PROMPTS[1], _speech(2, max_tokens=7), constraint=AUDIO))) == 7
        return stream

    stream = asyncio.run(main())
    assert stream.finish_reason is FinishReason.ABORT
    assert engine.scheduler.free_slots == 1


def test_constraint_never_lets_an_out_of_position_token_through(make_engine: Callable[..., Engine]) -> None:
    engine = make_engine()
    # a hot, wide distribution so that every allowed id is in play
    params = [_speech(s, max_tokens=350, temperature=1.5, top_p=1.0, repetition_penalty=1.0) for s in range(6)]

    async def main() -> list[RequestStream]:
        streams = [engine.generate(PROMPTS[i % 4], p, constraint=AUDIO) for i, p in enumerate(params)]
        outputs = await asyncio.gather(*(_collect(s) for s in streams))
        for stream, tokens in zip(streams, outputs):
            for i, token in enumerate(tokens):
                assert token in orpheus.position_range(i % 7), (i, token)
            if stream.finish_reason is FinishReason.STOP:
                assert len(tokens) % 7 == 0 and tokens  # stop only on a frame boundary, after a frame
        return streams

    streams = asyncio.run(main())
    assert sum(len(s.request.output_ids) for s in streams) > 1000


def test_greedy_decoding_matches_transformers_generate(make_engine: Callable[..., Engine], demo: DemoPaths) -> None:
    engine = make_engine(max_batch=2)
    params = SamplingParams(temperature=0.0, repetition_penalty=1.0, max_tokens=16)

    async def main() -> list[int]:
        return await _collect(engine.generate(PROMPTS[3], params))

    ours = asyncio.run(main())
    reference = LlamaForCausalLM.from_pretrained(demo.model, dtype=torch.float32).eval()
    prompt = torch.tensor([PROMPTS[3]])
    theirs = reference.generate(
        prompt, do_sample=False, repetition_penalty=1.0, max_new_tokens=16, min_new_tokens=16, eos_token_id=None
    )
    assert ours == theirs[0, len(PROMPTS[3]) :].tolist()


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("temperature", -0.1),
        ("temperature", float("nan")),
        ("top_p", 0.0),
        ("top_p", 1.5),
        ("top_p", float("nan")),
        ("top_k", -1),
        ("repetition_penalty", 0.0),
        ("repetition_penalty", -1.0),
        ("repetition_penalty", float("inf")),
        ("max_tokens", 0),
        ("max_tokens", 2.5),
        ("seed", -1),
    ],
)
def test_bad_sampling_values_are_refused_naming_the_field(field: str, value: float) -> None:
    with pytest.raises(ValueError, match=field):
        SamplingParams(**{field: value})


def test_a_request_that_can_never_fit_is_refused(make_engine: Callable[..., Engine]) -> None:
    engine = make_engine(max_seq_len=64)

    async def main() -> None:
        with pytest.raises(RequestTooLong, match="max_seq_len 64"):
            engine.generate(PROMPTS[0], SamplingParams(max_tokens=60))

    asyncio.run(main())


def test_bad_prompts_and_a_full_queue_are_refused(make_engine: Callable[..., Engine]) -> None:
    engine = make_engine(max_batch=1, max_waiting=1)

    async def main() -> None:
        with pytest.raises(ValueError, match="prompt_ids"):
            engine.generate([], SamplingParams())
        with pytest.raises(ValueError, match="prompt_ids"):
            engine.generate([1, 200_000], SamplingParams())
        with pytest.raises(ValueError, match="stop_ids"):
            engine.generate([1, 2], SamplingParams(stop_ids=(200_000,)))
        running = engine.generate(PROMPTS[0], SamplingParams(max_tokens=500, seed=1))
        await running.__anext__()
        queued = engine.generate(PROMPTS[1], SamplingParams(max_tokens=5, seed=2))
        with pytest.raises(EngineFull, match="queue is full"):
            engine.generate(PROMPTS[2], SamplingParams(max_tokens=5))
        with pytest.raises(ValueError, match="already in use"):
            engine.generate(PROMPTS[2], SamplingParams(max_tokens=5), request_id=queued.request_id)
        await running.aclose()
        assert len(await _collect(queued)) == 5

    asyncio.run(main())


def test_more_streams_resident_than_the_compute_batch_all_stay_ahead_of_their_listeners(
        make_engine: Callable[..., Engine]) -> None:
    # Six streams share a compute batch of two: each step advances the two closest to running dry.
    # Listeners play one token per `pace` seconds from their first token on; a token is late when it
    # arrives after the tokens before it have played. The pace leaves the engine 2.5 times the steps the
    # six need, measured here first: on a CPU another process is loading, a fixed pace measures the load,
    # while a scheduler that starved some streams would leave those late at any pace.
    engine = make_engine(max_batch=6, compute_batch=2)
    tokens = 56

    async def step_s() -> float:
        stream = engine.generate(PROMPTS[0], _speech(9, max_tokens=28), constraint=AUDIO)
        await stream.take(1)  # after the prefill
        start, made = time.monotonic(), 0
        while batch := await stream.take(28):
            made += len(batch)
        return (time.monotonic() - start) / max(1, made)

    # Six streams, two a step: three steps per token each. A scheduler that ran two streams to their end
    # before the others would leave those 56 / 7.5 paces, at least 0.75 s, late: past the grace.
    pace = max(0.1, 2.5 * 3 * asyncio.run(step_s()))

    async def listen(i: int) -> tuple[bool, int]:
        stream = engine.generate(PROMPTS[i % len(PROMPTS)], _speech(i, max_tokens=tokens), constraint=AUDIO,
                                 playback=Playback(pace))
        heard, start, late = 0, None, 0
        while batch := await stream.take(1):
            now = time.monotonic()
            if start is None:
                start = now
                engine.start_playback(stream.request_id, now)
            late += now - start > heard * pace + 0.5  # half a second of grace for this shared CPU
            heard += len(batch)
        return late == 0, heard

    async def main() -> list[tuple[bool, int]]:
        return list(await asyncio.gather(*(listen(i) for i in range(6))))

    results = asyncio.run(main())
    stats = engine.stats()
    assert [heard for _, heard in results] == [tokens] * 6
    assert all(on_time for on_time, _ in results), results
    assert stats.parked == 0 and stats.running == 0
    # Never more than the compute batch decoding at once (prefill rows join the first steps).
    assert stats.tokens / stats.steps <= 2 + 6 / stats.steps


def test_a_failed_step_fails_its_requests_and_the_engine_serves_on(make_engine: Callable[..., Engine],
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    engine = make_engine(max_batch=2)
    real_launch = engine.runner.launch
    failures = iter([RuntimeError("injected device fault")])

    def launch(prefill, decode):  # type: ignore[no-untyped-def]
        if (fault := next(failures, None)) is not None:
            raise fault
        return real_launch(prefill, decode)

    monkeypatch.setattr(engine.runner, "launch", launch)

    async def main() -> list[int]:
        doomed = engine.generate(PROMPTS[0], _speech(1, max_tokens=14), constraint=AUDIO)
        with pytest.raises(RuntimeError, match="engine step failed: injected device fault"):
            await _collect(doomed)
        assert doomed.finish_reason is FinishReason.ERROR
        return await _collect(engine.generate(PROMPTS[1], _speech(2, max_tokens=14), constraint=AUDIO))

    assert len(asyncio.run(main())) == 14
    assert engine.stats().running == 0 and engine.scheduler.free_slots == 2
