"""Decode attention on a CPU that reads the KV cache's pool where it lies (lyre.engine.attention has the rest).

- `RunDecode`: a step of a few rows, one SDPA per row over a view of its
  blocks where they are one run of the pool (the block manager keeps tables
  in runs where it can); only a row whose blocks are scattered is copied.
- `BlockDecode`: a step of many rows, block by block (flash-decoding's split
  softmax): one fused attention call per span of the pool the rows' blocks
  lie in, each block against its row's query, giving each block's output and
  log-sum of weights; then each row's blocks side by side, weighted by a
  softmax of those sums. No key is copied but a shared block's for its second reader.
- `SpanDecode`: a step of a few rows, one masked SDPA per group of rows over
  the span of the pool their blocks lie in, in place: each row's query scores
  every key of the span and the mask keeps its own. Only a row whose blocks
  spread wider than a group may score is copied.

Measured on 2 cores in the engine's thread (`benchmarks/step_figures.py`):
each call's fixed cost dominates a step of a few short rows, so one masked
call for 8 rows beats 8 calls over views (12.5 against 14.3-15.8 ms a step at
batch 8); at 32 rows the span's extra scores outweigh it, and block by block
(a fixed number of operations per span, whatever the rows) costs least.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from lyre.engine.attention import write
from lyre.engine.kv_cache import KVCache

__all__ = ["BlockDecode", "BlockOwners", "RunDecode", "SPAN_GAP", "SPAN_KEYS", "SpanDecode", "SpanGroup"]

SPAN_GAP = 16  # unread blocks between two runs that `BlockDecode` reads through rather than splitting its span


@dataclass
class BlockOwners:
    """Which row reads each block of a decode step, for `BlockDecode`.

    The blocks read lie in ``spans`` of the pool, each ``(lo, hi)`` read in place as one view: the rows' blocks in
    order, a gap of a few unread blocks between two runs bridged rather than split (a span costs a few operations
    a layer, an unread block only its share of one). Over the spans end to end, ``owner[i]`` is the row that reads
    the i-th block (``rows`` for a block nobody reads) and ``count[i]`` how many of its positions it reads. A block
    several rows read (a shared prefix) has one owner there; each other reader is a pair in ``extra`` (row, block,
    count), whose block is copied for it.
    """

    spans: list[tuple[int, int]]
    owner: torch.Tensor  # (sum of the spans' blocks,) int64
    count: torch.Tensor  # (sum of the spans' blocks,) int64
    extra: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None  # rows (E,), blocks (E,), counts (E,)

    @classmethod
    def of(cls, tables: torch.Tensor, lengths: torch.Tensor, block_size: int) -> BlockOwners:
        """From the step's ``tables`` (B, n) and ``lengths`` (B,) (keys each row reads), on the host."""
        rows = tables.shape[0]
        counts = (lengths[:, None] - torch.arange(tables.shape[1]) * block_size).clamp(0, block_size)  # (B, n)
        read = counts > 0
        blocks, counts = tables[read], counts[read]  # (P,) every (row, block) pair
        readers = torch.arange(rows)[:, None].expand_as(tables)[read]
        distinct = torch.unique(blocks)  # sorted
        cut = (distinct[1:] - distinct[:-1] > SPAN_GAP + 1).nonzero()[:, 0] + 1
        firsts = torch.cat([distinct[:1], distinct[cut]])
        lasts = torch.cat([distinct[cut - 1], distinct[-1:]]) + 1
        sizes = lasts - firsts
        offsets = torch.cumsum(sizes, 0) - sizes  # where each span starts, end to end
        span = torch.searchsorted(firsts, blocks, right=True) - 1
        at = blocks - firsts[span] + offsets[span]  # (P,) each pair's place, end to end
        owner = torch.full((int(sizes.sum()),), rows, dtype=torch.long)
        owner[at] = readers  # one reader wins where several read a block
        count = torch.zeros(owner.shape[0], dtype=torch.long)
        count[at] = counts
        others = owner[at] != readers
        extra = (readers[others], blocks[others], counts[others]) if bool(others.any()) else None
        return cls(list(zip(firsts.tolist(), lasts.tolist())), owner, count, extra)


def _unread_mask(count: torch.Tensor, size: int, dtype: torch.dtype) -> torch.Tensor:
    """(N, 1, 1, size) additive: -inf past each block's first ``count`` positions; a block nobody reads keeps
    one key (its part is dropped, and a row of no keys would be NaN)."""
    unread = torch.arange(size) >= count.clamp(min=1)[:, None]
    return torch.zeros(unread.shape, dtype=dtype).masked_fill_(unread, float("-inf"))[:, None, None]


def _partial(q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, mask: torch.Tensor,
             ) -> tuple[torch.Tensor, torch.Tensor]:
    """Each block's share of its reader's attention: q (N, kv, g, hd) against keys and values (kv, N, bs, hd)
    under ``mask`` (`_unread_mask`) -> the attention over that block alone (N, kv, g, hd) and the log of its
    sum of weights (N, kv, g), from one fused call whose batch is the blocks and whose queries are a kv head's
    g query heads. The views go in as they lie: the kernel reads by stride."""
    out, lse = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(
        q, keys.transpose(0, 1), values.transpose(0, 1), attn_mask=mask)[:2]
    return out, lse


class BlockDecode:
    """One query per row, attending over the pool in place, a block at a time, combined per row. What the layers
    share is worked out once a step: in the engine's thread every tensor operation has a fixed cost."""

    def __init__(self, cache: KVCache, where: torch.Tensor, owners: BlockOwners) -> None:
        self.cache, self.where, self.owners = cache, where, owners
        self._plan: _BlockPlan | None = None

    def _planned(self, rows: int, dtype: torch.dtype) -> _BlockPlan:
        """The step's plan, on its first layer; parts in the calls' order (spans end to end, then the extra)."""
        if self._plan is None:
            o, size = self.owners, self.cache.block_size
            masks, at = [], 0
            for lo, hi in o.spans:
                masks.append(_unread_mask(o.count[at : at + hi - lo], size, dtype))
                at += hi - lo
            who = o.owner
            if o.extra is not None:
                masks.append(_unread_mask(o.extra[2], size, dtype))
                who = torch.cat([who, o.extra[0]])
            order = torch.argsort(who, stable=True)
            mine = torch.bincount(who, minlength=rows + 1)[:rows]
            read = order[: int(mine.sum())]  # the parts some row reads, row by row
            owner = who[read]
            column = torch.arange(read.shape[0]) - (torch.cumsum(mine, 0) - mine)[owner]
            grid = torch.zeros(rows, int(mine.max()), dtype=torch.long)
            grid[owner, column] = read
            bias = None
            if bool((mine < grid.shape[1]).any()):
                bias = torch.full(grid.shape, float("-inf"))
                bias[owner, column] = 0.0
                bias = bias[:, :, None, None]
            self._plan = _BlockPlan(who.clamp(max=rows - 1), masks, grid, bias)
        return self._plan

    def __call__(self, layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """q (B, 1, nh, hd), k and v (B, 1, n_kv, hd) -> (B, nh, 1, hd)."""
        write(self.cache, layer, self.where, k, v)
        o, kv_heads = self.owners, k.shape[2]
        rows, heads, dim = q.shape[0], q.shape[2], q.shape[3]
        plan = self._planned(rows, q.dtype)
        # Query head h reads kv head h // g; a block nobody reads takes any row's query, and is dropped.
        readers = q.reshape(rows, kv_heads, heads // kv_heads, dim)[plan.pick]  # (N, kv, g, hd)
        keys, values = self.cache.k[layer], self.cache.v[layer]  # (kv, blocks + 1, bs, hd)
        parts, at = [], 0
        for (lo, hi), mask in zip(o.spans, plan.masks):
            parts.append(_partial(readers[at : at + hi - lo], keys[:, lo:hi], values[:, lo:hi], mask))
            at += hi - lo
        if o.extra is not None:  # other readers of shared blocks: those blocks copied, one per reader
            blocks = o.extra[1]
            parts.append(_partial(readers[at:], keys[:, blocks], values[:, blocks], plan.masks[-1]))
        part, lse = parts[0] if len(parts) == 1 else (torch.cat(x) for x in zip(*parts))
        # part (N, kv, g, hd), lse (N, kv, g): each row's parts side by side, weighted by a softmax of their lse.
        if plan.grid.shape[1] == 1:
            out = part[plan.grid[:, 0]]
        else:
            lse = lse.float()[plan.grid]  # (B, P, kv, g)
            weight = torch.softmax(lse if plan.bias is None else lse + plan.bias, dim=1)
            out = (part.float()[plan.grid] * weight[..., None]).sum(1)
        return out.to(q.dtype).reshape(rows, heads, 1, dim)


@dataclass
class _BlockPlan:
    """What `BlockDecode`'s layers share in a step: each part's query row, each call's mask, each row's parts
    (B, P), padded with part 0 where a row has fewer, and there ``bias`` (B, P, 1, 1) -inf (None: no padding)."""

    pick: torch.Tensor
    masks: list[torch.Tensor]
    grid: torch.Tensor
    bias: torch.Tensor | None


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
        write(self.cache, layer, self.where, k, v)
        # Few operations a row: at a few rows, each small tensor operation's fixed cost is what a step pays.
        keys, values = self.cache.pool(layer)  # (1, kv, positions, hd)
        queries, gqa = q.transpose(1, 2), k.shape[2] != q.shape[2]  # (B, nh, 1, hd)
        out = []
        for row, (read, length) in enumerate(zip(self.reads, self.lengths)):
            if isinstance(read, torch.Tensor):  # scattered: its blocks copied into one run
                row_k, row_v = (self.cache.gather(layer, read[None]))
                row_k, row_v = row_k[:, :, :length], row_v[:, :, :length]
            else:  # one run: a view of the pool
                row_k, row_v = keys[:, :, read : read + length], values[:, :, read : read + length]
            out.append(F.scaled_dot_product_attention(queries[row : row + 1], row_k, row_v, enable_gqa=gqa))
        return torch.cat(out)  # (B, nh, 1, hd)


SPAN_KEYS = 16384  # most (rows x keys) one masked call of `SpanDecode` scores: past it, the rows split into groups


@dataclass
class SpanGroup:
    """Rows read with one masked SDPA: over the pool's positions [lo, hi) in place, or over their own blocks
    copied (``blocks`` set: rows whose blocks lie too far apart to read through)."""

    rows: torch.Tensor  # (R,) the step's rows, in the order of the mask's queries
    lo: int
    hi: int
    mask: torch.Tensor  # (R, keys) additive: 0 where the row reads the key, -inf where not
    blocks: torch.Tensor | None = None  # (R, n) each row's blocks, padded, for a copied group


def _span_mask(tables: list[list[int]], lengths: list[int], lo: int, size: int, keys: int) -> torch.Tensor:
    """(R, keys): 0 at each of a row's positions (block b's offsets from (b - lo) * size), -inf elsewhere."""
    mask = torch.full((len(tables), keys + 1), float("-inf"))
    for row, (blocks, length) in enumerate(zip(tables, lengths)):
        n = -(-length // size)
        at = (torch.tensor(blocks[:n]) - lo)[:, None] * size + torch.arange(size)  # (n, size)
        at.view(-1)[length:] = keys  # the last block's unwritten tail: to the spare column
        mask[row, at.view(-1)] = 0.0
    return mask[:, :keys]


class SpanDecode:
    """One query per row, attending with one masked SDPA per group of rows over the span of the pool their blocks
    lie in, read in place: a key is scored by every row of its group, and the mask keeps each row's own.

    Rows sorted by their first block are grouped while (rows x span) stays within `SPAN_KEYS`; a row whose own
    blocks spread wider than that is copied, with the other such rows, into one padded batch."""

    def __init__(self, cache: KVCache, where: torch.Tensor, tables: list[list[int]], lengths: list[int]) -> None:
        self.cache, self.where, size = cache, where, cache.block_size
        reads = [blocks[: -(-length // size)] for blocks, length in zip(tables, lengths)]
        extents = [(min(r), max(r) + 1) for r in reads]
        order = sorted(range(len(reads)), key=lambda i: extents[i][0])
        self.groups: list[SpanGroup] = []
        far: list[int] = []
        group: list[int] = []
        lo = hi = 0

        def close() -> None:
            if group:
                keys = (hi - lo) * size
                mask = _span_mask([reads[i] for i in group], [lengths[i] for i in group], lo, size, keys)
                self.groups.append(SpanGroup(torch.tensor(group), lo, hi, mask))

        for i in order:
            first, last = extents[i]
            if (last - first) * size > SPAN_KEYS:
                far.append(i)
                continue
            if group and (len(group) + 1) * (max(hi, last) - lo) * size > SPAN_KEYS:
                close()
                group = []
            if not group:
                lo, hi = first, last
            group.append(i)
            hi = max(hi, last)
        close()
        if far:
            width = max(len(reads[i]) for i in far)
            blocks = torch.tensor([reads[i] + [cache.trash] * (width - len(reads[i])) for i in far])
            keys = torch.arange(width * size)
            mask = torch.zeros(len(far), width * size).masked_fill_(
                keys >= torch.tensor([lengths[i] for i in far])[:, None], float("-inf"))
            self.groups.append(SpanGroup(torch.tensor(far), 0, 0, mask, blocks))
        rows = torch.cat([g.rows for g in self.groups])
        self.order = None if bool((rows == torch.arange(len(reads))).all()) else torch.argsort(rows)
        self.gathered = len(far)

    def __call__(self, layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """q (B, 1, nh, hd), k and v (B, 1, n_kv, hd) -> (B, nh, 1, hd)."""
        write(self.cache, layer, self.where, k, v)
        keys, values = self.cache.pool(layer)  # (1, kv, positions, hd)
        size, gqa = self.cache.block_size, k.shape[2] != q.shape[2]
        queries = q[:, 0].transpose(0, 1)[None]  # (1, nh, B, hd): the rows as one sequence of queries
        out = []
        for g in self.groups:
            mine = queries if self.order is None and len(self.groups) == 1 else queries[:, :, g.rows]
            if g.blocks is None:  # in place: the span's keys, each row masked to its own
                span_k, span_v = keys[:, :, g.lo * size : g.hi * size], values[:, :, g.lo * size : g.hi * size]
                out.append(F.scaled_dot_product_attention(mine, span_k, span_v, attn_mask=g.mask, enable_gqa=gqa)[0])
            else:  # too spread out: their blocks copied, one padded row each
                row_k, row_v = self.cache.gather(layer, g.blocks)  # (R, kv, n * size, hd)
                out.append(F.scaled_dot_product_attention(mine[0].transpose(0, 1)[:, :, None], row_k, row_v,
                                                          attn_mask=g.mask[:, None, None], enable_gqa=gqa)
                           [:, :, 0].transpose(0, 1))
        joined = out[0] if len(out) == 1 else torch.cat(out, dim=1)  # (nh, B, hd) in the groups' order
        if self.order is not None:
            joined = joined[:, self.order]
        return joined.transpose(0, 1)[:, :, None]  # (B, nh, 1, hd)
