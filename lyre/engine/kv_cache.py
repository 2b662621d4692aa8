"""The preallocated KV cache: one slot per resident request, plus a spare."""

from __future__ import annotations

import torch
from torch import nn

from lyre.engine.config import LlamaConfig

__all__ = ["KVCache"]


class KVCache(nn.Module):
    """Keys and values for ``slots`` requests of up to ``max_seq_len`` positions.

    Allocated once; requests write by (slot, position) index, so nothing is
    allocated per step and a freed slot is reused as is (stale entries past a
    request's length are never attended: attention masks by length). Slot
    ``spare`` (= ``slots``) belongs to nobody: rows that pad a fixed-shape
    decode batch write there, so they can never touch a live request.

    The layout is slot-major, ``(layers, slots + 1, kv_heads, positions,
    head_dim)``, so ``k[layer][:n]`` is a view of the first ``n`` slots that
    attention reads in place.
    """

    def __init__(self, model: LlamaConfig, slots: int, max_seq_len: int, dtype: torch.dtype, device: torch.device) -> None:
        super().__init__()
        shape = (model.num_hidden_layers, slots + 1, model.num_key_value_heads, max_seq_len, model.head_dim)
        self.register_buffer("k", torch.zeros(shape, dtype=dtype, device=device), persistent=False)
        self.register_buffer("v", torch.zeros(shape, dtype=dtype, device=device), persistent=False)
        self.slots = slots
        self.spare = slots
        self.max_seq_len = max_seq_len

    def write(self, layer: int, slots: torch.Tensor, positions: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
        """Store k, v of shape (B, T, kv_heads, head_dim) at ``slots`` (B,) and ``positions`` (B, T)."""
        index = (slots[:, None], slice(None), positions)  # advanced dims first: (B, T, kv_heads, head_dim)
        self.k[layer][index] = k
        self.v[layer][index] = v

    def gather(self, layer: int, slots: torch.Tensor, length: int) -> tuple[torch.Tensor, torch.Tensor]:
        """A copy of ``slots``' keys and values for positions [0, length): each (B, kv_heads, length, head_dim).

        Only the gather attention path (kept for comparison) uses it: it
        copies every row's K/V on every step."""
        return self.k[layer, slots, :, :length], self.v[layer, slots, :, :length]

    def view(self, layer: int, slots: int, length: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Slots [0, slots) and positions [0, length) of one layer, in place: each (slots, kv_heads, length, head_dim)."""
        return self.k[layer, :slots, :, :length], self.v[layer, :slots, :, :length]
