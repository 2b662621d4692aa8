"""The preallocated KV cache: one pool of fixed-size blocks, shared by every request."""

from __future__ import annotations

import torch
from torch import nn

from lyre.models.config import LlamaConfig

__all__ = ["KVCache"]


class KVCache(nn.Module):
    """Keys and values for ``blocks`` blocks of ``block_size`` positions, plus a trash block.

    Allocated once. A request's positions live in the blocks of its block
    table (`lyre.engine.block_manager`): position p is offset ``p %
    block_size`` of block ``table[p // block_size]``. Block ``trash`` (=
    ``blocks``) belongs to nobody: padding rows and padding positions write
    there, and unused table entries point there, so nothing ever touches a
    live request's blocks by accident.

    The layout is ``(layers, kv_heads, blocks + 1, block_size, head_dim)``:
    one layer's pool is a single ``(kv_heads, positions, head_dim)`` run that
    FlexAttention reads in place, and gathering a row's blocks copies whole
    ``block_size x head_dim`` runs.
    """

    def __init__(self, model: LlamaConfig, blocks: int, block_size: int, dtype: torch.dtype,
                 device: torch.device) -> None:
        super().__init__()
        shape = (model.num_hidden_layers, model.num_key_value_heads, blocks + 1, block_size, model.head_dim)
        self.register_buffer("k", torch.zeros(shape, dtype=dtype, device=device), persistent=False)
        self.register_buffer("v", torch.zeros(shape, dtype=dtype, device=device), persistent=False)
        self.blocks = blocks
        self.trash = blocks
        self.block_size = block_size

    @property
    def nbytes(self) -> int:
        return 2 * self.k.numel() * self.k.element_size()

    def write(self, layer: int, where: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
        """Store k, v of shape (N, kv_heads, head_dim) at flat positions ``where`` (N,) = block * block_size + offset.

        A non-finite entry is stored as 0. Attention masks keys by position, but a masked key still enters
        the sums as score and weight 0, and 0 x NaN is NaN: a block's stale tail, a reused block or the
        trash block would carry one request's NaN (a broken voice's) into another's output."""
        keys, values = self.pool(layer)
        keys[0].index_copy_(1, where, k.nan_to_num(0.0, 0.0, 0.0).transpose(0, 1))
        values[0].index_copy_(1, where, v.nan_to_num(0.0, 0.0, 0.0).transpose(0, 1))

    def gather(self, layer: int, tables: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The blocks of ``tables`` (B, n) in order, copied: keys and values each (B, kv_heads, n * block_size, head_dim)."""
        b, n = tables.shape
        flat = tables.reshape(-1)
        k = self.k[layer].index_select(1, flat)  # (kv_heads, B * n, block_size, head_dim)
        v = self.v[layer].index_select(1, flat)
        shape = (k.shape[0], b, n * self.block_size, k.shape[-1])
        return k.view(shape).transpose(0, 1), v.view(shape).transpose(0, 1)

    def pool(self, layer: int) -> tuple[torch.Tensor, torch.Tensor]:
        """One layer's whole pool, in place: keys and values each (1, kv_heads, (blocks + 1) * block_size, head_dim)."""
        k, v = self.k[layer], self.v[layer]
        shape = (1, k.shape[0], k.shape[1] * k.shape[2], k.shape[3])
        return k.view(shape), v.view(shape)
