"""Attention over the KV cache for one forward: a prefill, or a decode step three ways.

A forward hands every layer one of these contexts; each layer calls it with
its new q, k, v and gets the attention output. Every context writes the new
keys and values into the cache first.

- `PrefillAttention`: whole prompts from position 0. A prompt attends only to
  itself, so attention runs on the fresh k and v; the cache is only written.
- `GatherDecode`: copies each row's keys and values out of the cache, then
  attends. Kept to compare against: it moves the whole KV of the batch on
  every layer of every step.
- `SlotDecode`: reads the cache in place. Rows are scattered into slot order
  and attend over a view of the first ``n`` slots, masked by each slot's
  length: no K/V is copied. It reads ``n`` slots up to the longest length,
  so it pays for the longest row on every row (plain SDPA; runs anywhere).
- `FlexDecode`: reads the cache in place and only the blocks that hold live
  keys: FlexAttention with a block mask built from each slot's length, all in
  persistent buffers, so a CUDA graph can replay it (`FlexBlocks`).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from lyre.engine.kv_cache import KVCache

__all__ = ["DecodeRows", "FlexBlocks", "FlexDecode", "GatherDecode", "PrefillAttention",
           "SlotDecode", "decode_context"]

FLEX_BLOCK = 128  # keys per FlexAttention block; max_seq_len must be a multiple of it


class PrefillAttention:
    """Prompts right-padded into one batch, from position 0."""

    def __init__(self, cache: KVCache, slots: torch.Tensor, positions: torch.Tensor) -> None:
        self.cache = cache
        self.slots = slots  # (B,)
        self.positions = positions  # (B, T)

    def __call__(self, layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """q (B, T, nh, hd), k and v (B, T, n_kv, hd) -> (B, nh, T, hd)."""
        self.cache.write(layer, self.slots, self.positions, k, v)
        # Causal over right-padded rows: a real token never sees the padding after it.
        return F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                              is_causal=True, enable_gqa=k.shape[2] != q.shape[2])


@dataclass
class DecodeRows:
    """One decode step's rows, as device tensors (rows may include padding).

    ``slot_lengths`` holds, for every slot, the keys it has once this step's
    key is written, and 0 for slots not in the step. Padding rows use the
    cache's spare slot and position 0.
    """

    slots: torch.Tensor  # (B,) int64
    positions: torch.Tensor  # (B,) int64, the new token's position
    slot_lengths: torch.Tensor  # (slots + 1,) int32


def _write(cache: KVCache, layer: int, rows: DecodeRows, k: torch.Tensor, v: torch.Tensor) -> None:
    cache.write(layer, rows.slots, rows.positions[:, None], k, v)


class GatherDecode:
    """Copies the batch's K/V out of the cache each layer, then attends (the old path, for comparison)."""

    def __init__(self, cache: KVCache, rows: DecodeRows, key_len: int) -> None:
        self.cache, self.rows, self.key_len = cache, rows, key_len
        keys = torch.arange(key_len, device=rows.positions.device)
        self.mask = (keys[None, :] <= rows.positions[:, None])[:, None, None, :]  # (B, 1, 1, L)

    def __call__(self, layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        _write(self.cache, layer, self.rows, k, v)
        keys, values = self.cache.gather(layer, self.rows.slots, self.key_len)  # (B, n_kv, L, hd): a copy
        return F.scaled_dot_product_attention(q.transpose(1, 2), keys, values, attn_mask=self.mask,
                                              enable_gqa=keys.shape[1] != q.shape[2])


class SlotDecode:
    """Attends over the cache in place: rows scattered into slot order, a view of slots [0, n_slots)."""

    def __init__(self, cache: KVCache, rows: DecodeRows, n_slots: int, key_len: int) -> None:
        self.cache, self.rows, self.n_slots, self.key_len = cache, rows, n_slots, key_len
        keys = torch.arange(key_len, device=rows.positions.device)
        # Slots outside the step attend to one stale key instead of none (no NaN); their output is dropped.
        lengths = rows.slot_lengths[:n_slots].clamp(min=1)
        self.mask = (keys[None, :] < lengths[:, None])[:, None, None, :]  # (n_slots, 1, 1, L)

    def __call__(self, layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        _write(self.cache, layer, self.rows, k, v)
        keys, values = self.cache.view(layer, self.n_slots, self.key_len)  # (n_slots, n_kv, L, hd), no copy
        by_slot = q.new_zeros(self.n_slots, q.shape[2], 1, q.shape[3])  # (n_slots, nh, 1, hd)
        by_slot[self.rows.slots] = q.transpose(1, 2)
        out = F.scaled_dot_product_attention(by_slot, keys, values, attn_mask=self.mask,
                                             enable_gqa=keys.shape[1] != q.shape[2])
        return out[self.rows.slots]  # (B, nh, 1, hd)


class FlexBlocks:
    """A FlexAttention block mask over every slot, kept in persistent buffers.

    Slot s reads blocks [0, ceil(len_s / FLEX_BLOCK)): the whole ones without
    a mask, the last one masked by length. `update` rewrites the buffers in
    place from ``slot_lengths``, so one `BlockMask` (and a CUDA graph holding
    it) serves every step.
    """

    def __init__(self, slots: int, max_seq_len: int, device: torch.device) -> None:
        if max_seq_len % FLEX_BLOCK:
            raise ValueError(f"flex attention needs max_seq_len to be a multiple of {FLEX_BLOCK}, got {max_seq_len}")
        from torch.nn.attention.flex_attention import BlockMask

        blocks = max_seq_len // FLEX_BLOCK
        self.lengths = torch.zeros(slots, dtype=torch.int32, device=device)
        self.partial = torch.zeros(slots, 1, 1, dtype=torch.int32, device=device)
        self.partial_index = torch.zeros(slots, 1, 1, blocks, dtype=torch.int32, device=device)
        self.full = torch.zeros(slots, 1, 1, dtype=torch.int32, device=device)
        self.full_index = torch.arange(blocks, dtype=torch.int32, device=device).expand(slots, 1, 1, blocks).contiguous()
        lengths = self.lengths

        def within_length(b: torch.Tensor, h: torch.Tensor, q: torch.Tensor, kv: torch.Tensor) -> torch.Tensor:
            return kv < lengths[b]

        self.mask = BlockMask.from_kv_blocks(self.partial, self.partial_index, self.full, self.full_index,
                                             BLOCK_SIZE=(FLEX_BLOCK, FLEX_BLOCK), mask_mod=within_length,
                                             seq_lengths=(1, max_seq_len), compute_q_blocks=False)

    def update(self, slot_lengths: torch.Tensor) -> None:
        """Point the mask at ``slot_lengths`` (slots + 1,): all on the device, no host wait."""
        self.lengths.copy_(slot_lengths)
        whole = torch.div(slot_lengths, FLEX_BLOCK, rounding_mode="floor")
        self.full.view(-1).copy_(whole)
        self.partial.view(-1).copy_((slot_lengths % FLEX_BLOCK != 0).to(torch.int32))
        self.partial_index[:, 0, 0, 0] = whole.clamp(max=self.partial_index.shape[-1] - 1)


_compiled_flex = None


def _flex():  # type: ignore[no-untyped-def]
    """flex_attention compiled once per process (eager flex materialises every score)."""
    global _compiled_flex
    if _compiled_flex is None:
        from torch.nn.attention.flex_attention import flex_attention

        _compiled_flex = torch.compile(flex_attention, dynamic=False)
    return _compiled_flex


class FlexDecode:
    """Attends over the cache in place, reading only each slot's live blocks."""

    def __init__(self, cache: KVCache, rows: DecodeRows, blocks: FlexBlocks) -> None:
        self.cache, self.rows, self.blocks = cache, rows, blocks
        blocks.update(rows.slot_lengths)

    def __call__(self, layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        _write(self.cache, layer, self.rows, k, v)
        keys, values = self.cache.k[layer], self.cache.v[layer]  # (slots + 1, n_kv, L, hd), in place
        by_slot = q.new_zeros(keys.shape[0], q.shape[2], 1, q.shape[3])  # (slots + 1, nh, 1, hd)
        by_slot[self.rows.slots] = q.transpose(1, 2)
        out = _flex()(by_slot, keys, values, block_mask=self.blocks.mask, enable_gqa=keys.shape[1] != q.shape[2])
        return out[self.rows.slots]  # (B, nh, 1, hd)


def decode_context(backend: str, cache: KVCache, rows: DecodeRows, n_slots: int, key_len: int,
                   blocks: FlexBlocks | None) -> GatherDecode | SlotDecode | FlexDecode:
    """The decode context of ``backend``. ``n_slots`` and ``key_len`` bound what the SDPA paths read
    (host figures, known without asking the device); flex reads by the block mask alone."""
    if backend == "gather":
        return GatherDecode(cache, rows, key_len)
    if backend == "sdpa":
        return SlotDecode(cache, rows, n_slots, key_len)
    if blocks is None:
        raise ValueError("flex decoding needs its FlexBlocks")
    return FlexDecode(cache, rows, blocks)
