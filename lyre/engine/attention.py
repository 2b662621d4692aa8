"""Attention over the block KV cache for one forward: three contexts.

A forward hands every layer one of these contexts; each layer calls it with
its new q, k, v and gets the attention output. Every context first writes
the new keys and values into the cache, at the flat positions the runner
worked out from each row's block table.

- `FreshPrefill`: prompts from position 0 with nothing cached before them.
  A prompt attends only to itself, so attention runs on the fresh k and v.
- `CachedAttention`: rows whose queries start anywhere (a prompt after a
  reused prefix, a prompt's later chunk, a decode step) attend to every key
  of their block table up to their length. Each row's blocks are gathered
  into one run (whole ``block_size x head_dim`` copies), then plain SDPA
  with a mask by position and length: runs anywhere, and is what a
  fixed-shape (CUDA graph) step captures.
- On a CPU, decode steps read the pool in place (`lyre.engine.cpu_decode`):
  masked spans of rows for a few rows, block by block for many.
- `FlexDecode`: a decode step that reads the pool in place and only each
  row's live blocks: FlexAttention with a block mask whose indices are the
  rows' physical blocks, kept in persistent buffers (`FlexBlocks`) so a CUDA
  graph can replay it.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from lyre.engine.kv_cache import KVCache

__all__ = ["CachedAttention", "FLEX_BLOCK", "FlexBlocks", "FlexDecode", "FreshPrefill", "StepRows", "write"]

FLEX_BLOCK = 128  # keys per FlexAttention block: flex attention needs the cache's block_size to be a multiple of it


@dataclass
class StepRows:
    """One forward's rows, as device tensors (rows may include padding).

    ``where``: the flat cache position (block * block_size + offset) of every
    new key, row-major over (B, T); padding goes to the trash block.
    ``tables``: the blocks each row reads, trash-padded. ``starts``: each
    row's first query position. ``lengths``: the keys each row has once this
    forward's are written.
    """

    where: torch.Tensor  # (B * T,) int64
    tables: torch.Tensor  # (B, n) int64
    starts: torch.Tensor  # (B,) int64
    lengths: torch.Tensor  # (B,) int64


def write(cache: KVCache, layer: int, where: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
    b, t, heads, dim = k.shape
    cache.write(layer, where, k.reshape(b * t, heads, dim), v.reshape(b * t, heads, dim))


class FreshPrefill:
    """Prompts right-padded into one batch, from position 0, nothing cached before them."""

    def __init__(self, cache: KVCache, where: torch.Tensor) -> None:
        self.cache, self.where = cache, where

    def __call__(self, layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """q (B, T, nh, hd), k and v (B, T, n_kv, hd) -> (B, nh, T, hd)."""
        write(self.cache, layer, self.where, k, v)
        # Causal over right-padded rows: a real token never sees the padding after it.
        return F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                              is_causal=True, enable_gqa=k.shape[2] != q.shape[2])


class CachedAttention:
    """Rows of T queries from ``starts`` on, each over its own blocks: gathered, then masked SDPA."""

    def __init__(self, cache: KVCache, rows: StepRows, queries: int) -> None:
        self.cache, self.rows = cache, rows
        device = rows.starts.device
        keys = torch.arange(rows.tables.shape[1] * cache.block_size, device=device)  # (L,)
        at = rows.starts[:, None] + torch.arange(queries, device=device)  # (B, T) each query's position
        # A padding row (length 0) sees one stale key instead of none (no NaN); its output is dropped.
        lengths = rows.lengths.clamp(min=1)
        self.mask = ((keys[None, None, :] <= at[:, :, None])
                     & (keys[None, None, :] < lengths[:, None, None]))[:, None]  # (B, 1, T, L)
        # A padding query past its row's length keeps key 0, so it too has one key.
        self.mask[..., 0] = True

    def __call__(self, layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        write(self.cache, layer, self.rows.where, k, v)
        keys, values = self.cache.gather(layer, self.rows.tables)  # (B, n_kv, L, hd): a copy of their blocks
        return F.scaled_dot_product_attention(q.transpose(1, 2), keys, values, attn_mask=self.mask,
                                              enable_gqa=keys.shape[1] != q.shape[2])


class FlexBlocks:
    """A FlexAttention block mask over every slot's block table, kept in persistent buffers.

    Slot s reads the physical blocks ``table[s][:ceil(len_s / block_size)]``:
    the whole ones without a mask, the last one masked by length. `update`
    rewrites the buffers in place, so one `BlockMask` (and a CUDA graph
    holding it) serves every step.
    """

    def __init__(self, slots: int, cache: KVCache) -> None:
        if cache.block_size % FLEX_BLOCK:
            raise ValueError(f"flex attention needs a block size that is a multiple of {FLEX_BLOCK}, "
                             f"got {cache.block_size}")
        from torch.nn.attention.flex_attention import BlockMask

        device, size = cache.k.device, cache.block_size
        blocks = cache.blocks + 1  # the mask's index rows span the whole pool; a slot's first entries are its own
        self.tail = torch.zeros(slots, dtype=torch.int64, device=device)  # keys in each slot's last, partial block
        self.partial = torch.zeros(slots, 1, 1, dtype=torch.int32, device=device)
        self.partial_index = torch.zeros(slots, 1, 1, blocks, dtype=torch.int32, device=device)
        self.full = torch.zeros(slots, 1, 1, dtype=torch.int32, device=device)
        self.full_index = torch.zeros(slots, 1, 1, blocks, dtype=torch.int32, device=device)
        tail = self.tail

        def within_length(b: torch.Tensor, h: torch.Tensor, q: torch.Tensor, kv: torch.Tensor) -> torch.Tensor:
            return kv % size < tail[b]  # only ever asked of a slot's partial block

        self.mask = BlockMask.from_kv_blocks(self.partial, self.partial_index, self.full, self.full_index,
                                             BLOCK_SIZE=(size, size), mask_mod=within_length,
                                             seq_lengths=(1, (cache.blocks + 1) * size), compute_q_blocks=False)

    def update(self, tables: torch.Tensor, slot_lengths: torch.Tensor) -> None:
        """Point the mask at ``tables`` (slots, max_blocks) to ``slot_lengths`` (slots,): on the device, no host wait."""
        size = self.mask.BLOCK_SIZE[1]
        whole = torch.div(slot_lengths, size, rounding_mode="floor")
        self.tail.copy_(slot_lengths % size)
        self.full.view(-1).copy_(whole)
        self.full_index[:, 0, 0, : tables.shape[1]].copy_(tables)
        self.partial.view(-1).copy_((self.tail != 0).to(torch.int32))
        last = whole.clamp(max=tables.shape[1] - 1).long()[:, None]
        self.partial_index[:, 0, 0, :1].copy_(tables.gather(1, last))


_compiled_flex = None


def _flex():  # type: ignore[no-untyped-def]
    """flex_attention compiled once per process (eager flex materialises every score)."""
    global _compiled_flex
    if _compiled_flex is None:
        from torch.nn.attention.flex_attention import flex_attention

        _compiled_flex = torch.compile(flex_attention, dynamic=False)
    return _compiled_flex


class FlexDecode:
    """One query per row, reading the pool in place and only each row's live blocks."""

    def __init__(self, cache: KVCache, where: torch.Tensor, slots: torch.Tensor, blocks: FlexBlocks,
                 tables: torch.Tensor, slot_lengths: torch.Tensor) -> None:
        self.cache, self.where, self.slots, self.blocks = cache, where, slots, blocks
        blocks.update(tables, slot_lengths)

    def __call__(self, layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        write(self.cache, layer, self.where, k, v)
        keys, values = self.cache.pool(layer)  # (1, n_kv, P, hd), in place
        slots = self.blocks.full.shape[0]
        by_slot = q.new_zeros(slots, q.shape[2], 1, q.shape[3])  # (slots, nh, 1, hd)
        by_slot[self.slots] = q.transpose(1, 2)
        out = _flex()(by_slot, keys.expand(slots, -1, -1, -1), values.expand(slots, -1, -1, -1),
                      block_mask=self.blocks.mask, enable_gqa=keys.shape[1] != q.shape[2])
        return out[self.slots]  # (B, nh, 1, hd)
