"""The engine's loop when something in it fails: no stream waits forever, and a dead engine says so."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest

from lyre import orpheus
from lyre.models.demo import DemoPaths
from lyre.engine import Engine, EngineConfig, SamplingParams
from lyre.models.loader import load_llama
from lyre.models.llama import Llama

PROMPT = [128259, 128000, 83, 5169, 25, 22691, 13, 128009, 128260, 128261, 128257]
# A stream that never ends would hang the test: each wait is bounded, far above a step on any CPU.
WAIT_S = 20.0


@pytest.fixture(scope="module")
def model(demo: DemoPaths) -> Llama:
    return load_llama(demo.model, 256, "cpu", "float32")


@pytest.fixture
def engine(model: Llama) -> Iterator[Engine]:
    engine = Engine(model, EngineConfig(max_batch=4, max_seq_len=256))
    yield engine
    engine.shutdown()


def _speech(seed: int, tokens: int = 20) -> SamplingParams:
    return SamplingParams(seed=seed, max_tokens=tokens, stop_ids=(orpheus.STOP_TOKEN,))


async def _tokens(engine: Engine, seed: int, tokens: int = 20) -> list[int]:
    async def drain() -> list[int]:
        return [t async for t in engine.generate(PROMPT, _speech(seed, tokens))]

    return await asyncio.wait_for(drain(), WAIT_S)


def test_a_step_that_fails_outside_the_model_fails_its_requests_and_the_loop_goes_on(
        engine: Engine, monkeypatch: pytest.MonkeyPatch) -> None:
    append = engine.scheduler.append_token
    failures = [RuntimeError("bookkeeping broke")]

    def once(*args: Any) -> bool:
        if failures:
            raise failures.pop()
        return append(*args)

    monkeypatch.setattr(engine.scheduler, "append_token", once)  # after the model call, inside the step

    async def main() -> list[int]:
        outcomes = await asyncio.gather(_tokens(engine, 1), _tokens(engine, 2), return_exceptions=True)
        for outcome in outcomes:
            assert isinstance(outcome, RuntimeError) and "engine step failed" in str(outcome)
            assert "bookkeeping broke" in str(outcome)
        return await _tokens(engine, 3)  # the next request is served as usual

    assert len(asyncio.run(main())) == 20
    assert engine.failure is None and engine.stats().failure is None
    assert engine.stats().running == 0


def test_a_failure_the_loop_cannot_survive_ends_every_stream_and_marks_the_engine_dead(
        engine: Engine, monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(*args: Any) -> Any:
        raise RuntimeError("the scheduler broke")

    monkeypatch.setattr(engine.scheduler, "schedule", broken)  # outside any step: nothing to pin it on

    async def main() -> None:
        outcomes = await asyncio.gather(_tokens(engine, 1), _tokens(engine, 2), return_exceptions=True)
        for outcome in outcomes:
            assert isinstance(outcome, RuntimeError) and "the scheduler broke" in str(outcome)
        with pytest.raises(RuntimeError, match="engine failed: .*the scheduler broke"):
            engine.generate(PROMPT, _speech(3))

    asyncio.run(main())
    assert engine.failure is not None and "the scheduler broke" in engine.failure
    assert engine.stats().failure == engine.failure


def test_steps_that_keep_failing_mark_the_engine_dead(engine: Engine, monkeypatch: pytest.MonkeyPatch) -> None:
    def gone(*args: Any) -> Any:
        raise RuntimeError("device lost")

    monkeypatch.setattr(engine.runner, "launch", gone)  # every step, as a lost device fails them

    async def main() -> None:
        for seed in range(10):
            if engine.failure is not None:
                return
            with pytest.raises(RuntimeError, match="device lost"):
                await _tokens(engine, seed)

    asyncio.run(main())
    assert engine.failure is not None and "device lost" in engine.failure and "in a row" in engine.failure


def test_ready_answers_503_once_the_engine_is_dead(engine: Engine, monkeypatch: pytest.MonkeyPatch) -> None:
    from fastapi.testclient import TestClient

    from lyre.server.admission import Admission
    from lyre.server.app import create_app
    from lyre.server.config import ServerConfig
    from lyre.server.metrics import Metrics
    from lyre.server.state import ServerState

    app = create_app(ServerConfig())
    tts = SimpleNamespace(engine_stats=engine.stats)  # /ready reads the pipeline's engine health, nothing else
    app.state.lyre = ServerState(config=ServerConfig(), tts=tts,  # type: ignore[arg-type]
                                 admission=Admission(1, 0, 1.0), metrics=Metrics(), ready=True)
    http = TestClient(app)  # not entered: entering would run the lifespan
    try:
        assert http.get("/ready").status_code == 200

        def broken(*args: Any) -> Any:
            raise RuntimeError("the scheduler broke")

        monkeypatch.setattr(engine.scheduler, "schedule", broken)
        with pytest.raises(RuntimeError):
            asyncio.run(_tokens(engine, 1))
        dead = http.get("/ready")
    finally:
        http.close()
    assert dead.status_code == 503 and dead.json()["ready"] is False
