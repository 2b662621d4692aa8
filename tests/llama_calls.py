"""Driving the compact Llama by hand in tests: a prefill into some slots, a decode step over several.

Slot s owns the blocks [s * per_slot, (s + 1) * per_slot) of a cache sized for ``slots`` of ``max_seq_len``,
so its positions are in order but its blocks are not block 0's: the tables must be read."""

from __future__ import annotations

import torch

from lyre.engine.attention import CachedAttention, FlexBlocks, FlexDecode, FreshPrefill, StepRows
from lyre.engine.cpu_decode import BlockDecode, BlockOwners, RunDecode, SpanDecode
from lyre.engine.kv_cache import KVCache
from lyre.models.llama import Llama


def cache_for(model: Llama, slots: int, max_seq_len: int, block_size: int = 16) -> KVCache:
    blocks = slots * -(-max_seq_len // block_size)
    return KVCache(model.config, blocks, block_size, model.output_weight.dtype, model.output_weight.device)


def tables(cache: KVCache, slots: int) -> torch.Tensor:
    """(slots + 1, per_slot) block tables: slot s's blocks run backwards from the end of its share, so a row's
    keys are never where its position alone would put them; the last row (the spare) is all trash."""
    per = cache.blocks // slots
    rows = [list(range((s + 1) * per - 1, s * per - 1, -1)) for s in range(slots)]
    return torch.tensor(rows + [[cache.trash] * per])


def where(cache: KVCache, table: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """Flat cache positions of ``positions`` (B, T) in rows of ``table`` (B, n)."""
    size = cache.block_size
    return (table.gather(1, positions // size) * size + positions % size).view(-1)


def prefill(model: Llama, cache: KVCache, prompts: list[list[int]], slots: list[int], n_slots: int = 4) -> torch.Tensor:
    """Right-padded prompts into ``slots`` -> hidden states (B, T, H)."""
    width = max(map(len, prompts))
    tokens = torch.tensor([p + [0] * (width - len(p)) for p in prompts])
    positions = torch.arange(width).expand(len(prompts), width)
    table = tables(cache, n_slots)[torch.tensor(slots)]
    return model(tokens, positions, FreshPrefill(cache, where(cache, table, positions)))


def decode(model: Llama, cache: KVCache, backend: str, tokens: list[int], positions: list[int], slots: list[int],
           blocks: FlexBlocks | None = None, n_slots: int = 4, table: torch.Tensor | None = None) -> torch.Tensor:
    """One token per row at ``positions`` in ``slots`` (or in the rows of ``table``) -> logits (B, V).
    ``backend``: sdpa (`CachedAttention`), blocks (`BlockDecode`), runs (`RunDecode`), spans
    (`SpanDecode`) or flex."""
    slot_t, pos_t = torch.tensor(slots), torch.tensor(positions)
    all_tables = tables(cache, n_slots)
    table = all_tables[slot_t] if table is None else table
    at = where(cache, table, pos_t[:, None])
    if backend == "blocks":
        owners = BlockOwners.of(table, pos_t + 1, cache.block_size)
        return model.logits(model(torch.tensor(tokens)[:, None], pos_t[:, None], BlockDecode(cache, at, owners))[:, 0])
    if backend in ("runs", "spans"):
        way = RunDecode if backend == "runs" else SpanDecode
        in_place = way(cache, at, table.tolist(), (pos_t + 1).tolist())
        return model.logits(model(torch.tensor(tokens)[:, None], pos_t[:, None], in_place)[:, 0])
    if backend == "flex":
        assert blocks is not None
        lengths = torch.zeros(n_slots + 1, dtype=torch.int32)
        lengths[slot_t] = (pos_t + 1).to(torch.int32)
        context: CachedAttention | FlexDecode = FlexDecode(cache, at, slot_t, blocks, all_tables, lengths)
    else:
        context = CachedAttention(cache, StepRows(at, table, pos_t, pos_t + 1), 1)
    return model.logits(model(torch.tensor(tokens)[:, None], pos_t[:, None], context)[:, 0])
