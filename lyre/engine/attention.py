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
- `BlockDecode`: a decode step that reads the pool in place, block by block
  (flash-decoding's split softmax): each block's scores against its row's
  query, its own max, sum and weighted values, then one combine per row.
  No key is copied; the eager decode path on a CPU, where a copy of every
  row's keys costs more than the attention itself.
- `RunDecode`: a decode step over few rows that reads each row whose blocks
  are one run of the pool in place, as a view (the block manager keeps
  tables in runs where it can), and copies only a scattered row's blocks;
  one SDPA per row. Cheaper than `BlockDecode`'s split softmax for a few
  rows, dearer for many.
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

__all__ = ["BlockDecode", "BlockOwners", "CachedAttention", "FLEX_BLOCK", "FlexBlocks", "FlexDecode", "FreshPrefill",
           "RunDecode", "StepRows"]

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


def _write(cache: KVCache, layer: int, where: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
    b, t, heads, dim = k.shape
    cache.write(layer, where, k.reshape(b * t, heads, dim), v.reshape(b * t, heads, dim))


class FreshPrefill:
    """Prompts right-padded into one batch, from position 0, nothing cached before them."""

    def __init__(self, cache: KVCache, where: torch.Tensor) -> None:
        self.cache, self.where = cache, where

    def __call__(self, layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """q (B, T, nh, hd), k and v (B, T, n_kv, hd) -> (B, nh, T, hd)."""
        _write(self.cache, layer, self.where, k, v)
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
        _write(self.cache, layer, self.rows.where, k, v)
        keys, values = self.cache.gather(layer, self.rows.tables)  # (B, n_kv, L, hd): a copy of their blocks
        return F.scaled_dot_product_attention(q.transpose(1, 2), keys, values, attn_mask=self.mask,
                                              enable_gqa=keys.shape[1] != q.shape[2])


@dataclass
class BlockOwners:
    """Which row reads each block of a decode step, for `BlockDecode`.

    Blocks ``[lo, hi)`` of the pool are read in place: ``owner[i]`` is the
    row that reads block ``lo + i`` (``rows``, one past the last row, for a
    block no row reads) and ``count[i]`` how many of its positions it reads.
    A block that several rows read (a shared prefix) has one owner there;
    each other reader is a pair in ``extra`` (row, block, count), whose block
    is copied for it.
    """

    lo: int
    hi: int
    owner: torch.Tensor  # (hi - lo,) int64
    count: torch.Tensor  # (hi - lo,) int64
    extra: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None  # rows (E,), blocks (E,), counts (E,)

    @classmethod
    def of(cls, tables: torch.Tensor, lengths: torch.Tensor, block_size: int) -> BlockOwners:
        """From the step's ``tables`` (B, n) and ``lengths`` (B,) (keys each row reads), on the host."""
        rows = tables.shape[0]
        counts = (lengths[:, None] - torch.arange(tables.shape[1]) * block_size).clamp(0, block_size)  # (B, n)
        read = counts > 0
        blocks, counts = tables[read], counts[read]  # (P,) every (row, block) pair
        readers = torch.arange(rows)[:, None].expand_as(tables)[read]
        lo, hi = int(blocks.min()), int(blocks.max()) + 1
        owner = torch.full((hi - lo,), rows, dtype=torch.long)
        owner[blocks - lo] = readers  # one reader wins where several read a block
        count = torch.zeros(hi - lo, dtype=torch.long)
        count[blocks - lo] = counts
        others = owner[blocks - lo] != readers
        extra = (readers[others], blocks[others], counts[others]) if bool(others.any()) else None
        return cls(lo, hi, owner, count, extra)


def _partial(q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, count: torch.Tensor,
             ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """One block's share of a query's attention: q (kv, N, g, hd) against keys and values (kv, N, bs, hd), the
    first ``count`` (N,) positions of each -> its max score, its sum of weights (kv, N, g), and its weighted
    values (kv, N, g, hd), all relative to that max."""
    # One batched matmul per kv head: a head's (N, bs, hd) run of the pool is one strided block, where
    # (kv, N) together is not, and matmul would copy the whole pool to fold them.
    scores = torch.stack([torch.bmm(q[h], keys[h].transpose(1, 2)) for h in range(q.shape[0])])  # (kv, N, g, bs)
    scores *= q.shape[-1] ** -0.5
    unread = torch.arange(keys.shape[2]) >= count[:, None]  # (N, bs)
    scores.masked_fill_(unread[None, :, None, :], float("-inf"))
    top = scores.amax(-1, keepdim=True).clamp_min(-1e30)  # a block nobody reads: weights 0, not NaN
    weights = (scores - top).exp_()
    weighted = torch.stack([torch.bmm(weights[h], values[h]) for h in range(q.shape[0])])  # (kv, N, g, hd)
    return top[..., 0], weights.sum(-1), weighted


class BlockDecode:
    """One query per row, attending over the pool in place, a block at a time, combined per row."""

    def __init__(self, cache: KVCache, where: torch.Tensor, owners: BlockOwners) -> None:
        self.cache, self.where, self.owners = cache, where, owners

    def __call__(self, layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """q (B, 1, nh, hd), k and v (B, 1, n_kv, hd) -> (B, nh, 1, hd)."""
        _write(self.cache, layer, self.where, k, v)
        o, kv_heads = self.owners, k.shape[2]
        rows, heads, dim = q.shape[0], q.shape[2], q.shape[3]
        grouped = q.reshape(rows, kv_heads, heads // kv_heads, dim)  # query head h reads kv head h // g
        keys, values = self.cache.k[layer], self.cache.v[layer]  # (kv, blocks + 1, bs, hd)
        readers = o.owner.clamp(max=rows - 1)  # a block nobody reads gets any query: its count is 0
        parts = [_partial(grouped[readers].transpose(0, 1), keys[:, o.lo:o.hi], values[:, o.lo:o.hi], o.count)]
        index = [o.owner]
        if o.extra is not None:  # other readers of shared blocks: those blocks copied, one per reader
            extra_rows, blocks, counts = o.extra
            parts.append(_partial(grouped[extra_rows].transpose(0, 1), keys[:, blocks], values[:, blocks], counts))
            index.append(extra_rows)
        top, total, weighted = (torch.cat(x, dim=1) for x in zip(*parts))  # (kv, N, g), (kv, N, g), (kv, N, g, hd)
        who = torch.cat(index)  # (N,) the row of each part; ``rows`` for nobody's
        best = top.new_full((kv_heads, rows + 1, top.shape[2]), float("-inf"))
        best.scatter_reduce_(1, who[None, :, None].expand_as(top), top, "amax")  # (kv, B + 1, g) each row's max
        scale = (top - best[:, who]).exp()  # (kv, N, g)
        norm = total.new_zeros(best.shape).index_add_(1, who, total * scale)
        out = weighted.new_zeros(*best.shape, dim).index_add_(1, who, weighted * scale[..., None])
        out = out[:, :rows] / norm[:, :rows, :, None]  # (kv, B, g, hd)
        return out.transpose(0, 1).reshape(rows, heads, 1, dim)


class RunDecode:
    """One query per row, each over its own keys: a view of the pool where the row's blocks are one run, a copy
    of them where they are not."""

    def __init__(self, cache: KVCache, where: torch.Tensor, tables: list[list[int]], lengths: list[int]) -> None:
        """``tables``: each row's blocks, ``lengths``: the keys each row reads (host figures)."""
        self.cache, self.where, self.lengths = cache, where, lengths
        size = cache.block_size
        # Per row: its first flat position where its blocks are one run, else its blocks (to copy).
        self.reads: list[int | torch.Tensor] = []
        for blocks, length in zip(tables, lengths):
            n = -(-length // size)
            first = blocks[0]
            if blocks[n - 1] - first == n - 1 and all(b == first + i for i, b in enumerate(blocks[:n])):
                self.reads.append(first * size)
            else:
                self.reads.append(torch.tensor(blocks[:n]))
        self.gathered = sum(1 for r in self.reads if isinstance(r, torch.Tensor))  # rows copied per layer

    def __call__(self, layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """q (B, 1, nh, hd), k and v (B, 1, n_kv, hd) -> (B, nh, 1, hd)."""
        _write(self.cache, layer, self.where, k, v)
        keys, values = self.cache.k[layer], self.cache.v[layer]  # (kv, blocks + 1, bs, hd)
        flat = (keys.shape[0], -1, keys.shape[-1])
        out = []
        for row, (read, length) in enumerate(zip(self.reads, self.lengths)):
            if isinstance(read, torch.Tensor):  # scattered: its blocks copied into one run
                row_k, row_v = keys.index_select(1, read).view(flat), values.index_select(1, read).view(flat)
                row_k, row_v = row_k[:, :length], row_v[:, :length]
            else:  # one run: a view of the pool
                row_k, row_v = keys.view(flat)[:, read : read + length], values.view(flat)[:, read : read + length]
            out.append(F.scaled_dot_product_attention(q[row : row + 1].transpose(1, 2), row_k[None], row_v[None],
                                                      enable_gqa=k.shape[2] != q.shape[2]))
        return torch.cat(out)  # (B, nh, 1, hd)


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
        _write(self.cache, layer, self.where, k, v)
        keys, values = self.cache.pool(layer)  # (1, n_kv, P, hd), in place
        slots = self.blocks.full.shape[0]
        by_slot = q.new_zeros(slots, q.shape[2], 1, q.shape[3])  # (slots, nh, 1, hd)
        by_slot[self.slots] = q.transpose(1, 2)
        out = _flex()(by_slot, keys.expand(slots, -1, -1, -1), values.expand(slots, -1, -1, -1),
                      block_mask=self.blocks.mask, enable_gqa=keys.shape[1] != q.shape[2])
        return out[self.slots]  # (B, nh, 1, hd)
