"""LoRA adapters for the tests, made by `peft` itself on a transformers Llama of the demo model's config."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch

LORA_PROJECTIONS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def make_adapter(folder: Path, model_folder: Path, seed: int, r: int = 8, alpha: int = 16,
                 speaker: str | None = None, scale_b: float = 1.0, **lora: Any) -> Path:
    """Save a PEFT LoRA adapter (random A and B, so it changes the output) for the Llama in ``model_folder``."""
    from peft import LoraConfig, get_peft_model
    from transformers import LlamaForCausalLM

    torch.manual_seed(seed)
    base = LlamaForCausalLM.from_pretrained(model_folder, dtype=torch.float32)
    config = LoraConfig(r=r, lora_alpha=alpha, target_modules=lora.pop("target_modules", LORA_PROJECTIONS),
                        init_lora_weights=False, lora_dropout=0.0, **lora)
    model = get_peft_model(base, config)
    if scale_b != 1.0:
        with torch.no_grad():
            for name, param in model.named_parameters():
                if "lora_B" in name:
                    param.mul_(scale_b)
    model.save_pretrained(folder)
    if speaker is not None:
        (folder / "lyre_voice.json").write_text(json.dumps({"speaker": speaker}))
    return folder


def diverged_copy(source: Path, folder: Path, tensor: str, value: float = float("nan")) -> str:
    """A copy of the adapter in ``source`` at ``folder`` with one value of the first tensor whose name holds
    ``tensor`` set to ``value`` (NaN: what a diverged training run saves); the full name of that tensor."""
    import shutil

    from safetensors.torch import load_file, save_file

    folder.mkdir(parents=True)
    for path in source.iterdir():
        if path.name != "adapter_model.safetensors":
            shutil.copy(path, folder / path.name)
    tensors = load_file(source / "adapter_model.safetensors")
    key = next(k for k in sorted(tensors) if tensor in k)
    tensors[key][0, 0] = value
    save_file(tensors, folder / "adapter_model.safetensors", metadata={"format": "pt"})
    return key
