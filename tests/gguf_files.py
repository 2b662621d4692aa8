"""Write small GGUF files as llama.cpp's converter does, for the loader's tests."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import gguf
import numpy as np
import torch
from transformers import LlamaConfig, LlamaForCausalLM

Q = gguf.GGMLQuantizationType
# A Llama small enough to write and load in milliseconds; every row is a whole number of 32-wide blocks.
_TINY = {"vocab_size": 320, "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
         "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "rope_theta": 10_000.0,
         "rms_norm_eps": 1e-5, "tie_word_embeddings": False, "max_position_embeddings": 256}


def tiny_config(**changes: object) -> LlamaConfig:
    return LlamaConfig(**{**_TINY, **changes})


TINY = tiny_config()
TEMPLATE = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
            "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


def tiny_llama(seed: int = 0, config: LlamaConfig = TINY) -> LlamaForCausalLM:
    torch.manual_seed(seed)
    return LlamaForCausalLM(config).eval()


def _permute(weight: np.ndarray, heads: int) -> np.ndarray:
    """llama.cpp's convert_hf_to_gguf permutation of q/k rows (each head's halves interleaved)."""
    return weight.reshape(heads, 2, weight.shape[0] // heads // 2, *weight.shape[1:]).swapaxes(1, 2).reshape(
        weight.shape)


def _gguf_name(hf_name: str, layers: int) -> str:
    name = gguf.get_tensor_name_map(gguf.MODEL_ARCH.LLAMA, layers).get_name(hf_name, try_suffixes=(".weight",))
    assert name is not None, hf_name
    return name


@dataclass
class Vocab:
    """tokenizer.ggml.* metadata."""

    tokens: list[str]
    types: list[int]
    merges: list[str] = field(default_factory=list)
    model: str = "gpt2"
    pre: str = "default"
    eos: int = 2
    bos: int = 1


def byte_vocab(size: int) -> Vocab:
    """A byte-level BPE vocabulary of ``size``: specials, the 256 byte symbols, then merged pairs."""
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    from tokenizers.pre_tokenizers import ByteLevel

    symbols = sorted(ByteLevel.alphabet())
    merges = [f"{a} {b}" for a in "Ġtaeh" for b in "ehtsn"]
    tokens = specials + symbols + [m.replace(" ", "") for m in merges]
    tokens += [f"<unused_{i}>" for i in range(size - len(tokens))]
    types = [gguf.TokenType.CONTROL] * 3 + [gguf.TokenType.NORMAL] * (size - 3)
    return Vocab(tokens[:size], types[:size], merges)


def write_gguf(path: Path, model: LlamaForCausalLM, qtype: Q = Q.F32, vocab: Vocab | None = None,
               architecture: str = "llama", rope_freqs: np.ndarray | None = None,
               types: dict[str, Q] | None = None) -> Path:
    """``model`` as llama.cpp writes it: renamed, q/k permuted, 2-D weights in ``qtype`` (norms stay F32).

    ``types`` overrides the type of single tensors (by GGUF name) to write raw random bytes of that type.
    """
    cfg = model.config
    vocab = vocab or byte_vocab(cfg.vocab_size)
    w = gguf.GGUFWriter(path, architecture)
    w.add_block_count(cfg.num_hidden_layers)
    w.add_context_length(cfg.max_position_embeddings)
    w.add_embedding_length(cfg.hidden_size)
    w.add_feed_forward_length(cfg.intermediate_size)
    w.add_head_count(cfg.num_attention_heads)
    w.add_head_count_kv(cfg.num_key_value_heads)
    w.add_rope_freq_base(cfg.rope_parameters["rope_theta"])
    w.add_layer_norm_rms_eps(cfg.rms_norm_eps)
    w.add_tokenizer_model(vocab.model)
    w.add_tokenizer_pre(vocab.pre)
    w.add_token_list(vocab.tokens)
    w.add_token_types(vocab.types)
    if vocab.merges:
        w.add_token_merges(vocab.merges)
    w.add_bos_token_id(vocab.bos)
    w.add_eos_token_id(vocab.eos)
    w.add_chat_template(TEMPLATE)
    if rope_freqs is not None:
        w.add_tensor("rope_freqs.weight", rope_freqs.astype(np.float32))
    rng = np.random.default_rng(0)
    for hf_name, tensor in model.state_dict().items():
        if hf_name == "lm_head.weight" and cfg.tie_word_embeddings:
            continue
        data = tensor.float().numpy()
        if hf_name.endswith("q_proj.weight"):
            data = _permute(data, cfg.num_attention_heads)
        elif hf_name.endswith("k_proj.weight"):
            data = _permute(data, cfg.num_key_value_heads)
        name = _gguf_name(hf_name, cfg.num_hidden_layers)
        kind = (types or {}).get(name, qtype if data.ndim == 2 else Q.F32)
        if name in (types or {}):
            shape = gguf.quant_shape_to_byte_shape(data.shape, kind)
            w.add_tensor(name, rng.integers(0, 256, shape, dtype=np.uint8), raw_dtype=kind)
        elif kind in (Q.F32, Q.F16):
            w.add_tensor(name, data.astype(np.float32 if kind == Q.F32 else np.float16))
        else:
            w.add_tensor(name, gguf.quants.quantize(data, kind), raw_dtype=kind)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path
