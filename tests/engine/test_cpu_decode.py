"""The CPU's in-place decode attention against the gathered reference: row by row over views (`RunDecode`),
block by block over spans (`BlockDecode`) and masked groups of rows over spans (`SpanDecode`), on tables laid out as a busy pool leaves them: in runs far apart,
scattered, and sharing a prefix block."""

from __future__ import annotations

import torch

from lyre.engine.attention import CachedAttention, StepRows
import pytest

from lyre.engine import cpu_decode
from lyre.engine.cpu_decode import SPAN_GAP, BlockDecode, BlockOwners, RunDecode, SpanDecode
from lyre.engine.kv_cache import KVCache
from lyre.models.config import LlamaConfig

BLOCK = 8
HEADS, KV_HEADS, DIM = 4, 2, 16


def _cache(blocks: int) -> KVCache:
    config = LlamaConfig(hidden_size=HEADS * DIM, intermediate_size=8, num_hidden_layers=1,
                         num_attention_heads=HEADS, num_key_value_heads=KV_HEADS, head_dim=DIM, vocab_size=8)
    cache = KVCache(config, blocks, BLOCK, torch.float32, torch.device("cpu"))
    generator = torch.Generator().manual_seed(0)
    cache.k.normal_(generator=generator)
    cache.v.normal_(generator=generator)
    return cache


def _attend(context: object, cache: KVCache, q: torch.Tensor, tables: torch.Tensor,
            lengths: torch.Tensor) -> torch.Tensor:
    """The rows' new key and value at their last position, then attention over everything up to it."""
    rows = q.shape[0]
    last = lengths - 1
    where = tables.gather(1, (last // BLOCK)[:, None])[:, 0] * BLOCK + last % BLOCK
    k = torch.randn(rows, 1, KV_HEADS, DIM, generator=torch.Generator().manual_seed(1))
    v = torch.randn(rows, 1, KV_HEADS, DIM, generator=torch.Generator().manual_seed(2))
    made = context(cache, where)  # type: ignore[operator]
    return made(0, q, k, v)


def _each_way(tables: list[list[int]], lengths: list[int], pool: int) -> dict[str, torch.Tensor]:
    width = max(len(t) for t in tables)
    cache = _cache(pool)
    padded = torch.tensor([t + [cache.trash] * (width - len(t)) for t in tables])
    n = torch.tensor(lengths)
    q = torch.randn(len(tables), 1, HEADS, DIM, generator=torch.Generator().manual_seed(3))
    ways = {
        "gathered": lambda c, w: CachedAttention(c, StepRows(w, padded, n - 1, n), 1),
        "blocks": lambda c, w: BlockDecode(c, w, BlockOwners.of(padded, n, BLOCK)),
        "runs": lambda c, w: RunDecode(c, w, tables, lengths),
        "spans": lambda c, w: SpanDecode(c, w, tables, lengths),
    }
    return {name: _attend(way, _cache(pool), q, padded, n) for name, way in ways.items()}


def _agree(outs: dict[str, torch.Tensor]) -> None:
    for name in ("blocks", "runs", "spans"):
        torch.testing.assert_close(outs[name], outs["gathered"], atol=1e-5, rtol=1e-5, msg=name)


def test_rows_in_runs_far_apart_are_read_as_spans_of_their_own() -> None:
    far = 3 * SPAN_GAP
    tables = [[2, 3, 4], [far, far + 1], [far + 2, far + 4]]  # the third row skips a block: bridged, not split
    lengths = [3 * BLOCK - 2, 2 * BLOCK, BLOCK + 1]
    owners = BlockOwners.of(torch.tensor([t + [99] * (3 - len(t)) for t in tables]), torch.tensor(lengths), BLOCK)
    assert owners.spans == [(2, 5), (far, far + 5)]  # not (2, far + 5): the blocks between are nobody's
    assert owners.extra is None
    _agree(_each_way(tables, lengths, far + 8))


def test_scattered_rows_and_a_shared_prefix_block_read_right_each_way() -> None:
    tables = [[0, 7, 3], [0, 12], [5]]  # rows 0 and 1 share block 0; row 0 is scattered
    lengths = [2 * BLOCK + 3, BLOCK + 5, 4]
    owners = BlockOwners.of(torch.tensor([t + [20] * (3 - len(t)) for t in tables]), torch.tensor(lengths), BLOCK)
    assert owners.extra is not None and owners.extra[1].tolist() == [0]
    assert RunDecode(_cache(16), torch.zeros(3, dtype=torch.long), tables, lengths).gathered == 2  # rows 0 and 1
    _agree(_each_way(tables, lengths, 16))


def test_rows_of_one_block_each_take_their_block_as_it_is() -> None:
    # One part a row, so no combine: two rows of the same one block (the second reads a copy) and one alone.
    tables = [[3], [3], [9]]
    lengths = [BLOCK, 5, 1]
    assert BlockDecode(_cache(16), torch.zeros(3, dtype=torch.long), BlockOwners.of(
        torch.tensor(tables), torch.tensor(lengths), BLOCK))._planned(3, torch.float32).grid.shape == (3, 1)
    _agree(_each_way(tables, lengths, 16))


def _groups(tables: list[list[int]], lengths: list[int]) -> list[tuple[list[int], int, int, bool]]:
    return [(g.rows.tolist(), g.lo, g.hi, g.blocks is not None)
            for g in SpanDecode(_cache(16), torch.zeros(len(tables), dtype=torch.long), tables, lengths).groups]


def test_span_groups_keep_rows_times_keys_within_the_budget_and_copy_only_rows_spread_wider(
        monkeypatch: pytest.MonkeyPatch) -> None:
    tables = [[14, 15], [0, 7, 3], [0, 12], [5]]  # row 1 spreads over blocks 0-7, row 2 over 0-12
    lengths = [BLOCK + 1, 2 * BLOCK + 3, BLOCK + 5, 4]
    assert _groups(tables, lengths) == [([1, 2, 3, 0], 0, 16, False)]  # 4 rows x 128 keys: one call
    _agree(_each_way(tables, lengths, 16))  # its queries taken in the mask's order, its outputs put back
    monkeypatch.setattr(cpu_decode, "SPAN_KEYS", 8 * BLOCK)
    # Row 2's own blocks spread over 13 blocks, past 8: copied. The others, by first block: rows 1 and 3 share
    # blocks 0-7 (2 x 8 blocks would pass 8: split), row 0 alone.
    assert _groups(tables, lengths) == [([1], 0, 8, False), ([3], 5, 6, False), ([0], 14, 16, False),
                                        ([2], 0, 0, True)]
    _agree(_each_way(tables, lengths, 16))  # and each group reads right, put back in the rows' order
