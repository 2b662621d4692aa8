"""Decode attention on a CPU that reads the KV cache's pool where it lies (lyre.engine.attention has the rest).

- `RunDecode`: a step of a few rows, one SDPA per row over a view of its
  blocks where they are one run of the pool (the block manager keeps tables
  in runs where it can); only a row whose blocks are scattered is copied.
- `BlockDecode`: a step of many rows, block by block (flash-decoding's split
  softmax): each block's scores against its row's query, its own max, sum
  and weighted values, then one combine per row. It reads the spans of the
  pool the rows' blocks lie in, as views: no key is copied but a shared
  prefix block's for its second reader.

Row by row costs less at a few rows (one SDPA per row, no combine), block by
block at many (a fixed number of operations per span, whatever the rows).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from lyre.engine.attention import write
from lyre.engine.kv_cache import KVCache

__all__ = ["BlockDecode", "BlockOwners", "RunDecode", "SPAN_GAP"]

SPAN_GAP = 16  # unread blocks between two runs that `BlockDecode` reads through rather than splitting its span


@dataclass
class BlockOwners:
    """Which row reads each block of a decode step, for `BlockDecode`.

    The blocks read lie in ``spans`` of the pool, each ``(lo, hi)`` read in
    place as one view: the rows' blocks in order, with a gap of a few unread
    blocks between two runs bridged rather than split (a span costs a few
    operations per layer, an unread block only its share of one). Over the
    spans laid end to end, ``owner[i]`` is the row that reads the i-th block
    (``rows``, one past the last row, for a block no row reads) and
    ``count[i]`` how many of its positions it reads. A block that several
    rows read (a shared prefix) has one owner there; each other reader is a
    pair in ``extra`` (row, block, count), whose block is copied for it.
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
        write(self.cache, layer, self.where, k, v)
        o, kv_heads = self.owners, k.shape[2]
        rows, heads, dim = q.shape[0], q.shape[2], q.shape[3]
        grouped = q.reshape(rows, kv_heads, heads // kv_heads, dim)  # query head h reads kv head h // g
        keys, values = self.cache.k[layer], self.cache.v[layer]  # (kv, blocks + 1, bs, hd)
        readers = grouped[o.owner.clamp(max=rows - 1)].transpose(0, 1)  # an unread block: any query, count 0
        parts, index, at = [], [o.owner], 0
        for lo, hi in o.spans:
            parts.append(_partial(readers[:, at : at + hi - lo], keys[:, lo:hi], values[:, lo:hi],
                                  o.count[at : at + hi - lo]))
            at += hi - lo
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
