"""lyre.models.choice and lyre.common.device: the codec follows the model, the demo only when asked, the GPU by default."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import huggingface_hub.constants
import pytest
import torch

import lyre.models.choice as model_choice
from lyre.models.demo import DemoPaths
from lyre.common.device import resolve_device
from lyre.models.choice import ORPHEUS_CODEC, Weights, choose_codec, choose_model, choose_weights, resolve_device_args
from lyre.models.folder import ModelFolderError
from lyre.server import ServerConfig
from lyre.tts import ServingConfig, TTSFacts

COMMIT = "0123456789abcdef0123456789abcdef01234567"


def hub_cache_with_codec(root: Path, codec: Path) -> Path:
    """An HF hub cache at ``root`` holding ``codec``'s files as hubertsiuzdak/snac_24khz; its snapshot folder."""
    repo = root / "models--hubertsiuzdak--snac_24khz"
    snapshot = repo / "snapshots" / COMMIT
    snapshot.mkdir(parents=True)
    for f in codec.iterdir():
        (snapshot / f.name).symlink_to(f)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(COMMIT)
    return snapshot


def offline_env(home: Path) -> dict[str, str]:
    """The environment of a machine that cannot reach the hub, with its HF cache under ``home``."""
    import os

    return {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HOME": str(home), "HF_HUB_CACHE": str(home / "hub")}


@pytest.fixture
def offline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """This process offline with an empty HF hub cache (returned); every message announced afresh."""
    cache = tmp_path / "hf" / "hub"
    cache.mkdir(parents=True)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(cache))  # read at import, so set it here
    monkeypatch.setattr(model_choice, "_announced", set())
    return cache


def model_folder_copy(demo: DemoPaths, where: Path, settings: dict | str | None = None) -> Path:
    """A model folder like the demo's (its files linked, not copied), with ``lyre.json`` if given."""
    where.mkdir(parents=True)
    for f in demo.model.iterdir():
        (where / f.name).symlink_to(f)
    if settings is not None:
        (where / "lyre.json").write_text(settings if isinstance(settings, str) else json.dumps(settings))
    return where


# --- the codec follows the model ------------------------------------------------------------------


def test_a_named_model_gets_snac_24khz_from_the_hub_cache(demo: DemoPaths, offline: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    snapshot = hub_cache_with_codec(offline, demo.codec)
    choice = choose_weights(demo.model, None)
    assert choice.model == Weights(str(demo.model), demo.model, "named")
    assert choice.codec == Weights(ORPHEUS_CODEC, snapshot.resolve(), "default")
    err = capsys.readouterr().err
    assert f"no codec named; using SNAC 24 kHz (hubertsiuzdak/snac_24khz) from {snapshot.resolve()}" in err
    assert "no model named" not in err and "demo" not in err


def test_a_named_model_without_its_codec_is_an_error_naming_it(demo: DemoPaths, offline: Path) -> None:
    with pytest.raises(ModelFolderError) as raised:
        choose_weights(demo.model, None)
    message = str(raised.value)
    assert "SNAC 24 kHz (hubertsiuzdak/snac_24khz)" in message and "offline mode is on" in message
    assert "--codec /path/to/snac_24khz" in message and "--codec demo" in message
    assert "--model" not in message  # the advice is about the codec, not the model


def test_a_codec_named_but_missing_is_an_error_about_the_codec(demo: DemoPaths, offline: Path,
                                                               tmp_path: Path) -> None:
    model = choose_model(demo.model)
    with pytest.raises(ModelFolderError, match=r"the codec 'nobody/snac' could not be fetched .*offline mode.*"
                                               r"--codec /path/to/snac_24khz"):
        choose_codec("nobody/snac", model)
    with pytest.raises(ModelFolderError, match=f"codec folder '{tmp_path}' .*lacks config.json"):
        choose_codec(tmp_path, model)


@pytest.mark.parametrize("kind", ["beside", "relative", "absolute"])
def test_lyre_json_beside_the_weights_names_the_codec(demo: DemoPaths, offline: Path, tmp_path: Path, kind: str,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    codec = tmp_path / "codecs" / "snac"
    codec.parent.mkdir()
    codec.symlink_to(demo.codec)
    value = {"beside": "snac", "relative": "../codecs/snac", "absolute": str(codec)}[kind]
    model = model_folder_copy(demo, tmp_path / "model", {"codec": value})
    if kind == "beside":
        (model / "snac").symlink_to(demo.codec)
    chosen = choose_weights(model, None).codec
    assert (chosen.name, chosen.origin, chosen.random) == (value, "lyre.json", False)
    assert chosen.local().resolve() == demo.codec.resolve()
    assert f"as {model / 'lyre.json'} says" in capsys.readouterr().err


def test_lyre_json_may_name_a_hub_id(demo: DemoPaths, offline: Path, tmp_path: Path) -> None:
    snapshot = hub_cache_with_codec(offline, demo.codec)
    model = model_folder_copy(demo, tmp_path / "model", {"codec": ORPHEUS_CODEC})
    assert choose_weights(model, None).codec == Weights(ORPHEUS_CODEC, snapshot.resolve(), "lyre.json")


@pytest.mark.parametrize(("settings", "message"), [
    ("{not json", "is not valid JSON"),
    ('["snac"]', "not a JSON object"),
    ({"codec": 3}, '"codec" must be a folder or a hub id'),
    ({"codec": "missing"}, "lyre.json names the codec 'missing', which cannot be used: codec folder"),
])
def test_a_bad_lyre_json_is_a_clear_error(demo: DemoPaths, offline: Path, tmp_path: Path, settings: dict | str,
                                          message: str) -> None:
    model = model_folder_copy(demo, tmp_path / "model", settings)
    with pytest.raises(ModelFolderError, match=message):
        choose_weights(model, None)


def test_a_named_codec_wins_over_lyre_json(demo: DemoPaths, offline: Path, tmp_path: Path) -> None:
    model = model_folder_copy(demo, tmp_path / "model", {"codec": "missing"})
    assert choose_weights(model, demo.codec).codec == Weights(str(demo.codec), demo.codec, "named")


# --- the demo, only when asked for ----------------------------------------------------------------


def test_the_demo_model_and_codec_go_together_when_no_model_is_named(
        demo: DemoPaths, offline: Path, capsys: pytest.CaptureFixture[str]) -> None:
    choice = choose_weights(None, None)
    assert choice.model == Weights("demo", demo.model, "default", random=True)
    assert choice.codec == Weights("demo", demo.codec, "default", random=True)
    err = capsys.readouterr().err
    assert err.count("lyre: ") == 1  # one line for both
    assert f"no model named; using the built-in demo model at {demo.model.parent}" in err
    assert "random weights: it makes noise, not speech" in err
    choose_weights(None, None)
    assert capsys.readouterr().err == ""  # once per process
    assert choose_model("demo").origin == "named"
    assert "as named" in capsys.readouterr().err


def test_codec_demo_with_a_real_model_says_the_codec_is_random(demo: DemoPaths, offline: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    choice = choose_weights(demo.model, "demo")
    assert choice.codec == Weights("demo", demo.codec, "named", random=True)
    assert not choice.model.random
    err = capsys.readouterr().err
    assert "codec 'demo': using the built-in demo codec" in err and "noise" in err
    assert "no model named" not in err


def test_weights_built_in_memory_have_no_folder() -> None:
    weights = Weights.in_memory("random Orpheus-3B", random=True)
    assert weights.describe() == "random Orpheus-3B (built in memory; random weights: it makes noise, not speech)"
    with pytest.raises(ValueError, match="built in memory"):
        weights.local()


# --- the device: auto, resolved once ----------------------------------------------------------------


def test_auto_is_the_cpu_without_cuda(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert resolve_device("auto") == "cpu"
    assert ServerConfig().serving.device == "cpu"  # lyre serve's default is auto
    assert ServingConfig(device="auto").engine_config().resolved_dtype == "float32"
    with pytest.raises(ValueError, match="CUDA is not available"):
        resolve_device("cuda")


def test_auto_is_the_first_cuda_device_where_torch_sees_one(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    assert resolve_device("auto") == "cuda:0"
    serving = ServingConfig(device="auto")
    assert serving.device == "cuda:0" and serving.engine_config().resolved_dtype == "bfloat16"  # the dtype follows
    config = ServerConfig()
    assert config.serving.device == "cuda:0" and config.serving.engine_config().resolved_dtype == "bfloat16"
    assert ServerConfig(stt_device="auto").stt_device == "cuda:0"
    with pytest.raises(ValueError, match="has 1 CUDA device"):
        resolve_device("cuda:1")


def test_bad_device_names_are_refused_naming_the_setting() -> None:
    with pytest.raises(ValueError, match="device must be auto, cpu or cuda"):
        resolve_device("gpu")
    with pytest.raises(ValueError, match="stt_device: device must be"):
        ServerConfig(stt_device="tpu")


def test_the_command_line_resolves_auto_before_building_configs(monkeypatch: pytest.MonkeyPatch) -> None:
    import argparse

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    args = argparse.Namespace(device="auto", stt_device="auto")
    resolve_device_args(args)
    assert (args.device, args.stt_device) == ("cpu", "cpu")
    with pytest.raises(ValueError, match="--stt-device: device must be"):
        resolve_device_args(argparse.Namespace(device="cpu", stt_device="gpu"))


# --- the facts the start-up summary shows ----------------------------------------------------------


def _facts(**changes: object) -> TTSFacts:
    base: dict = dict(pipeline="lyre", model=Weights("m", Path("/m"), "named"),
                      codec=Weights(ORPHEUS_CODEC, Path("/c"), "default"), device="cuda:0", dtype="bfloat16",
                      attention="sdpa", cuda_graphs=True, fp8=False, layers=28, kv_slots=8, kv_positions=2048,
                      kv_bytes=2**30, scheduler="deadline", codec_device="cuda:0", codec_dtype="float32",
                      codec_graphs=False, max_adapters=0, lora_rank=None, adapters=(), cuda_available=True)
    return TTSFacts(**(base | changes))


def test_settings_that_cost_a_gpu_user_dearly_are_warned_of() -> None:
    assert _facts(attention="flex").warnings == ()
    # The gathered path copies K/V every step: under CUDA graphs up to its step's context bucket, its context eagerly.
    assert "copies each row's blocks up to its step's context bucket" in " ".join(_facts().warnings)
    assert "copies each row's blocks up to its context" in " ".join(_facts(cuda_graphs=False).warnings)
    assert not any("copies" in w for w in _facts(device="cpu", cuda_graphs=False, cuda_available=False).warnings)
    assert "eager decoding is host-bound" in " ".join(_facts(cuda_graphs=False).warnings)
    assert "~14 ms a step" in " ".join(_facts(cuda_graphs=False).warnings)  # 28 layers x 0.5 ms
    assert "float32 on CUDA" in " ".join(_facts(dtype="float32").warnings)
    assert "although torch sees a CUDA device" in " ".join(_facts(device="cpu", dtype="float32").warnings)
    demo = _facts(model=Weights("demo", Path("/d"), "default", random=True), attention="flex")
    assert demo.warnings == ("random weights (model): the audio is noise, not speech; name a real model with --model",)
    json.dumps(demo.as_json())  # plain JSON values throughout


# --- the command line, as a real process ------------------------------------------------------------


@pytest.mark.slow
def test_serve_with_a_model_folder_and_no_codec_offline_is_a_clear_error(demo: DemoPaths, tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "lyre.cli", "serve", "--model", str(demo.model), "--port", "9"],
                          capture_output=True, timeout=120, env=offline_env(tmp_path / "hf"))
    err = done.stderr.decode()
    assert done.returncode == 2, err
    assert "hubertsiuzdak/snac_24khz" in err and "--codec /path/to/snac_24khz" in err
    assert "Traceback" not in err and "no model named" not in err and "ready" not in err


@pytest.mark.slow
def test_say_with_codec_demo_and_a_real_format_model_works_and_says_so(demo: DemoPaths, tmp_path: Path) -> None:
    out = tmp_path / "hi.wav"
    done = subprocess.run([sys.executable, "-m", "lyre.cli", "say", "Hi.", "--model", str(demo.model), "--codec",
                           "demo", "--max-tokens", "14", "--seed", "1", "-o", str(out)],
                          capture_output=True, timeout=300, env=offline_env(tmp_path / "hf"))
    err = done.stderr.decode()
    assert done.returncode == 0, err
    assert "codec 'demo'" in err and "random weights" in err and "no model named" not in err
    assert out.stat().st_size > 44


@pytest.mark.slow
def test_the_server_loads_the_cached_codec_and_its_summary_matches_its_settings(
        demo: DemoPaths, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import httpx

    from serving import running_server

    home = tmp_path / "hf"
    snapshot = hub_cache_with_codec(home / "hub", demo.codec).resolve()
    for name, value in offline_env(home).items():
        monkeypatch.setenv(name, value)  # the server process inherits them
    args = ("--model", str(demo.model), "--max-streams", "3", "--max-queue", "5", "--max-seq-len", "512",
            "--scheduler", "fcfs", "--max-adapters", "2", "--lora-rank", "8", "--kv-cache-gb", "0.01")
    with running_server(*args) as server:
        health = httpx.get(f"{server.url}/health", timeout=10).json()
        kv_bytes = server.metric("lyre_engine_kv_cache_bytes")
        free_blocks = server.metric('lyre_engine_kv_blocks{state="free"}')
        output = server.output()
    assert health["status"] == "ok"
    summary = health["summary"]
    tts = summary["tts"]
    assert tts["model"] == {"name": str(demo.model), "folder": str(demo.model), "origin": "named", "random": False}
    assert tts["codec"] == {"name": ORPHEUS_CODEC, "folder": str(snapshot), "origin": "default", "random": False}
    assert (summary["max_streams"], summary["max_queue"], summary["stt"], summary["chat"]) == (3, 5, None, None)
    assert (tts["device"], tts["dtype"], tts["attention"], tts["cuda_graphs"], tts["fp8"]) == (
        "cpu", "float32", "sdpa", False, False)  # --device auto, on this CPU
    # 0.01 GiB in blocks of 64 positions (a CPU's), 256 KiB each on the demo model in float32: 40 blocks, 5 requests
    # of 512.
    assert (tts["kv_slots"], tts["kv_positions"], tts["kv_bytes"]) == (3, 512, kv_bytes)
    assert (tts["kv_blocks"], tts["block_size"]) == (40, 64) and kv_bytes == 41 * 256 * 2**10  # and the trash block
    assert health["kv_cache"]["tts"] | {"cached": 0, "prefix_hit_rate": 0} == {
        "block_size": 64, "blocks": 40, "used": 0, "cached": 0, "free": 40, "prefix_hit_rate": 0, "evictions": 0,
        "preemptions": 0}  # the warm-up's request has ended (its blocks may stay cached)
    assert free_blocks == 40
    assert (tts["scheduler"], tts["max_adapters"], tts["lora_rank"], tts["adapters"]) == ("fcfs", 2, 8, [])
    assert summary["warnings"] == tts["warnings"] == []
    assert f"lyre: no codec named; using SNAC 24 kHz (hubertsiuzdak/snac_24khz) from {snapshot}" in output
    assert "no model named" not in output
    assert output.count("lyre: ready in") == 1  # the summary, once
    assert "KV cache  40 blocks x 64 positions, 10.2 MiB: 5.0 requests of 512 positions" in output
    assert "streams   3 at once, 5 queued at most" in output
