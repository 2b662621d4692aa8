"""The naive baseline: transformers generate per request, the reference sliding-window decode.

The random demo model samples over the whole vocabulary, so without a
constraint almost none of its tokens are audio tokens. To see the naive
pipeline make audio, these tests also build a Llama whose weights are set by
hand so that it writes only valid audio tokens, frame position after frame
position, saved as a real Hugging Face folder beside the demo tokenizer.
"""

from __future__ import annotations

import copy
import asyncio
import base64
import json
import shutil
import time
from pathlib import Path

import httpx
import numpy as np
import pytest
import torch
from safetensors.torch import save_file
from websockets.asyncio.client import connect

from lyre import orpheus
from lyre.codec import CodecWindow
from lyre.models.demo import DEMO_LLAMA_CONFIG, DemoPaths
from lyre.engine import FinishReason, SamplingParams
from lyre.tts import SpeechOptions
from lyre.server import ServerConfig
from lyre.baseline import NaiveCodec, NaiveSpeechStream, NaiveTTS, ReferenceWindows
from lyre.tts.text import TextError
from serving import running_server

_HIDDEN = 16
_CLASSES = orpheus.FRAME_TOKENS + 1  # one per frame position, and one for every other token
_OTHER = orpheus.FRAME_TOKENS
# Logit of the next position's audio tokens once normalised: 8 * sqrt(16) = 32 against 0 for
# every other token, so even after the repetition penalty nothing else is ever sampled.
_GAIN = 8.0


def _write_audio_llama(folder: Path, demo: DemoPaths) -> None:
    """A one-layer Llama whose layer adds nothing, so the logits depend on the last token alone.

    The embedding of a token is the one-hot of its class (frame position
    k, or "other"); the output row of an audio token at position k is the
    one-hot of the class before it (k - 1, or 6 and "other" for k = 0).
    """
    config = {**copy.deepcopy(DEMO_LLAMA_CONFIG), "hidden_size": _HIDDEN, "intermediate_size": _HIDDEN, "num_hidden_layers": 1,
              "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 8, "tie_word_embeddings": False}
    vocab = config["vocab_size"]
    embed = torch.zeros(vocab, _HIDDEN)
    embed[:, _OTHER] = 1.0
    head = torch.zeros(vocab, _HIDDEN)
    for k in range(orpheus.FRAME_TOKENS):
        ids = orpheus.position_range(k)
        embed[ids.start : ids.stop] = 0.0
        embed[ids.start : ids.stop, k] = 1.0
        for before in ((orpheus.FRAME_TOKENS - 1, _OTHER) if k == 0 else (k - 1,)):
            head[ids.start : ids.stop, before] = _GAIN
    zeros, ones = torch.zeros, torch.ones
    weights = {
        "model.embed_tokens.weight": embed,
        "lm_head.weight": head,
        "model.norm.weight": ones(_HIDDEN),
        "model.layers.0.input_layernorm.weight": ones(_HIDDEN),
        "model.layers.0.post_attention_layernorm.weight": ones(_HIDDEN),
        "model.layers.0.self_attn.q_proj.weight": zeros(16, _HIDDEN),
        "model.layers.0.self_attn.k_proj.weight": zeros(8, _HIDDEN),
        "model.layers.0.self_attn.v_proj.weight": zeros(8, _HIDDEN),
        "model.layers.0.self_attn.o_proj.weight": zeros(_HIDDEN, 16),
        "model.layers.0.mlp.gate_proj.weight": zeros(_HIDDEN, _HIDDEN),
        "model.layers.0.mlp.up_proj.weight": zeros(_HIDDEN, _HIDDEN),
        "model.layers.0.mlp.down_proj.weight": zeros(_HIDDEN, _HIDDEN),
    }
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(config))
    save_file(weights, folder / "model.safetensors", metadata={"format": "pt"})
    for name in ("tokenizer.json", "tokenizer_config.json", "generation_config.json"):
        shutil.copy(demo.model / name, folder / name)


@pytest.fixture(scope="module")
def audio_llama(demo: DemoPaths, tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("naive") / "audio-llama"
    _write_audio_llama(folder, demo)
    return folder


@pytest.fixture(scope="module")
def naive(audio_llama: Path, demo: DemoPaths) -> NaiveTTS:
    tts = NaiveTTS.load(audio_llama, demo.codec)
    yield tts
    tts.close()


def _frames(n: int, seed: int = 0) -> list[tuple[int, ...]]:
    rng = np.random.default_rng(seed)
    return [tuple(int(c) for c in rng.integers(0, orpheus.CODEBOOK_SIZE, orpheus.FRAME_TOKENS)) for _ in range(n)]


def _naive_decode(codec: NaiveCodec, frames: list[tuple[int, ...]], seed: int | None) -> np.ndarray:
    windows = ReferenceWindows(seed)
    out = [codec.decode(w) for frame in frames if (w := windows.push(frame)) is not None]
    return np.concatenate(out)


def test_decode_is_the_reference_sliding_window(naive: NaiveTTS) -> None:
    n, seed = 7, 7
    frames = _frames(n)
    got = _naive_decode(naive.codec, frames, seed)
    assert len(got) == (n - 3) * orpheus.SAMPLES_PER_FRAME  # frames 1..n-3: never frame 0 or the last two
    # One window per call, as the reference decodes (a wider batch rounds differently).
    windows = [CodecWindow(frames[i - 3 : i + 1], start_frame=i - 3, keep=(1, 2), seed=seed) for i in range(3, n)]
    expected = [naive.codec.decoder.decode_windows([w])[0] for w in windows]
    np.testing.assert_array_equal(got, np.concatenate(expected))
    stats = naive.codec.stats()
    assert stats.decodes == n - 3 and stats.mean_batch == 1.0 and stats.frames == 4 * stats.decodes

    # With the noise off it is the reference's own code: SNAC on the last 4 frames, samples 2048:4096.
    snac = naive.codec.decoder.model  # between decodes its noise blocks are off
    reference = []
    for i in range(3, n):
        codes: tuple[list[int], list[int], list[int]] = ([], [], [])
        for f in frames[i - 3 : i + 1]:
            codes[0].append(f[0])
            codes[1].extend((f[1], f[4]))
            codes[2].extend((f[2], f[3], f[5], f[6]))
        with torch.inference_mode():
            audio = snac.decode([torch.tensor([c]) for c in codes])  # (1, 1, 4 * 2048)
        reference.append(audio[0, 0, 2048:4096].numpy())
    np.testing.assert_array_equal(_naive_decode(naive.codec, frames, None), np.concatenate(reference))


def test_stream_drops_frame_zero_and_the_last_two(naive: NaiveTTS) -> None:
    async def run() -> tuple[list[np.ndarray], object]:
        stream = naive.stream("Hello there.", "tara", SpeechOptions(max_tokens=70, seed=3))
        return [chunk async for chunk in stream], stream

    chunks, stream = asyncio.run(run())
    assert stream.frames == 10 and stream.tokens == 70 and stream.dropped_tokens == 0
    assert [len(c) for c in chunks] == [orpheus.SAMPLES_PER_FRAME] * 7  # one frame per chunk
    assert all(c.dtype == np.int16 for c in chunks)
    assert stream.samples == (10 - 3) * orpheus.SAMPLES_PER_FRAME
    assert stream.audio_seconds == pytest.approx(7 * 2048 / 24000)
    assert stream.finish_reason is FinishReason.LENGTH and stream.trimmed_ms == 0.0
    assert stream.started_at < stream.first_chunk_at and stream.prompt_tokens > 4
    assert not stream.generating
    assert naive.engine.stats().running == 0 and naive.engine.stats().tokens >= 70


def test_its_listener_plays_at_the_pipeline_s_playback_rate(naive: NaiveTTS) -> None:
    slow = NaiveTTS(naive.engine, naive.tokenizer, naive.codec, naive.voices, naive.config, playback_rate=0.25)

    async def run() -> object:
        stream = slow.stream("Hello there.", "tara", SpeechOptions(max_tokens=35, seed=3))
        async for _ in stream:
            pass
        return stream

    stream = asyncio.run(run())
    # Its 2 frames' audio (2 x 85 ms) plays for four times as long at a quarter of real time.
    assert stream.clock.rate == 0.25 and stream.samples == 2 * orpheus.SAMPLES_PER_FRAME
    assert stream.clock.runs_dry_at() - stream.clock.started_at >= 4 * stream.audio_seconds - 1e-9
    with pytest.raises(ValueError, match="playback rate"):
        NaiveTTS(naive.engine, naive.tokenizer, naive.codec, naive.voices, playback_rate=0.0)


def test_concurrent_requests_each_run_their_own_generate(naive: NaiveTTS) -> None:
    async def one(seed: int) -> int:
        stream = naive.stream("Two at once.", "leo", SpeechOptions(max_tokens=35, seed=seed))
        return sum([len(chunk) async for chunk in stream])

    async def both() -> list[int]:
        return list(await asyncio.gather(one(1), one(2)))

    assert asyncio.run(both()) == [(5 - 3) * orpheus.SAMPLES_PER_FRAME] * 2
    assert naive.engine.stats().running == 0


def test_a_failed_generate_raises_to_the_reader(naive: NaiveTTS) -> None:
    # An id past the vocabulary: the embedding lookup inside generate fails, in its thread.
    stream = NaiveSpeechStream(naive, "bad", None, SamplingParams(max_tokens=7, seed=0),
                               prompt=[orpheus.START_OF_HUMAN, 10**6])

    async def run() -> None:
        with pytest.raises(RuntimeError, match="request bad: generation failed") as raised:
            async for _ in stream:
                pass
        assert isinstance(raised.value.__cause__, IndexError)

    asyncio.run(run())
    assert stream.finish_reason is FinishReason.ERROR and not stream.generating
    assert naive.engine.stats().running == 0


def test_demo_model_tokens_are_dropped_like_the_reference(demo: DemoPaths) -> None:
    # The random demo model, unconstrained, writes almost no token valid at its position.
    tts = NaiveTTS.load(demo.model, demo.codec)
    try:
        async def run() -> object:
            stream = tts.stream("Hi.", None, SpeechOptions(max_tokens=14, seed=0))
            assert [chunk async for chunk in stream] == []
            return stream

        stream = asyncio.run(run())
        # About 1 token in 38 lands in its position's 4096 ids by chance.
        assert stream.tokens == 14 and stream.dropped_tokens >= 10 and stream.frames <= 1
    finally:
        tts.close()


def test_on_the_demo_model_the_baseline_masks_to_valid_audio(monkeypatch: pytest.MonkeyPatch, demo: DemoPaths) -> None:
    # With no model named, the demo is served and masked, so it makes audio like a trained model would.
    monkeypatch.setenv("LYRE_CACHE_DIR", str(demo.model.parents[1]))
    tts = NaiveTTS.load()
    try:
        assert tts.engine.valid_audio_only

        async def run() -> tuple[int, NaiveSpeechStream]:
            stream = tts.stream("Hi.", None, SpeechOptions(max_tokens=42, seed=0))
            return sum([len(chunk) async for chunk in stream]), stream

        samples, stream = asyncio.run(run())
        assert stream.tokens == 42 and stream.dropped_tokens == 0 and stream.frames == 6
        assert samples == (6 - 3) * orpheus.SAMPLES_PER_FRAME  # the reference decode: frames 1..3 heard
    finally:
        tts.close()


def test_input_is_checked_like_lyre(naive: NaiveTTS) -> None:
    with pytest.raises(TextError):
        naive.stream("x" * 4097)
    with pytest.raises(ValueError, match="unknown voice"):
        naive.stream("Hello.", "nobody")


def test_aclose_stops_generation_at_once(naive: NaiveTTS) -> None:
    async def run() -> tuple[int, int, float]:
        stream = naive.stream("A long one.", None, SpeechOptions(max_tokens=7000, seed=1))
        await anext(stream)  # frame 1 heard: 28 tokens made
        closed_at_tokens = naive.engine.stats().tokens
        await stream.aclose()
        start = time.monotonic()
        while stream.generating and time.monotonic() - start < 1.0:
            await asyncio.sleep(0.005)
        assert stream.finish_reason is None  # never finished: closed mid-stream
        return closed_at_tokens, naive.engine.stats().tokens, time.monotonic() - start

    before, after, waited = asyncio.run(run())
    assert waited < 1.0
    assert after - before <= 3  # the cancel flag is read after every token
    assert naive.engine.stats().running == 0


def test_server_config_names_the_engine() -> None:
    assert ServerConfig(engine="naive").engine == "naive"
    with pytest.raises(ValueError, match="engine must be one of lyre, naive"):
        ServerConfig(engine="vllm")


def test_lyre_serve_engine_naive(audio_llama: Path, demo: DemoPaths) -> None:
    with running_server("--engine", "naive", "--model", str(audio_llama), "--codec", str(demo.codec)) as server:
        assert httpx.get(f"{server.url}/ready", timeout=10).status_code == 200
        facts = httpx.get(f"{server.url}/health", timeout=10).json()["summary"]["tts"]  # what the baseline runs
        assert (facts["pipeline"], facts["attention"], facts["kv_slots"], facts["device"], facts["dtype"]) == (
            "naive", "transformers", None, "cpu", "float32")
        assert (facts["model"]["name"], facts["codec"]["origin"]) == (str(audio_llama), "named")
        body = {"model": "orpheus", "input": "Hello there.", "voice": "tara", "response_format": "pcm",
                "max_tokens": 70, "seed": 5}
        reply = httpx.post(f"{server.url}/v1/audio/speech", json=body, timeout=60)
        assert reply.status_code == 200
        assert len(reply.content) == (10 - 3) * orpheus.SAMPLES_PER_FRAME * 2  # s16le

        async def websocket() -> bytes:
            message = {"context_id": "c1", "model_id": "orpheus", "voice": {"mode": "id", "id": "tara"},
                       "output_format": {"container": "raw", "encoding": "pcm_s16le", "sample_rate": 24000},
                       "transcript": "Hello there.", "continue": False, "max_tokens": 35, "seed": 2}
            audio = b""
            async with connect(f"{server.ws_url}/v1/tts/websocket") as ws:
                await ws.send(json.dumps(message))
                while not (reply := json.loads(await asyncio.wait_for(ws.recv(), 30)))["done"]:
                    audio += base64.b64decode(reply["data"])
            assert reply["type"] == "done"
            # The naive pipeline reports its one generation cut at max_tokens too (the demo never stops).
            cuts = [(c["segment"], c["reason"], c["max_tokens"]) for c in reply["cut_segments"]]
            assert cuts == [(0, "max_tokens", 35)]
            return audio

        assert len(asyncio.run(websocket())) == (5 - 3) * orpheus.SAMPLES_PER_FRAME * 2
        assert server.metric("lyre_tokens_generated_total") >= 70 + 35

        # Word times on the baseline too: its one segment is aligned once its audio is out.
        timed = httpx.post(f"{server.url}/v1/audio/speech", json={**body, "timestamps": True}, timeout=120)
        assert timed.status_code == 200, timed.text
        # The demo model's noise never ends a segment: it is cut on max_tokens, and the words the aligner finds
        # unsaid in it are left out, so the words come in order but maybe not all.
        words = [w["text"] for w in timed.json()["words"]]
        assert words and words == ["Hello", "there."][:len(words)], words

        async def timed_socket() -> list[str]:
            message = {"context_id": "t", "voice": {"mode": "id", "id": "tara"}, "transcript": "Hello there.",
                       "continue": False, "max_tokens": 70, "seed": 2, "add_timestamps": True,
                       "output_format": {"container": "raw", "encoding": "pcm_s16le", "sample_rate": 24000}}
            words: list[str] = []
            async with connect(f"{server.ws_url}/v1/tts/websocket") as ws:
                await ws.send(json.dumps(message))
                while not (reply := json.loads(await asyncio.wait_for(ws.recv(), 60)))["done"]:
                    if reply["type"] == "timestamps":
                        words += reply["word_timestamps"]["words"]
            assert reply["type"] == "done", reply
            return words

        assert asyncio.run(timed_socket()) == ["Hello", "there."]
