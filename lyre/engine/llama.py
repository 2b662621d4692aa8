"""A compact Llama (RMSNorm, grouped-query attention, llama3 RoPE, SwiGLU).

Reads Hugging Face tensor names, so a checkpoint loads without renaming, and
computes attention over the engine's preallocated KV cache.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from lyre.engine.config import LlamaConfig
from lyre.engine.kv_cache import KVCache

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

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, ctx: _Context) -> torch.Tensor:
        b, t, _ = x.shape
        q = self.q_proj(x).view(b, t, self.n_heads, self.head_dim)
        k = self.k_proj(x).view(b, t, self.n_kv, self.head_dim)
        v = self.v_proj(x).view(b, t, self.n_kv, self.head_dim)
        q = q * cos + _rotate_half(q) * sin  # (B, T, nh, hd)
        k = k * cos + _rotate_half(k) * sin
        ctx.cache.write(self.layer, ctx.slots, ctx.positions, k, v)
        keys, values = ctx.cache.read(self.layer, ctx.slots, ctx.length)  # (B, n_kv, L, hd)
        out = F.scaled_dot_product_attention(
            q.transpose(1, 2), keys, values, attn_mask=ctx.mask, enable_gqa=self.n_kv != self.n_heads
        )  # (B, nh, T, hd)
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

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, ctx: _Context) -> torch.Tensor:
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, ctx)
        return x + self.mlp(self.post_attention_layernorm(x))


class _Context:
    """What every layer needs to reach the cache for one forward."""

    def __init__(self, cache: KVCache, slots: torch.Tensor, positions: torch.Tensor) -> None:
        self.cache = cache
        self.slots = slots  # (B,)
        self.positions = positions  # (B, T)
        self.length = int(positions.max()) + 1
        keys = torch.arange(self.length, device=positions.device)
        # A query at position p sees keys 0..p of its own slot: causal within a
        # prefill, and blind to stale entries a previous owner left in the slot.
        self.mask = (keys[None, None, :] <= positions[:, :, None])[:, None]  # (B, 1, T, L)


class LlamaModel(nn.Module):
    def __init__(self, cfg: LlamaConfig) -> None:
        super().__init__()
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
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

    def forward(self, tokens: torch.Tensor, positions: torch.Tensor, slots: torch.Tensor, cache: KVCache) -> torch.Tensor:
        """tokens, positions (B, T); slots (B,) -> normed hidden states (B, T, hidden)."""
        x = self.model.embed_tokens(tokens)
        cos = self.rope_cos[positions].to(x.dtype)[:, :, None, :]  # (B, T, 1, hd)
        sin = self.rope_sin[positions].to(x.dtype)[:, :, None, :]
        ctx = _Context(cache, slots, positions)
        for layer in self.model.layers:
            x = layer(x, cos, sin, ctx)
        return self.model.norm(x)

    def logits(self, hidden: torch.Tensor, start: int = 0, stop: int | None = None) -> torch.Tensor:
        """hidden (N, hidden) -> logits (N, stop - start) for vocabulary rows [start, stop)."""
        weight = self.output_weight[start:stop]
        return (hidden @ weight.T).float()
