"""Load a Llama-family GGUF file (llama.cpp's single-file format) into :class:`Llama`.

The ``gguf`` package reads the file and dequantises its tensors; this module
maps GGUF tensor names to the Hugging Face names the model uses, undoes the
row permutation llama.cpp's converter applies to q_proj and k_proj, and builds
the :class:`LlamaConfig` from the file's metadata.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import gguf
import numpy as np
import torch

from lyre.models.config import LlamaConfig, RopeScaling
from lyre.models.llama import Llama, rope_frequencies
from lyre.models.loader import DTYPES, assign_weights
from lyre.models.folder import ModelFolderError

__all__ = ["SUPPORTED_TYPES", "GGUFError", "gguf_path", "gguf_llama_config", "load_gguf_llama", "open_gguf"]

Q = gguf.GGMLQuantizationType
# Types the loader dequantises: plain floats and llama.cpp's legacy block quants, all of
# which the gguf package can also write, so each is tested by a round trip.
SUPPORTED_TYPES = frozenset({Q.F32, Q.F16, Q.BF16, Q.Q4_0, Q.Q4_1, Q.Q5_0, Q.Q5_1, Q.Q8_0})
ARCHITECTURE = "llama"
# Meta's llama3 RoPE parameters besides the factor; GGUF keeps only the per-frequency
# factors they produce (rope_freqs.weight), so they are checked against those.
_LLAMA3_ROPE = {"low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}


class GGUFError(ModelFolderError):
    """A GGUF file this loader cannot use; the message says which and why."""


class _Reader(gguf.GGUFReader):
    """gguf's reader over a plain array view of its memory map.

    The reader slices its map once per metadata item, and a tokenizer holds about 100,000 of them
    (tokens and merges); every slice of an ``np.memmap`` builds a new memmap object, which made
    parsing a small chat model's metadata take over 5 s of CPU. A plain ndarray view reads the same
    mapped bytes, lazily, at a third of the cost.
    """

    @property  # type: ignore[override]
    def data(self) -> np.ndarray:
        return self._plain

    @data.setter
    def data(self, value: np.memmap) -> None:
        self.path = Path(value.filename)
        self._plain = value.view(np.ndarray)


def gguf_path(reader: gguf.GGUFReader) -> Path:
    """The file a reader reads."""
    return reader.path if isinstance(reader, _Reader) else Path(reader.data.filename)


def open_gguf(path: str | os.PathLike[str]) -> gguf.GGUFReader:
    """Open a GGUF file (memory-mapped: nothing is read until used)."""
    path = Path(path).expanduser()
    if not path.is_file():
        raise GGUFError(f"GGUF file '{path}' does not exist" if not path.exists() else f"'{path}' is not a file")
    try:
        return _Reader(path)
    except (ValueError, OSError) as error:  # a bad magic number or a truncated file
        raise GGUFError(f"'{path}' is not a readable GGUF file: {error}") from None


def metadata(reader: gguf.GGUFReader, key: str, default: Any = None) -> Any:
    """A metadata value (strings decoded, arrays as lists), or ``default`` when absent."""
    field = reader.fields.get(key)
    return default if field is None else field.contents()


def gguf_llama_config(reader: gguf.GGUFReader) -> LlamaConfig:
    """The model's shape from the file's metadata; refuses other architectures."""
    arch = metadata(reader, gguf.Keys.General.ARCHITECTURE)
    if arch != ARCHITECTURE:
        raise GGUFError(f"{_name(reader)}: architecture is {arch!r}; this engine runs Llama-family models ('llama')")
    tensors = {t.name: t for t in reader.tensors}

    def key(name: str, default: Any = None) -> Any:
        value = metadata(reader, f"{arch}.{name}", default)
        if value is None:
            raise GGUFError(f"{_name(reader)}: metadata lacks {arch}.{name}")
        return value

    scaling_type = metadata(reader, f"{arch}.rope.scaling.type", "none")
    if scaling_type not in ("none", "llama3"):
        raise GGUFError(f"{_name(reader)}: rope scaling {scaling_type!r} is not supported (only llama3)")
    hidden = int(key("embedding_length"))
    heads = int(key("attention.head_count"))
    embed = tensors.get("token_embd.weight")
    if embed is None:
        raise GGUFError(f"{_name(reader)}: no token_embd.weight tensor")
    cfg = LlamaConfig(
        vocab_size=int(embed.shape[-1]),  # ggml order: (hidden, vocab)
        hidden_size=hidden,
        intermediate_size=int(key("feed_forward_length")),
        num_hidden_layers=int(key("block_count")),
        num_attention_heads=heads,
        num_key_value_heads=int(key("attention.head_count_kv", heads)),
        head_dim=int(key("attention.key_length", hidden // heads)),
        rope_theta=float(key("rope.freq_base", 10_000.0)),
        rms_norm_eps=float(key("attention.layer_norm_rms_epsilon", 1e-5)),
        tie_word_embeddings="output.weight" not in tensors,
        max_position_embeddings=int(key("context_length", 2048)),
    )
    freqs = tensors.get("rope_freqs.weight")
    if freqs is None:
        return cfg
    return _with_llama3_rope(reader, cfg, np.asarray(gguf.quants.dequantize(freqs.data, freqs.tensor_type)))


def _with_llama3_rope(reader: gguf.GGUFReader, cfg: LlamaConfig, factors: np.ndarray) -> LlamaConfig:
    """Recover llama3 RoPE scaling from the per-frequency divisors llama.cpp stores."""
    factor = float(metadata(reader, f"{ARCHITECTURE}.rope.scaling.factor", factors.max()))
    scaled = LlamaConfig(**{**cfg.__dict__, "rope_scaling": RopeScaling(factor=factor, **_LLAMA3_ROPE)})
    implied = (rope_frequencies(cfg) / rope_frequencies(scaled)).numpy()
    if implied.shape != factors.shape or not np.allclose(implied, factors, rtol=1e-3):
        raise GGUFError(f"{_name(reader)}: rope_freqs.weight is not llama3 scaling with factor {factor:g} "
                        f"and Meta's parameters {_LLAMA3_ROPE}")
    return scaled


def load_gguf_llama(source: gguf.GGUFReader | str | os.PathLike[str], max_seq_len: int, device: str,
                    dtype: str) -> Llama:
    """Build the model on the meta device and assign the file's tensors, dequantised to ``dtype``.

    Tensors are dequantised one at a time, so peak memory stays near the
    model's size in ``dtype`` plus its largest tensor in float32.
    """
    reader = source if isinstance(source, gguf.GGUFReader) else open_gguf(source)
    cfg = gguf_llama_config(reader)
    with torch.device("meta"):
        model = Llama(cfg, max_seq_len)
    expected = {name: p.shape for name, p in model.state_dict().items()}
    names = _hf_names(cfg, expected)
    state: dict[str, torch.Tensor] = {}
    for tensor in reader.tensors:
        if tensor.name == "rope_freqs.weight":
            continue  # read into the config's RoPE scaling
        name = names.get(tensor.name)
        if name is None:
            raise GGUFError(f"{_name(reader)}: unexpected tensor {tensor.name!r} for a Llama model")
        weight = _dequantise(reader, tensor)
        if name.endswith(("q_proj.weight", "k_proj.weight")):
            kv = name.endswith("k_proj.weight")
            weight = _unpermute(weight, cfg.num_key_value_heads if kv else cfg.num_attention_heads)
        if tuple(weight.shape) != tuple(expected[name]):
            raise GGUFError(f"{_name(reader)}: tensor {tensor.name!r} has shape {tuple(weight.shape)}, "
                            f"the metadata implies {tuple(expected[name])}")
        state[name] = weight.to(device=device, dtype=DTYPES[dtype])
    return assign_weights(model, state, device, f"{_name(reader)}: file")


def _hf_names(cfg: LlamaConfig, expected: dict[str, torch.Size]) -> dict[str, str]:
    """GGUF tensor name -> the model's Hugging Face name, from gguf's own name table."""
    table = gguf.get_tensor_name_map(gguf.MODEL_ARCH.LLAMA, cfg.num_hidden_layers)
    names = {}
    for hf_name in expected:
        gguf_name = table.get_name(hf_name, try_suffixes=(".weight",))
        assert gguf_name is not None, hf_name  # every Llama parameter has a GGUF name
        names[gguf_name] = hf_name
    return names


def _dequantise(reader: gguf.GGUFReader, tensor: gguf.ReaderTensor) -> torch.Tensor:
    """(rows, cols) float32, in the Hugging Face (out, in) order."""
    if tensor.tensor_type not in SUPPORTED_TYPES:
        supported = ", ".join(sorted(t.name for t in SUPPORTED_TYPES))
        raise GGUFError(f"{_name(reader)}: tensor {tensor.name!r} is {tensor.tensor_type.name}, which this loader "
                        f"does not dequantise (supported: {supported})")
    if (fast := _BLOCKS.get(tensor.tensor_type)) is not None:
        return torch.from_numpy(fast(np.asarray(tensor.data)))
    # A copy: F32 data comes back as the read-only memory map itself.
    return torch.from_numpy(np.array(gguf.quants.dequantize(tensor.data, tensor.tensor_type), dtype=np.float32))


def _q4_0(raw: np.ndarray) -> np.ndarray:
    """Q4_0, the whole tensor at once (gguf's own goes row group by row group, about 10x slower): blocks of
    32 weights, a float16 scale then 16 bytes of 4-bit values less 8, the low nibbles first."""
    blocks = raw.reshape(raw.shape[0], -1, 18)
    scale = blocks[..., :2].copy().view(np.float16).astype(np.float32)
    return (scale * (_nibbles(blocks[..., 2:]) - 8)).reshape(raw.shape[0], -1)


def _q4_1(raw: np.ndarray) -> np.ndarray:
    """Q4_1: blocks of 32, a float16 scale and minimum, then 16 bytes of 4-bit values."""
    blocks = raw.reshape(raw.shape[0], -1, 20)
    scale = blocks[..., :2].copy().view(np.float16).astype(np.float32)
    low = blocks[..., 2:4].copy().view(np.float16).astype(np.float32)
    return (scale * _nibbles(blocks[..., 4:]) + low).reshape(raw.shape[0], -1)


def _q8_0(raw: np.ndarray) -> np.ndarray:
    """Q8_0: blocks of 32, a float16 scale then 32 signed bytes."""
    blocks = raw.reshape(raw.shape[0], -1, 34)
    scale = blocks[..., :2].copy().view(np.float16).astype(np.float32)
    return (scale * blocks[..., 2:].view(np.int8)).reshape(raw.shape[0], -1)


def _nibbles(packed: np.ndarray) -> np.ndarray:
    """(…, 16) bytes -> (…, 32) float32 values: the 16 low nibbles, then the 16 high ones."""
    return np.concatenate([packed & 0x0F, packed >> 4], axis=-1).astype(np.float32)


_BLOCKS = {Q.Q4_0: _q4_0, Q.Q4_1: _q4_1, Q.Q8_0: _q8_0}


def _unpermute(weight: torch.Tensor, heads: int) -> torch.Tensor:
    """Undo llama.cpp's convert permutation of q/k rows.

    Hugging Face's rotary embedding pairs dimension i with i + head_dim/2 in
    each head; llama.cpp pairs 2i with 2i + 1, so its converter interleaves the
    two halves of every head's rows. Reading them back de-interleaves.
    """
    rows = weight.shape[0]
    # (heads, head_dim/2, 2, in) -> (heads, 2, head_dim/2, in): pairs back into halves
    return weight.reshape(heads, rows // heads // 2, 2, -1).transpose(1, 2).reshape(rows, -1)


def _name(reader: gguf.GGUFReader) -> str:
    return f"'{gguf_path(reader)}'"
