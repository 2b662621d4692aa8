"""How the engine's and the codec's threads share a CPU: the split, and a count set in one thread only."""

from __future__ import annotations

import threading
from types import SimpleNamespace

import pytest
import torch

from lyre.common.threads import split_cores, use_threads
from lyre.engine import EngineConfig
from lyre.engine.stats import STEP_EWMA_WEIGHT, StatsRecorder
from lyre.tts import ServingConfig


def test_cores_split_half_each_at_least_one() -> None:
    assert [split_cores(n) for n in (1, 2, 3, 4, 16)] == [(1, 1), (1, 1), (1, 2), (2, 2), (8, 8)]
    with pytest.raises(ValueError, match="cores must be >= 1"):
        split_cores(0)


def test_a_thread_sets_its_own_count_and_no_other() -> None:
    main = torch.get_num_threads()
    seen: dict[str, int] = {}
    ready, done = threading.Event(), threading.Event()

    def worker() -> None:
        use_threads(1)
        ready.set()
        done.wait()
        torch.ones(64, 64) @ torch.ones(64, 64)  # an op after others set theirs
        seen["worker"] = torch.get_num_threads()

    def newcomer() -> None:
        seen["new"] = torch.get_num_threads()

    thread = threading.Thread(target=worker)
    thread.start()
    ready.wait()
    later = threading.Thread(target=newcomer)
    later.start()
    later.join()
    done.set()
    thread.join()
    assert seen == {"worker": 1, "new": main} and torch.get_num_threads() == main
    with pytest.raises(ValueError, match="threads must be >= 1"):
        use_threads(0)


def test_serving_splits_the_cpu_unless_told() -> None:
    assert ServingConfig().threads() == split_cores(torch.get_num_threads())
    assert ServingConfig().engine_config().threads == split_cores(torch.get_num_threads())[0]
    assert ServingConfig(engine_threads=3, codec_threads=2).threads() == (3, 2)
    with pytest.raises(ValueError, match="codec_threads must be a positive integer"):
        ServingConfig(codec_threads=0)
    with pytest.raises(ValueError, match="EngineConfig.threads must be >= 1"):
        EngineConfig(threads=0)


def test_a_gpu_keeps_torchs_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("lyre.tts.options.resolve_device", lambda name: name)  # no GPU needed to build it
    assert ServingConfig(device="cuda").threads() == (None, None)
    assert ServingConfig(device="cuda:1", codec_threads=2).threads() == (None, 2)


def test_the_recent_step_forgets_prompts_and_old_steps() -> None:
    recorder = StatsRecorder(0)

    def step(seconds: float, prefill: bool = False) -> None:
        recorder.record_step(SimpleNamespace(prefill=[SimpleNamespace(first=False)] if prefill else [],
                                             decode=[1], sampled=[1]), seconds)

    step(0.5, prefill=True)
    assert recorder.recent_step_seconds == 0.0
    step(2.0)  # the first decode step sets it
    step(0.01)
    assert recorder.recent_step_seconds == pytest.approx(2.0 + STEP_EWMA_WEIGHT * (0.01 - 2.0))
    for _ in range(200):
        step(0.01)
    assert recorder.recent_step_seconds == pytest.approx(0.01, abs=1e-4)
