"""LoRA adapters as `peft` saves them: adapter_config.json + adapter_model.safetensors, checked whole.

Everything is read and checked before anything is returned, so a folder the
engine cannot serve is refused with the reason and nothing is half-loaded.
That includes NaN and infinite weights: one such adapter in a batch would
otherwise be one bad value away from every row of it.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors import safe_open

from lyre.models.config import LlamaConfig

__all__ = ["LORA_TARGETS", "MAX_LORA_RANK", "VOICE_FILE", "AdapterError", "AdapterWeights", "all_finite", "is_there",
           "read_peft_adapter"]

# The projections an adapter may adapt, with where each lives in a decoder layer.
LORA_TARGETS = {"q_proj": "self_attn", "k_proj": "self_attn", "v_proj": "self_attn", "o_proj": "self_attn",
                "gate_proj": "mlp", "up_proj": "mlp", "down_proj": "mlp"}
MAX_LORA_RANK = 64
CONFIG_FILE, WEIGHTS_FILE, VOICE_FILE = "adapter_config.json", "adapter_model.safetensors", "lyre_voice.json"
_KEY = re.compile(r"^base_model\.model\.model\.layers\.(\d+)\.(self_attn|mlp)\.(\w+)\.lora_([AB])\.weight$")


def all_finite(tensor: torch.Tensor) -> bool:
    """Whether every value is finite. A NaN or an infinity anywhere makes the sum NaN or infinite, so a finite
    sum settles it in one reduction; only a sum that overflowed needs the elementwise check."""
    return bool(torch.isfinite(tensor.sum())) or bool(torch.isfinite(tensor).all())


class AdapterError(ValueError):
    """An adapter folder the engine cannot serve; the message says which and why."""


@dataclass(frozen=True)
class AdapterWeights:
    """One adapter, read and checked: per (layer, projection) its A (r, in) and B (out, r) in float32."""

    name: str
    path: Path
    rank: int
    scale: float  # lora_alpha / r (or / sqrt(r) with rsLoRA)
    weights: dict[tuple[int, str], tuple[torch.Tensor, torch.Tensor]]

    @property
    def nbytes(self) -> int:
        return sum(a.numel() * a.element_size() + b.numel() * b.element_size() for a, b in self.weights.values())


def _dims(model: LlamaConfig, projection: str) -> tuple[int, int]:
    """(in, out) features of a projection of ``model``."""
    h, q, kv, i = (model.hidden_size, model.num_attention_heads * model.head_dim,
                   model.num_key_value_heads * model.head_dim, model.intermediate_size)
    return {"q_proj": (h, q), "k_proj": (h, kv), "v_proj": (h, kv), "o_proj": (q, h),
            "gate_proj": (h, i), "up_proj": (h, i), "down_proj": (i, h)}[projection]


def _config(folder: Path, max_rank: int) -> dict:
    path = folder / CONFIG_FILE
    if not path.is_file():
        raise AdapterError(f"{folder}: no {CONFIG_FILE} (a PEFT LoRA folder holds {CONFIG_FILE} and {WEIGHTS_FILE})")
    try:
        cfg = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise AdapterError(f"{path}: not valid JSON ({exc})") from None
    if cfg.get("peft_type") != "LORA":
        raise AdapterError(f"{path}: peft_type is {cfg.get('peft_type')!r}; only LORA adapters are served")
    if cfg.get("use_dora"):
        raise AdapterError(f"{path}: a DoRA adapter (use_dora); lyre serves plain LoRA only")
    saved = [m for m in (cfg.get("modules_to_save") or [])]
    if saved:
        raise AdapterError(f"{path}: it saves whole modules ({', '.join(saved)}, e.g. embed_tokens or lm_head); "
                           "lyre serves adapters that change the projections only, so every voice shares one base")
    if cfg.get("rank_pattern") or cfg.get("alpha_pattern"):
        raise AdapterError(f"{path}: per-module ranks or alphas (rank_pattern / alpha_pattern) are not served")
    if cfg.get("bias", "none") != "none" or cfg.get("lora_bias"):
        raise AdapterError(f"{path}: LoRA biases are not served (bias must be 'none')")
    if cfg.get("fan_in_fan_out"):
        raise AdapterError(f"{path}: fan_in_fan_out weights are for GPT-2-style layers, not a Llama")
    rank = cfg.get("r")
    if not isinstance(rank, int) or rank < 1:
        raise AdapterError(f"{path}: r must be a positive integer, got {rank!r}")
    alpha = cfg.get("lora_alpha", rank)
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float)):
        raise AdapterError(f"{path}: lora_alpha must be a number, got {alpha!r}")
    if rank > MAX_LORA_RANK:
        raise AdapterError(f"{path}: rank {rank} is above {MAX_LORA_RANK}, the most lyre serves")
    if rank > max_rank:
        raise AdapterError(f"{path}: rank {rank} is above this server's LoRA rank of {max_rank}; "
                           f"start it with --lora-rank {rank} (up to {MAX_LORA_RANK})")
    targets = cfg.get("target_modules") or []
    if isinstance(targets, str):
        raise AdapterError(f"{path}: target_modules as a pattern ({targets!r}) is not served; list the projections")
    unsupported = sorted(set(targets) - set(LORA_TARGETS))
    if unsupported:
        raise AdapterError(f"{path}: it targets {', '.join(unsupported)}; lyre adapts only {', '.join(LORA_TARGETS)}")
    return cfg


def is_there(path: Path, kind: Callable[[Path], bool] = Path.is_dir) -> bool:
    """``kind(path)`` (is it a folder, a file); AdapterError where the system cannot even look it up (a name
    too long for the file system, a NUL byte: the lookup raises instead of answering)."""
    try:
        return kind(path)
    except (OSError, ValueError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise AdapterError(f"adapter folder '{path.parent if kind is Path.is_file else path}' cannot be looked "
                           f"up: {reason}") from None


def read_peft_adapter(name: str, folder: str | Path, model: LlamaConfig, max_rank: int = MAX_LORA_RANK) -> AdapterWeights:
    """Read and check a PEFT LoRA folder against ``model``; AdapterError naming the problem otherwise."""
    folder = Path(folder).expanduser()
    if not is_there(folder):
        raise AdapterError(f"adapter folder '{folder}' does not exist")
    cfg = _config(folder, max_rank)
    rank, alpha = cfg["r"], float(cfg.get("lora_alpha", cfg["r"]))
    scale = alpha / math.sqrt(rank) if cfg.get("use_rslora") else alpha / rank
    if not math.isfinite(scale):
        raise AdapterError(f"{folder / CONFIG_FILE}: lora_alpha {alpha} gives a scale that is not finite")
    weights_path = folder / WEIGHTS_FILE
    if not weights_path.is_file():
        raise AdapterError(f"{folder}: no {WEIGHTS_FILE}")
    halves: dict[tuple[int, str], dict[str, torch.Tensor]] = {}
    with safe_open(str(weights_path), "pt") as f:
        for key in f.keys():
            match = _KEY.match(key)
            if match is None:
                raise AdapterError(f"{weights_path}: tensor {key!r} is not a LoRA weight of a Llama projection")
            layer, _, projection, half = int(match[1]), match[2], match[3], match[4]
            if projection not in LORA_TARGETS:
                raise AdapterError(f"{weights_path}: it adapts {projection}; lyre adapts only {', '.join(LORA_TARGETS)}")
            if layer >= model.num_hidden_layers:
                raise AdapterError(f"{weights_path}: layer {layer}, but the model has {model.num_hidden_layers}")
            tensor = f.get_tensor(key).float()
            if not all_finite(tensor):  # what a diverged training run saves; it would poison every row
                bad = "NaN" if tensor.isnan().any() else "infinite"
                raise AdapterError(f"{weights_path}: tensor {key!r} holds {bad} values (did its training diverge?); "
                                   "lyre serves only finite weights")
            halves.setdefault((layer, projection), {})[half] = tensor
    weights = {}
    for (layer, projection), pair in sorted(halves.items()):
        if set(pair) != {"A", "B"}:
            raise AdapterError(f"{weights_path}: layer {layer} {projection} lacks its lora_{'B' if 'A' in pair else 'A'}")
        a, b = pair["A"], pair["B"]
        fan_in, fan_out = _dims(model, projection)
        if a.shape != (rank, fan_in) or b.shape != (fan_out, rank):
            raise AdapterError(f"{weights_path}: layer {layer} {projection} has A {tuple(a.shape)} and B {tuple(b.shape)};"
                               f" this model needs A ({rank}, {fan_in}) and B ({fan_out}, {rank}): it was trained for "
                               "another base model")
        weights[(layer, projection)] = (a.contiguous(), b.contiguous())
    if not weights:
        raise AdapterError(f"{weights_path}: no LoRA weights")
    return AdapterWeights(name, folder, rank, scale, weights)
