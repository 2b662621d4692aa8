"""Shared fixtures: the demo model every test uses instead of real weights; and the files' order."""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile

import pytest

from lyre.models.demo import DemoPaths, demo_model

# Every server the tests start keeps reference voices in a folder of this run's, not in the lyre cache's
# (where a developer's own uploads would show up in the tests' voice lists). Set before the first server
# starts, so the fork server the tests' servers come from has it too.
os.environ["LYRE_VOICES_DIR"] = _VOICES = tempfile.mkdtemp(prefix="lyre-test-voices-")
atexit.register(shutil.rmtree, _VOICES, True)

# TorchInductor's compile cache (the FlexAttention test compiles) does not key its kernels by the kernels ATen
# was pinned to: a run with ATEN_CPU_CAPABILITY=avx2 that found a native run's kernels got logits off by up to
# 1.6. Each pin keeps a cache of its own.
os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", os.path.join(
    tempfile.gettempdir(), f"torchinductor-lyre-tests-{os.environ.get('ATEN_CPU_CAPABILITY', 'native')}"))

# The files that take longest on 2 CPU cores (`pytest --durations`), longest first. They run before the
# rest, which keep their usual order: scripts/test.sh hands whole files to two workers in this order
# (--no-loadscope-reorder), so neither worker is left running one long file alone at the end. A file
# missing here only runs later; the order is a schedule, never a dependency.
LONGEST_FIRST = (
    "test_train_voice.py", "test_agent.py", "test_adapter_server.py", "test_router_fleet.py", "test_proxies.py",
    "test_server.py", "test_agent_events.py", "test_client_pipecat.py", "test_client_livekit.py",
    "test_client_agents_js.py", "test_client_agents_py.py", "test_streaming.py", "test_agent_lifetime.py",
    "test_transcriptions.py", "test_api_schema.py", "test_smollm.py", "test_gpu_benchmark.py", "test_eval_audio_dir.py", "test_eval_server.py",
    "test_bench_run.py",
    "test_baseline.py", "test_chat_server.py", "test_llama.py", "test_server_scheduling.py", "test_agent_remote.py",
    "test_reference_voices_server.py", "test_sip.py", "test_sip_hostile.py", "test_speech_queue.py", "test_twilio.py",
    "test_webrtc.py", "test_webrtc_call.py", "test_realtime_ws.py",
    "test_stt_transcriber.py", "test_model_choice.py",
    "test_tts_stream.py", "test_engine.py", "test_align.py", "test_demo_model.py", "test_frameworks.py",
    "test_router_conversations.py", "test_reference_voices.py", "test_cli.py", "test_lora.py",
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: each file's tests stay in order


@pytest.fixture(scope="session")
def demo() -> DemoPaths:
    """The cached demo model (created on first use)."""
    return demo_model()
