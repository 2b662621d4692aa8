"""Cloned voices on a real server: --adapter at start, the voice by name on HTTP and the WebSocket, the admin routes."""

from __future__ import annotations

import asyncio
import base64
import json
import re
import shutil
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
import websockets

from adapters import make_adapter
from lyre.models.demo import DemoPaths
from polling import eventually
from serving import Server, running_server

pytestmark = pytest.mark.slow

ADMIN = {"Authorization": "Bearer admin-secret"}
SPEECH = {"model": "orpheus", "input": "Hello there.", "response_format": "pcm", "max_tokens": 70, "seed": 4,
          "trim_silence": False}
LONG = {**SPEECH, "input": " ".join(f"Sentence number {i}." for i in range(40)), "max_tokens": 700}  # a while


@pytest.fixture(scope="module")
def folders(demo: DemoPaths, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("served-adapters")
    return {
        "calm": make_adapter(root / "calm", demo.model, seed=11, r=8, alpha=16, speaker="calm-voice", scale_b=4.0),
        "bright": make_adapter(root / "bright", demo.model, seed=12, r=16, alpha=32, scale_b=4.0),
        "third": make_adapter(root / "third", demo.model, seed=13, r=4, alpha=8, scale_b=4.0),
        "dora": make_adapter(root / "dora", demo.model, seed=14, r=4, use_dora=True),
        "too-big": make_adapter(root / "too-big", demo.model, seed=15, r=128, target_modules=["q_proj"]),
    }


@pytest.fixture(scope="module")
def server(folders: dict[str, Path]) -> Iterator[Server]:
    # Admission on the measured rates off: on a 2-core CPU under the suite's load, two streams playing (even
    # to listeners at a quarter of real time) measure as more than the device has, and a new request would get
    # its 429 for that before any adapter slot is asked for. The slots are under test here, not the rates.
    with running_server("--max-streams", "4", "--adapter", f"calm={folders['calm']}",
                        "--adapter", f"bright={folders['bright']}", "--max-adapters", "2",
                        "--admin-key", "admin-secret", "--playback-rate", "0.25", "--no-admit-on-rates") as s:
        yield s


def _speak(server: Server, **changes: Any) -> bytes:
    response = httpx.post(f"{server.url}/v1/audio/speech", json={**SPEECH, **changes}, timeout=120)
    assert response.status_code == 200, (response.status_code, response.text)
    return response.content


def _adapters(server: Server) -> dict[str, dict[str, Any]]:
    response = httpx.get(f"{server.url}/v1/adapters", headers=ADMIN, timeout=10)
    assert response.status_code == 200, response.text
    return {entry["name"]: entry for entry in response.json()["data"]}


def _snr_db(a: bytes, b: bytes) -> float:
    x, y = (np.frombuffer(p, dtype="<i2").astype(np.float64) for p in (a, b))
    return float(10 * np.log10(np.sum(x**2) / (np.sum((x - y) ** 2) + 1e-9)))


def test_an_adapter_voice_speaks_differently_and_the_same_every_time(server: Server) -> None:
    base = _speak(server, voice="tara")
    calm = _speak(server, voice="calm")
    # Same voice and seed: the same tokens, so the same audio up to where streamed window edges fell.
    again = _speak(server, voice="calm")
    assert len(again) == len(calm) and _snr_db(calm, again) > 25
    assert len(calm) != len(base) or _snr_db(base, calm) < 20  # the adapter's tokens, not the base model's
    bright = _speak(server, voice="bright")
    assert len(bright) != len(calm) or _snr_db(calm, bright) < 20


def test_voices_list_the_adapters_beside_the_models_speakers(server: Server) -> None:
    voices = {v["id"]: v for v in httpx.get(f"{server.url}/v1/audio/voices", timeout=10).json()["voices"]}
    assert "tara" in voices and not voices["tara"].get("adapter")
    assert voices["calm"]["adapter"] is True and voices["calm"]["speaker"] == "calm-voice"
    assert voices["bright"]["speaker"] == "bright"  # no lyre_voice.json: the adapter's name


def test_the_websocket_speaks_an_adapter_voice_as_http_does(server: Server) -> None:
    async def main() -> list[dict[str, Any]]:
        async with websockets.connect(server.ws_url + "/v1/tts/websocket") as ws:
            await ws.send(json.dumps({
                "context_id": "c1", "model_id": "orpheus", "voice": {"mode": "id", "id": "calm"},
                "output_format": {"container": "raw", "encoding": "pcm_s16le", "sample_rate": 24000},
                "transcript": "Hello there.", "continue": False, "max_tokens": 70, "seed": 4}))
            messages = []
            while not messages or not messages[-1]["done"]:
                messages.append(json.loads(await asyncio.wait_for(ws.recv(), 60)))
            return messages

    messages = asyncio.run(main())
    assert messages[-1]["type"] == "done", messages[-1]
    pcm = b"".join(base64.b64decode(m["data"]) for m in messages if m["type"] == "chunk")
    assert len(pcm) > 0


def test_admin_routes_need_the_admin_key(server: Server) -> None:
    assert httpx.get(f"{server.url}/v1/adapters", timeout=10).status_code == 401
    wrong = httpx.get(f"{server.url}/v1/adapters", headers={"Authorization": "Bearer nope"}, timeout=10)
    assert wrong.status_code == 401
    assert httpx.get(f"{server.url}/v1/adapters", headers={"X-Admin-Key": "admin-secret"}, timeout=10).status_code == 200
    assert httpx.post(f"{server.url}/v1/adapters/nobody/pin", headers=ADMIN, timeout=10).status_code == 404


@pytest.mark.parametrize(("name", "reason"), [("dora", "DoRA"), ("too-big", "rank 128")])
def test_a_bad_folder_is_refused_with_its_reason_and_the_server_keeps_serving(
        server: Server, folders: dict[str, Path], name: str, reason: str) -> None:
    response = httpx.post(f"{server.url}/v1/adapters", headers=ADMIN, timeout=60,
                          json={"name": name, "path": str(folders[name])})
    assert response.status_code == 400, response.text
    assert reason in response.json()["error"]["message"]
    assert name not in _adapters(server)  # nothing half-loaded
    missing = httpx.post(f"{server.url}/v1/adapters", headers=ADMIN, timeout=60,
                         json={"name": "ghost", "path": "/nonexistent/adapter"})
    assert missing.status_code == 400 and "/nonexistent/adapter" in missing.json()["error"]["message"]
    assert len(_speak(server, voice="calm")) > 0


@pytest.mark.parametrize("path", ["x" * 1000, "/tmp/" + "y" * 300 + "/adapter", "bad\x00byte"])
def test_a_path_the_system_cannot_look_up_is_a_400_naming_it(server: Server, path: str) -> None:
    # Too long a name for the file system, or a NUL byte: the lookup itself fails, before any folder is read.
    response = httpx.post(f"{server.url}/v1/adapters", headers=ADMIN, timeout=60, json={"name": "long", "path": path})
    assert response.status_code == 400, response.text
    assert response.json()["error"]["param"] == "path"
    assert "long" not in _adapters(server)


def test_loading_a_third_adapter_evicts_the_least_recent_unpinned_one(server: Server, folders: dict[str, Path]) -> None:
    assert httpx.post(f"{server.url}/v1/adapters/calm/pin", headers=ADMIN, timeout=10).json()["pinned"] is True
    _speak(server, voice="bright")  # both resident, two slots: the next load must evict one
    evictions = server.metric("lyre_adapter_evictions_total")
    added = httpx.post(f"{server.url}/v1/adapters", headers=ADMIN, timeout=60,
                       json={"name": "third", "path": str(folders["third"])})
    assert added.status_code == 201 and added.json()["resident"] is True
    listed = _adapters(server)
    assert listed["calm"]["resident"] and listed["calm"]["pinned"]  # pinned: it stays
    assert not listed["bright"]["resident"]  # the unpinned one left, but is still known
    assert server.metric("lyre_adapter_evictions_total") == evictions + 1

    misses = server.metric("lyre_adapter_misses_total")
    assert len(_speak(server, voice="bright")) > 0  # loaded again on demand, evicting "third"
    assert server.metric("lyre_adapter_misses_total") == misses + 1
    assert not _adapters(server)["third"]["resident"]
    assert server.metric("lyre_adapters_resident") == 2
    assert server.metric("lyre_adapters_resident_bytes") > 0
    assert httpx.post(f"{server.url}/v1/adapters/calm/unpin", headers=ADMIN, timeout=10).json()["pinned"] is False


def test_a_voice_that_finds_every_slot_busy_gets_429_before_any_audio(server: Server) -> None:
    with httpx.Client(timeout=120) as client:
        streams = [client.stream("POST", f"{server.url}/v1/audio/speech",
                                 json={**LONG, "voice": voice}) for voice in ("calm", "bright")]
        responses = [s.__enter__() for s in streams]
        try:
            playing = [response.iter_bytes() for response in responses]  # kept: a dropped iterator hangs up
            for response, chunks in zip(responses, playing):
                assert response.status_code == 200
                next(chunks)  # both adapters now held by a playing stream: no slot to free
            refused = httpx.post(f"{server.url}/v1/audio/speech", json={**SPEECH, "voice": "third"}, timeout=30)
            assert refused.status_code == 429, refused.text
            assert "slot" in refused.json()["error"]["message"] and refused.headers["retry-after"] == "1"
        finally:
            for stream in streams:
                stream.__exit__(None, None, None)
    # Hung up: the streams end and let go of their adapters.
    assert eventually(lambda: all(a["streams"] == 0 for a in _adapters(server).values()), timeout=30)


def test_unloading_an_adapter_in_use_is_refused_unless_forced(server: Server) -> None:
    first_chunk = threading.Event()
    outcome: dict[str, Any] = {}

    def listen() -> None:
        try:
            with httpx.stream("POST", f"{server.url}/v1/audio/speech", timeout=120,
                              json={**LONG, "voice": "bright"}) as response:
                total = 0
                for chunk in response.iter_bytes():
                    total += len(chunk)
                    first_chunk.set()
                outcome["bytes"] = total
        except httpx.HTTPError as exc:
            outcome["error"] = exc
        finally:
            first_chunk.set()

    listener = threading.Thread(target=listen)
    listener.start()
    assert first_chunk.wait(60)
    refused = httpx.delete(f"{server.url}/v1/adapters/bright", headers=ADMIN, timeout=10)
    assert refused.status_code == 409, refused.text
    forced = httpx.delete(f"{server.url}/v1/adapters/bright?force=true", headers=ADMIN, timeout=30)
    assert forced.status_code == 200, forced.text
    listener.join(60)
    assert "error" in outcome or outcome["bytes"] < 40 * 100 * 2048 * 2  # cut short, not played to the end
    assert "bright" not in _adapters(server)
    unknown = httpx.post(f"{server.url}/v1/audio/speech", json={**SPEECH, "voice": "bright"}, timeout=30)
    assert unknown.status_code == 400 and "bright" in unknown.json()["error"]["message"]
    assert len(_speak(server, voice="calm")) > 0  # everyone else keeps speaking


def test_a_diverged_adapter_is_refused_naming_the_file_and_the_tensor_by_the_api_and_at_start(
        server: Server, folders: dict[str, Path], tmp_path: Path) -> None:
    from adapters import diverged_copy

    folder = tmp_path / "diverged"
    key = diverged_copy(folders["calm"], folder, "layers.0.self_attn.v_proj.lora_A")
    response = httpx.post(f"{server.url}/v1/adapters", headers=ADMIN, timeout=60,
                          json={"name": "diverged", "path": str(folder)})
    assert response.status_code == 400, response.text
    message = response.json()["error"]["message"]
    assert "adapter_model.safetensors" in message and key in message and "NaN" in message
    assert "diverged" not in _adapters(server)
    with pytest.raises(RuntimeError, match=f"--adapter diverged=.*{re.escape(key)}") as failed:
        with running_server("--max-streams", "1", "--max-adapters", "1", "--adapter", f"diverged={folder}"):
            pass
    assert "adapter_model.safetensors" in str(failed.value)


def _with_config(source: Path, folder: Path, **changes: Any) -> Path:
    """A copy of the adapter in ``source`` whose adapter_config.json has ``changes``."""
    shutil.copytree(source, folder)
    config = json.loads((folder / "adapter_config.json").read_text())
    (folder / "adapter_config.json").write_text(json.dumps({**config, **changes}))
    return folder


@pytest.mark.parametrize("alpha", [None, "sixteen", [16]])
def test_a_lora_alpha_that_is_not_a_number_is_a_400_naming_it(server: Server, folders: dict[str, Path],
                                                              tmp_path: Path, alpha: object) -> None:
    folder = _with_config(folders["third"], tmp_path / "odd-alpha", lora_alpha=alpha)
    response = httpx.post(f"{server.url}/v1/adapters", headers=ADMIN, timeout=60,
                          json={"name": "odd-alpha", "path": str(folder)})
    assert response.status_code == 400, response.text
    assert "lora_alpha must be a number" in response.json()["error"]["message"]
    assert "odd-alpha" not in _adapters(server)


@pytest.fixture(scope="module")
def rooted(folders: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Server, Path]]:
    """A server that reads adapter folders only inside ``root``: one good folder in it, and ways out of it."""
    root = tmp_path_factory.mktemp("adapter-root")
    shutil.copytree(folders["third"], root / "inside")
    (root / "escape").symlink_to(folders["calm"], target_is_directory=True)  # a folder outside, linked in
    linked = shutil.copytree(folders["third"], root / "linked-file")
    (linked / "adapter_model.safetensors").unlink()
    (linked / "adapter_model.safetensors").symlink_to(folders["calm"] / "adapter_model.safetensors")
    with running_server("--max-streams", "1", "--max-adapters", "1", "--admin-key", "admin-secret",
                        "--adapter-root", str(root)) as s:
        yield s, root


def test_with_an_adapter_root_a_folder_is_read_only_from_inside_it(rooted: tuple[Server, Path],
                                                                  folders: dict[str, Path]) -> None:
    server, root = rooted

    def add(name: str, path: str) -> httpx.Response:
        return httpx.post(f"{server.url}/v1/adapters", headers=ADMIN, timeout=60, json={"name": name, "path": path})

    inside = add("inside", "inside")  # relative to the root
    assert inside.status_code == 201, inside.text
    assert inside.json()["path"] == str((root / "inside").resolve())
    outside = str(folders["calm"])
    refusals = [add("out", path) for path in (outside, "/nonexistent/adapter", f"../{folders['calm'].parent.name}/"
                                              f"{folders['calm'].name}", "escape", "linked-file")]
    assert [r.status_code for r in refusals] == [400] * len(refusals), [r.text for r in refusals]
    messages = {r.json()["error"]["message"] for r in refusals}
    assert len(messages) == 1  # one answer whatever lies there: nothing to learn of what exists outside
    message = messages.pop()
    assert "--adapter-root" in message and outside not in message and "nonexistent" not in message
    assert "out" not in _adapters(server)
    missing = add("missing", "not-there")  # inside the root: the reason may name it
    assert missing.status_code == 400 and "not-there" in missing.json()["error"]["message"]
