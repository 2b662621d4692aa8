"""The KV cache's blocks: tables, growth, prefix reuse by hash chain, eviction least recently used. No tensors."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lyre.engine.block_manager import BlockManager, chain_keys

A = list(range(100, 140))  # 40 tokens: two whole blocks of 16 and 8 more
B = list(range(500, 540))


def _run(manager: BlockManager, tokens: list[int], salt: str = "") -> list[int]:
    """Admit ``tokens``, compute them all, seal; the table's blocks."""
    table = manager.admit(tokens, salt)
    assert table is not None
    table.computed = len(tokens)
    manager.seal(table, tokens, salt)
    blocks = list(table.blocks)
    manager.release(table)
    return blocks


def test_a_table_takes_blocks_for_its_tokens_and_gives_them_back() -> None:
    m = BlockManager(8, 16)
    table = m.admit(A, "")
    assert table is not None and len(table.blocks) == 3 and len(set(table.blocks)) == 3
    assert table.computed == table.reused == 0 and m.free == 5 and m.stats().used == 3
    assert m.grow(table, 48) and len(table.blocks) == 3  # still room in the third block
    assert m.grow(table, 49) and len(table.blocks) == 4
    m.release(table)
    assert m.free == 8 and m.stats().used == 0 and table.blocks == []


def test_a_later_request_reuses_the_sealed_blocks_of_its_prefix() -> None:
    m = BlockManager(8, 16)
    first = _run(m, A)
    assert m.stats().cached == 2  # the two whole blocks; the partial third one holds nothing findable
    again = m.admit(A[:32] + B[:5], "")
    assert again is not None
    assert again.blocks[:2] == first[:2] and again.computed == again.reused == 32
    s = m.stats()
    assert (s.queried, s.hits) == (4, 2) and s.hit_rate == 0.5  # the first found nothing


def test_a_prefix_is_the_same_tokens_with_the_same_weights() -> None:
    m = BlockManager(8, 16)
    _run(m, A)
    other_voice = m.admit(A, "adapter:1:calm")
    assert other_voice is not None and other_voice.reused == 0  # a LoRA voice's keys are not the base model's
    m.release(other_voice)
    # Block 2's tokens after another block 1 are another prefix: the key covers every token before.
    changed_first = m.admit(B[:16] + A[16:32] + [1], "")
    assert changed_first is not None and changed_first.reused == 0
    assert chain_keys(A, 16, "")[1] != chain_keys(B[:16] + A[16:], 16, "")[1]


def test_the_last_token_is_always_computed() -> None:
    m = BlockManager(8, 16)
    _run(m, A[:32])
    same = m.admit(A[:32], "")
    assert same is not None and same.reused == 16  # its logits come from running the last token


def test_requests_share_a_held_prefix_and_it_outlives_either() -> None:
    m = BlockManager(8, 16)
    one = m.admit(A, "")
    assert one is not None
    one.computed = 40
    m.seal(one, A, "")
    two = m.admit(A[:32] + [7, 8], "")
    assert two is not None and two.blocks[:2] == one.blocks[:2]
    assert m.stats().used == 4  # 3 + 1: the prefix counted once
    m.release(one)
    assert m.stats().used == 3 and m.free == 5
    m.release(two)
    assert m.stats().cached == 2 and m.free == 8


def test_the_pool_takes_back_unsealed_blocks_first_then_the_least_recently_used_prefix() -> None:
    m = BlockManager(4, 4)
    old = _run(m, [1, 2, 3, 4, 5])  # one sealed block, one partial
    new = _run(m, [9, 9, 9, 9, 9])
    assert m.stats().cached == 2 and m.evictions == 0
    table = m.admit([7] * 9, "")  # three blocks: the two unsealed ones and the older prefix (in pool order)
    assert table is not None and set(table.blocks) == set(range(4)) - {new[0]}  # new's prefix kept
    assert old[0] in table.blocks
    assert table.blocks == sorted(table.blocks)
    assert m.evictions == 1
    m.release(table)
    assert m.admit([1, 2, 3, 4, 5], "").reused == 0  # type: ignore[union-attr]  # evicted
    assert m.evictions == 1


def test_a_dry_pool_refuses_and_takes_nothing() -> None:
    m = BlockManager(3, 4)
    table = m.admit([1] * 8, "")
    assert table is not None and m.free == 1
    assert m.admit([2] * 8, "") is None and m.free == 1
    assert m.admit([2] * 4, "", spare=1) is None  # would leave none free
    assert not m.grow(table, 13) and len(table.blocks) == 2 and m.free == 1
    assert m.grow(table, 12) and m.free == 0


def test_without_caching_nothing_is_found() -> None:
    m = BlockManager(8, 16, caching=False)
    _run(m, A)
    table = m.admit(A, "")
    assert table is not None and table.reused == 0 and m.stats().cached == 0 and m.stats().queried == 0


def test_a_pool_needs_blocks() -> None:
    with pytest.raises(ValueError, match="blocks"):
        BlockManager(0, 16)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["admit", "grow", "compute", "finish", "cancel"]),
                          st.integers(0, 5), st.integers(1, 40), st.sampled_from(["", "adapter:1:calm"])),
                max_size=60))
def test_no_block_leaks_whatever_runs_grow_finish_or_are_cancelled(ops: list[tuple[str, int, int, str]]) -> None:
    """Random admissions (sharing prefixes: tokens come from a small alphabet), growth, computation and
    endings: the held blocks are always the live tables' (shared ones counted once), a table never holds a
    block twice, and at the end every block is free."""
    m = BlockManager(12, 4)
    live: dict[int, tuple[list[int], str, object]] = {}
    for op, who, n, salt in ops:
        if op == "admit" and who not in live:
            tokens = [t % 3 for t in range(who, who + n)]
            table = m.admit(tokens, salt, expect=n * who % 40)
            if table is not None:
                live[who] = (tokens, salt, table)
        elif who in live:
            tokens, salt, table = live[who]
            if op == "grow":
                more = [who] * (n % 9)
                if m.grow(table, len(tokens) + len(more)):  # type: ignore[arg-type]
                    tokens.extend(more)
            elif op == "compute":
                table.computed = len(tokens)  # type: ignore[attr-defined]
                m.seal(table, tokens, salt)  # type: ignore[arg-type]
            else:  # finish and cancel both give everything back, computed or not
                m.release(table)  # type: ignore[arg-type]
                del live[who]
        held = {b for _, _, t in live.values() for b in t.blocks}  # type: ignore[attr-defined]
        assert all(len(set(t.blocks)) == len(t.blocks) for _, _, t in live.values())  # type: ignore[attr-defined]
        assert m.stats().used == len(held) and m.free == m.num_blocks - len(held)
        assert m.stats().cached == sum(1 for b in range(m.num_blocks) if b not in held and m._key[b] is not None)
    for _, _, table in live.values():
        m.release(table)  # type: ignore[arg-type]
    s = m.stats()
    assert s.used == 0 and s.free == m.num_blocks and s.cached <= m.num_blocks
    assert set(m._unheld) <= {1, 2} and not m._reserver  # every block free, unsealed or cached: no reservation left


def test_a_table_keeps_its_blocks_in_one_run_where_its_expected_length_fits() -> None:
    """A new table starts where the positions it expects to reach fit, and the blocks it will grow into are
    kept from the next table's placement: two tables growing a token at a time in turn stay one run each."""
    m = BlockManager(64, 4)
    first = m.admit([1] * 8, "", expect=60)
    second = m.admit([2] * 8, "", expect=60)
    assert first is not None and second is not None
    for n in range(9, 61):
        assert m.grow(first, n) and m.grow(second, n)
    for table in (first, second):
        assert table.blocks == list(range(table.blocks[0], table.blocks[0] + 15))
    m.release(first)
    m.release(second)
    assert set(m._unheld) == {1}  # no reservation outlives its table


def test_a_reservation_is_a_hint_that_gives_way_when_the_pool_is_short() -> None:
    m = BlockManager(8, 4)
    grower = m.admit([1] * 4, "", expect=32)  # one block, seven more expected: the whole pool
    assert grower is not None and grower.blocks == [0] and grower.reserved == range(1, 8)
    other = m.admit([2] * 8, "")  # nothing but reserved blocks free: it takes two of them
    assert other is not None and len(other.blocks) == 2 and other.blocks == sorted(other.blocks)
    assert m.grow(grower, 24) and len(grower.blocks) == 6 and not set(grower.blocks) & set(other.blocks)
    assert m.free == 0


def test_a_reservation_taken_and_given_back_is_not_cleared_by_its_first_table() -> None:
    """A's reserved blocks pass to B and back to the pool, and C reserves one: A's release leaves C's alone."""
    m = BlockManager(8, 4)
    a = m.admit([1] * 4, "", expect=32)  # block 0, blocks 1-7 reserved
    b = m.admit([2] * 8, "")  # nothing else free: two of A's reserved blocks
    assert a is not None and b is not None and set(b.blocks) == {1, 2}
    m.release(b)
    c = m.admit([3] * 4, "", expect=8)  # a free unsealed run again: 1 and 2, with 2 reserved for C
    assert c is not None and c.blocks == [1] and c.reserved == range(2, 3)
    m.release(a)
    assert m._unheld[2] == 3 and m._reserver[2] is c  # still C's
    m.release(c)
    assert not m._reserver and set(m._unheld) == {1}


def test_a_table_whose_neighbour_is_taken_continues_in_a_run_elsewhere() -> None:
    m = BlockManager(8, 4)
    table = m.admit([1] * 4, "")  # expects nothing more: nothing reserved
    assert table is not None and table.blocks == [0]
    other = m.admit([2] * 4, "")
    assert other is not None and other.blocks == [1]
    assert m.grow(table, 16) and table.blocks == [0, 2, 3, 4]  # one gap, then a run of its own
