"""Load a Hugging Face Llama checkpoint folder into :class:`Llama`, and prepare it for serving."""

from __future__ import annotations

from pathlib import Path

import torch

from lyre.models.fp8 import quantize_fp8
from lyre.models.config import LlamaConfig
from lyre.models.llama import Llama
from lyre.models.lora import LoraBank, attach_lora
from lyre.models.folder import ModelFolderError, iter_safetensors, load_config

__all__ = ["DTYPES", "assign_weights", "load_llama", "prepare_model"]

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def load_llama(folder: Path, max_seq_len: int, device: str, dtype: str) -> Llama:
    """Build the model on the meta device and assign the checkpoint's tensors.

    Weights are read one tensor at a time and cast straight to ``dtype`` on
    ``device``, so a float32 checkpoint never sits in memory twice.
    """
    cfg = LlamaConfig.from_hf(load_config(folder))
    torch_dtype = DTYPES[dtype]
    with torch.device("meta"):
        model = Llama(cfg, max_seq_len)
    expected = {name: p.shape for name, p in model.state_dict().items()}
    state: dict[str, torch.Tensor] = {}
    for name, tensor in iter_safetensors(folder):
        if name == "lm_head.weight" and cfg.tie_word_embeddings:
            continue  # tied: some checkpoints store a copy of the embedding
        if name.endswith("rotary_emb.inv_freq"):
            continue  # old checkpoints store the RoPE table; we compute it
        if name not in expected:
            raise ModelFolderError(f"{folder}: unexpected tensor {name!r} for a Llama checkpoint")
        if tuple(tensor.shape) != tuple(expected[name]):
            raise ModelFolderError(
                f"{folder}: tensor {name!r} has shape {tuple(tensor.shape)}, config.json implies {tuple(expected[name])}"
            )
        state[name] = tensor.to(device=device, dtype=torch_dtype)
    return assign_weights(model, state, device, f"{folder}: checkpoint")


def assign_weights(model: Llama, state: dict[str, torch.Tensor], device: str, source: str) -> Llama:
    """Put a complete state dict into a model built on the meta device; ``source`` names it in errors."""
    missing = sorted(set(model.state_dict()) - set(state))
    if missing:
        shown = ", ".join(missing[:5]) + (" ..." if len(missing) > 5 else "")
        raise ModelFolderError(f"{source} lacks {len(missing)} tensors: {shown}")
    model.load_state_dict(state, assign=True)
    model.build_rope(device)
    return model.requires_grad_(False).eval()  # assign=True kept requires_grad: no autograd in any forward


def prepare_model(model: Llama, quantize: str | None, adapter_slots: int, lora_rank: int) -> LoraBank | None:
    """The model surgery a runtime asks for, in place, before it runs the model: FP8 projections (``quantize``
    "fp8"), then a LoRA bank of ``adapter_slots`` slots of ``lora_rank`` around every adaptable projection (plain
    or FP8), which is returned (None without adapter slots)."""
    if quantize == "fp8":
        quantize_fp8(model)
    if not adapter_slots:
        return None
    bank = LoraBank(adapter_slots, lora_rank, model.output_weight.dtype, model.output_weight.device)
    attach_lora(model, bank)
    return bank
