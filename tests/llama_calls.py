"""Driving the compact Llama by hand in tests: a prefill into some slots, a decode step over several."""

from __future__ import annotations

import torch

from lyre.engine.attention import DecodeRows, FlexBlocks, PrefillAttention, decode_context
from lyre.engine.kv_cache import KVCache
from lyre.engine.llama import Llama


def cache_for(model: Llama, slots: int, max_seq_len: int) -> KVCache:
    return KVCache(model.config, slots, max_seq_len, model.output_weight.dtype, model.output_weight.device)


def prefill(model: Llama, cache: KVCache, prompts: list[list[int]], slots: list[int]) -> torch.Tensor:
    """Right-padded prompts into ``slots`` -> hidden states (B, T, H)."""
    width = max(map(len, prompts))
    tokens = torch.tensor([p + [0] * (width - len(p)) for p in prompts])
    positions = torch.arange(width).expand(len(prompts), width)
    return model(tokens, positions, PrefillAttention(cache, torch.tensor(slots), positions))


def decode(model: Llama, cache: KVCache, backend: str, tokens: list[int], positions: list[int], slots: list[int],
           blocks: FlexBlocks | None = None) -> torch.Tensor:
    """One token per row at ``positions`` in ``slots`` -> logits (B, V)."""
    slot_t, pos_t = torch.tensor(slots), torch.tensor(positions)
    lengths = torch.zeros(cache.slots + 1, dtype=torch.int32)
    lengths[slot_t] = (pos_t + 1).to(torch.int32)
    context = decode_context(backend, cache, DecodeRows(slot_t, pos_t, lengths), n_slots=max(slots) + 1,
                             key_len=max(positions) + 1, blocks=blocks)
    return model.logits(model(torch.tensor(tokens)[:, None], pos_t[:, None], context)[:, 0])
