"""The model, the codec and the served app of benchmarks/gpu.py: random Orpheus-3B weights built on the GPU
(or the demo model with ``--small``), or a real folder with ``--model``; served by lyre's own app on loopback.

Used by benchmarks/gpu.py and its modules.
"""

from __future__ import annotations

import os
import platform
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import httpx
import torch
import uvicorn
from gpu_levers import Lever
from gpu_plan import Plan

from lyre import orpheus
from lyre.codec import BatchPolicy, CodecService, SnacDecoder, load_snac
from lyre.codec.snac import prepare_snac
from lyre.models.demo import build_orpheus_tokenizer, demo_model, demo_snac
from lyre.engine import Engine, EngineConfig
from lyre.models.config import LlamaConfig, RopeScaling
from lyre.models.fp8 import quantize_fp8
from lyre.models.llama import Llama
from lyre.models.loader import load_llama
from lyre.models.choice import ModelChoice, Weights
from lyre.models.folder import load_tokenizer
from lyre.server.app import create_app
from lyre.server.config import ServerConfig
from lyre.tts import AUDIO_CONSTRAINT, TTS, ServingConfig, TTSConfig, Voices, load_voices

__all__ = ["ORPHEUS_3B", "build_tts", "decoder", "machine", "model", "serving", "weights"]

# canopylabs/orpheus-3b-0.1-ft's config.json (Llama-3.2-3B with Orpheus's vocabulary).
ORPHEUS_3B = LlamaConfig(
    vocab_size=156_940,
    hidden_size=3072,
    intermediate_size=8192,
    num_hidden_layers=28,
    num_attention_heads=24,
    num_key_value_heads=8,
    head_dim=128,
    rope_theta=500_000.0,
    rope_scaling=RopeScaling(factor=32.0, low_freq_factor=1.0, high_freq_factor=4.0,
                             original_max_position_embeddings=8192),
    tie_word_embeddings=True,
)
_INIT_STD = 0.02  # Llama's initializer_range
_READY_TIMEOUT_S = 600.0  # graph capture, codec load and the warm-up utterance


def machine(device: str) -> str:
    where = torch.cuda.get_device_name(device) if device.startswith("cuda") else (platform.processor() or "cpu")
    return (f"{device}: {where}, {os.cpu_count()} CPU cores, torch {torch.__version__}, "
            f"Python {platform.python_version()}")


def _random_orpheus_3b(max_seq_len: int, device: str) -> Llama:
    """Orpheus-3B's shape with random bf16 weights, built on ``device`` (no host copy)."""
    with torch.device(device):
        previous = torch.get_default_dtype()
        torch.set_default_dtype(torch.bfloat16)
        try:
            built = Llama(ORPHEUS_3B, max_seq_len)
        finally:
            torch.set_default_dtype(previous)
    with torch.no_grad():
        for name, param in built.named_parameters():
            if name.endswith("norm.weight"):
                param.fill_(1.0)
            else:
                param.normal_(0.0, _INIT_STD)
    built.build_rope(device)  # float32 tables, rebuilt outside the bf16 default
    return built.eval()


def model(plan: Plan, max_seq_len: int) -> Llama:
    dtype = "float32" if plan.small else "bfloat16"
    if plan.model is not None:
        return load_llama(plan.model, max_seq_len, plan.device, dtype)
    if plan.small:
        return load_llama(demo_model().model, max_seq_len, "cpu", dtype)
    return _random_orpheus_3b(max_seq_len, plan.device)


def weights(plan: Plan) -> ModelChoice:
    """What this run times with, said plainly: random weights (no hub here) make noise."""
    if plan.model is not None and plan.codec is not None:
        return ModelChoice(Weights(str(plan.model), plan.model, "named"), Weights(str(plan.codec), plan.codec, "named"))
    name = ("the demo model (tiny, random float32 weights)" if plan.small
            else "an Orpheus-3B-shaped Llama with random bf16 weights, built on the GPU")
    return ModelChoice(Weights.in_memory(name, random=True),
                       Weights.in_memory("SNAC 24 kHz shape with seeded random weights (the demo codec)", random=True))


def decoder(plan: Plan, dtype: str = "float32", graphs: bool = False) -> SnacDecoder:
    if plan.codec is not None:
        return SnacDecoder(load_snac(plan.codec, plan.device, dtype=dtype), cuda_graphs=graphs)
    return SnacDecoder(prepare_snac(demo_snac(), plan.device, dtype=dtype), cuda_graphs=graphs)


def build_tts(plan: Plan, lever: Lever, max_batch: int, scheduler: str = "deadline") -> TTS:
    cuda = plan.device.startswith("cuda")
    config = EngineConfig(max_batch=max_batch, max_seq_len=plan.max_seq_len, device=plan.device,
                          attention=lever.attention, cuda_graphs=cuda and lever.mode == "graphs", scheduler=scheduler)
    built = model(plan, plan.max_seq_len)
    if lever.fp8:
        quantize_fp8(built)
    engine = Engine(built, config, AUDIO_CONSTRAINT.family)
    codec = CodecService(decoder(plan), BatchPolicy.for_device(plan.device))  # lyre serve's default: eager
    if plan.model is not None:
        tokenizer, voices = load_tokenizer(plan.model), load_voices(plan.model, {})
    else:
        tokenizer, voices = build_orpheus_tokenizer(), Voices.with_aliases(orpheus.VOICES)
    return TTS(engine, tokenizer, codec, voices, TTSConfig(), source=weights(plan))


@contextmanager
def serving(tts: TTS, plan: Plan, max_streams: int) -> Iterator[str]:
    """lyre's app on a free loopback port in a background thread; yields its URL once /ready says so."""
    config = ServerConfig(serving=ServingConfig(max_streams=max_streams, device=plan.device,
                                                max_seq_len=plan.max_seq_len), max_queue=2 * max_streams)
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    server = uvicorn.Server(uvicorn.Config(create_app(config, tts=tts), log_level="warning"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, name="uvicorn", daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + _READY_TIMEOUT_S
        with httpx.Client(timeout=5.0) as client:  # one client for every poll: each new one loads the CA bundle
            while time.monotonic() < deadline:
                if not thread.is_alive():
                    raise RuntimeError("the server thread stopped before it was ready (see the log above)")
                try:
                    if client.get(url + "/ready").status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                time.sleep(0.2)
            else:
                raise RuntimeError(f"{url} not ready after {_READY_TIMEOUT_S:g} s")
        yield url
    finally:
        server.should_exit = True
        thread.join(60)
        sock.close()
