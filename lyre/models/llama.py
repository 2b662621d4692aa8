"""A compact Llama (RMSNorm, grouped-query attention, llama3 RoPE, SwiGLU).

Reads Hugging Face tensor names, so a checkpoint loads without renaming.
Attention goes through the context a forward is given (`lyre.engine.attention`),
which owns the KV cache: the model itself holds no per-request state.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from lyre.models.config import LlamaConfig

# attend(layer, q (B, T, nh, hd), k (B, T, n_kv, hd), v) -> (B, nh, T, hd): writes the cache, then attends.
Attend = Callable[[int, torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]

__all__ = ["Llama", "rope_frequencies"]


def rope_frequencies(cfg: LlamaConfig) -> torch.Tensor:
    """Inverse RoPE frequencies (head_dim/2,), with llama3 scaling when configured.

    Llama 3 keeps high frequencies, divides low ones by ``factor`` and blends
    smoothly in between, which is what lets the model reach long contexts.
    """
    dim = cfg.head_dim
    inv_freq = 1.0 / (cfg.rope_theta ** (torch.arange(0, dim, 2, dtype=torch.int64).float() / dim))
    s = cfg.rope_scaling
    if s is None:
        return inv_freq
    low_freq_wavelen = s.original_max_position_embeddings / s.low_freq_factor
    high_freq_wavelen = s.original_max_position_embeddings / s.high_freq_factor
    wavelen = 2 * math.pi / inv_freq
    scaled = torch.where(wavelen > low_freq_wavelen, inv_freq / s.factor, inv_freq)
    smooth = (s.original_max_position_embeddings / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor)
    blended = (1 - smooth) * scaled / s.factor + smooth * scaled
    medium = (wavelen >= high_freq_wavelen) & (wavelen <= low_freq_wavelen)
    return torch.where(medium, blended, scaled)


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        dtype = x.dtype
        x = x.float()
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x.to(dtype)


class Attention(nn.Module):
    def __init__(self, cfg: LlamaConfig, layer: int) -> None:
        super().__init__()
        self.layer = layer
        self.n_heads = cfg.num_attention_heads
        self.n_kv = cfg.num_key_value_heads
        self.head_dim = cfg.head_dim
        self.q_proj = nn.Linear(cfg.hidden_size, self.n_heads * self.head_dim, bias=False)
        self.k_proj = nn.Linear(cfg.hidden_size, self.n_kv * self.head_dim, bias=False)
        self.v_proj = nn.Linear(cfg.hidden_size, self.n_kv * self.head_dim, bias=False)
        self.o_proj = nn.Linear(self.n_heads * self.head_dim, cfg.hidden_size, bias=False)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, attend: Attend) -> torch.Tensor:
        b, t, _ = x.shape
        q = self.q_proj(x).view(b, t, self.n_heads, self.head_dim)
        k = self.k_proj(x).view(b, t, self.n_kv, self.head_dim)
        v = self.v_proj(x).view(b, t, self.n_kv, self.head_dim)
        q = q * cos + _rotate_half(q) * sin  # (B, T, nh, hd)
        k = k * cos + _rotate_half(k) * sin
        out = attend(self.layer, q, k, v)  # (B, nh, T, hd)
        return self.o_proj(out.transpose(1, 2).reshape(b, t, self.n_heads * self.head_dim))


class MLP(nn.Module):
    def __init__(self, cfg: LlamaConfig) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(cfg.hidden_size, cfg.intermediate_size, bias=False)
        self.up_proj = nn.Linear(cfg.hidden_size, cfg.intermediate_size, bias=False)
        self.down_proj = nn.Linear(cfg.intermediate_size, cfg.hidden_size, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class DecoderLayer(nn.Module):
    def __init__(self, cfg: LlamaConfig, layer: int) -> None:
        super().__init__()
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.self_attn = Attention(cfg, layer)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.mlp = MLP(cfg)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, attend: Attend) -> torch.Tensor:
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, attend)
        return x + self.mlp(self.post_attention_layernorm(x))


def _on_meta() -> bool:
    """Whether modules are being built on the meta device (under ``with torch.device("meta")``)."""
    return torch.empty(0).is_meta


class LlamaModel(nn.Module):
    def __init__(self, cfg: LlamaConfig) -> None:
        super().__init__()
        # Built on the meta device (the loaders), the embedding skips its random init: a meta tensor's
        # normal_ runs torch's Python reference ops, whose first use imports torch._dynamo, about 3 s of
        # every start-up on a small CPU. The loader assigns every weight anyway.
        weight = torch.empty(cfg.vocab_size, cfg.hidden_size) if _on_meta() else None
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.hidden_size, _weight=weight)
        self.layers = nn.ModuleList(DecoderLayer(cfg, i) for i in range(cfg.num_hidden_layers))
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)


class Llama(nn.Module):
    """Llama for causal LM. ``forward`` returns final hidden states; ``logits``
    projects them onto all or part of the vocabulary."""

    def __init__(self, cfg: LlamaConfig, max_seq_len: int) -> None:
        super().__init__()
        self.config = cfg
        self.model = LlamaModel(cfg)
        self.lm_head = None if cfg.tie_word_embeddings else nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False)
        self.max_seq_len = max_seq_len
        self.register_buffer("rope_cos", torch.empty(0), persistent=False)
        self.register_buffer("rope_sin", torch.empty(0), persistent=False)
        if not _on_meta():  # on the meta device the loader builds the tables where the weights land
            self.build_rope()

    def build_rope(self, device: torch.device | str | None = None) -> None:
        """(Re)compute the RoPE tables, e.g. after building the model on the meta device."""
        device = device if device is not None else self.rope_cos.device
        positions = torch.arange(self.max_seq_len, dtype=torch.float32, device=device)
        freqs = torch.outer(positions, rope_frequencies(self.config).to(device))
        angles = torch.cat((freqs, freqs), dim=-1)  # (max_seq_len, head_dim)
        self.rope_cos = angles.cos()
        self.rope_sin = angles.sin()

    @property
    def output_weight(self) -> torch.Tensor:
        """(vocab, hidden): the tied embedding or the separate head."""
        return self.model.embed_tokens.weight if self.lm_head is None else self.lm_head.weight

    def forward(self, tokens: torch.Tensor, positions: torch.Tensor, attend: Attend) -> torch.Tensor:
        """tokens, positions (B, T) -> normed hidden states (B, T, hidden); ``attend`` reaches the cache."""
        x = self.model.embed_tokens(tokens)
        cos = self.rope_cos[positions].to(x.dtype)[:, :, None, :]  # (B, T, 1, hd)
        sin = self.rope_sin[positions].to(x.dtype)[:, :, None, :]
        for layer in self.model.layers:
            x = layer(x, cos, sin, attend)
        return self.model.norm(x)

    def logits(self, hidden: torch.Tensor, start: int = 0, stop: int | None = None) -> torch.Tensor:
        """hidden (N, hidden) -> logits (N, stop - start) for vocabulary rows [start, stop)."""
        weight = self.output_weight[start:stop]
        return (hidden @ weight.T).float()
