"""The KV cache's blocks: who holds which, and which hold a prefix worth keeping. Plain Python, no tensors.

The cache is a pool of fixed-size blocks of ``block_size`` positions. A
request holds a block table (its blocks in position order), grown a block at
a time as it writes past the last one and released when it ends.

A block whose ``block_size`` positions are all written is sealed: keyed by a
hash chain over every token up to its end and the salt it was computed with
(a LoRA voice's keys and values are not the base model's). A new request
whose leading tokens match sealed blocks reuses them and prefills only the
rest (automatic prefix caching). Released blocks keep their contents: a
sealed one stays findable until the pool needs it back, least recently used
first; an unsealed one is reused at once.

A table's blocks are kept in one run of the pool where it has room. A new
table is placed at the start of the smallest run of free unsealed blocks
that holds the positions it expects to reach (its prompt and max_tokens),
and the blocks it will grow into are reserved: others are placed elsewhere,
and take them only when nothing else is free. A table grows into the block
right after its last one when that is free. No cached block is evicted out
of its least-recently-used turn for this (but the one next to a growing
table when every free block is cached): when no run is free, a table takes
the blocks next in eviction order, sorted. Requests whose output no later
prompt repeats (speech) seal only their prompt's blocks, so their output's
blocks come back unsealed, in runs. A CPU decode step reads the spans the
rows' blocks lie in, in place (`lyre.engine.cpu_decode`): tables kept whole
keep those spans short.
"""

from __future__ import annotations

import hashlib
import re
from array import array
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["BlockManager", "BlockTable", "CacheStats", "chain_keys"]

_NO_PARENT = b""
# BlockManager._unheld, per block: held, free and unsealed, free and cached (sealed), or free and unsealed but
# reserved for the growth of the table before it (only free unsealed runs are reserved).
_HELD, _UNSEALED, _CACHED, _RESERVED = 0, 1, 2, 3
_UNSEALED_RUN = re.compile(rb"\x01+")  # a run of free blocks that nothing finds and nobody expects to grow into


def chain_keys(tokens: Sequence[int], block_size: int, salt: str, parent: bytes = _NO_PARENT,
               start: int = 0) -> list[bytes]:
    """Keys of the whole blocks of ``tokens`` from block ``start`` on; each key covers every token before
    it (``parent`` is block ``start - 1``'s key) and the salt."""
    keys = []
    salted = salt.encode()
    for first in range(start * block_size, len(tokens) - block_size + 1, block_size):
        digest = hashlib.blake2b(parent, digest_size=16)
        digest.update(array("q", tokens[first:first + block_size]).tobytes())
        digest.update(salted)
        parent = digest.digest()
        keys.append(parent)
    return keys


@dataclass
class BlockTable:
    """One request's blocks, in position order, and what is known of them.

    ``computed``: positions whose keys and values are in the cache (the
    prefix reused plus what the request has run since). ``reused``: the
    positions the prefix cache supplied at admission. ``keys``: the keys of
    the leading sealed blocks.
    """

    blocks: list[int]
    computed: int = 0
    reused: int = 0
    keys: list[bytes] | None = None
    reserved: range = range(0)  # free blocks after its last that it expects to grow into

    def __post_init__(self) -> None:
        if self.keys is None:
            self.keys = []


@dataclass(frozen=True)
class CacheStats:
    total: int  # blocks in the pool
    used: int  # held by at least one request
    cached: int  # held by none, sealed, findable by a prefix
    queried: int  # blocks looked up at admission, since start
    hits: int  # of which found
    evictions: int  # sealed blocks taken back for other contents

    @property
    def free(self) -> int:
        return self.total - self.used

    @property
    def hit_rate(self) -> float:
        return self.hits / self.queried if self.queried else 0.0


class BlockManager:
    """A pool of ``num_blocks`` blocks of ``block_size`` positions."""

    def __init__(self, num_blocks: int, block_size: int, caching: bool = True) -> None:
        """``caching``: find and reuse sealed prefixes (off: every request computes all its tokens)."""
        if num_blocks < 1 or block_size < 1:
            raise ValueError(f"a block pool needs blocks and positions, got {num_blocks} x {block_size}")
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.caching = caching
        self._refs = [0] * num_blocks
        self._key: list[bytes | None] = [None] * num_blocks  # a sealed block's key
        self._by_key: dict[bytes, int] = {}
        # Blocks no request holds, the next to be taken first: unsealed ones, then sealed ones least
        # recently used first.
        self._free: OrderedDict[int, None] = OrderedDict((b, None) for b in range(num_blocks))
        self._unheld = bytearray([_UNSEALED]) * num_blocks  # per block, its state: runs are found in C
        self._reserver: dict[int, BlockTable] = {}  # each reserved block's table
        self._used = 0  # blocks held by a request
        self._cached = 0  # of the free blocks, the sealed ones
        self.queried = 0
        self.hits = 0
        self.evictions = 0

    # -- sizes ---------------------------------------------------------------
    def blocks_for(self, positions: int) -> int:
        return -(-positions // self.block_size)

    @property
    def free(self) -> int:
        """Blocks that can be taken now (unheld, sealed or not)."""
        return len(self._free)

    def stats(self) -> CacheStats:
        """Counted as blocks change hands, not by walking the pool: a server reads this per request."""
        return CacheStats(self.num_blocks, self._used, self._cached, self.queried, self.hits, self.evictions)

    # -- admission -----------------------------------------------------------
    def match(self, tokens: Sequence[int], salt: str) -> list[int]:
        """The sealed blocks that hold ``tokens``' leading blocks. The last token is never matched: its
        logits are what the request's prefill must compute."""
        matched: list[int] = []
        if not self.caching:
            return matched
        for key in chain_keys(tokens[: len(tokens) - 1], self.block_size, salt):
            block = self._by_key.get(key)
            if block is None:
                break
            matched.append(block)
        return matched

    def admit(self, tokens: Sequence[int], salt: str, spare: int = 0, expect: int = 0) -> BlockTable | None:
        """Blocks for ``tokens``, reusing a cached prefix; None when taking them would leave fewer than
        ``spare`` blocks free. ``expect``: the positions the table may grow to (a hint for where to put it)."""
        matched = self.match(tokens, salt)
        need = self.blocks_for(len(tokens)) - len(matched)
        unheld_matches = sum(1 for b in matched if not self._refs[b])
        if need + spare > len(self._free) - unheld_matches:
            return None
        if self.caching:
            self.queried += (len(tokens) - 1) // self.block_size
            self.hits += len(matched)
        for block in matched:
            self._hold(block)
        table = BlockTable(list(matched))
        self._place(table, need, self.blocks_for(max(expect, len(tokens))) - len(matched))
        table.computed = table.reused = len(matched) * self.block_size
        table.keys = [self._key[b] for b in matched]  # type: ignore[misc]
        return table

    def grow(self, table: BlockTable, positions: int) -> bool:
        """Room for ``positions`` in ``table``; False (and nothing taken) when the pool is dry."""
        need = self.blocks_for(positions) - len(table.blocks)
        if need > len(self._free):
            return False
        following = self._unheld[table.blocks[-1] + 1 : table.blocks[-1] + 1 + need] if table.blocks else b""
        # A cached block next to it is evicted out of its turn only when every free block is cached (an eviction
        # is due anyway).
        if len(following) == need and _HELD not in following and (
                _CACHED not in following or self._cached == len(self._free)):
            table.blocks.extend(self._take(b) for b in range(table.blocks[-1] + 1, table.blocks[-1] + 1 + need))
        else:
            table.blocks.extend(self._take_any(need))
        return True

    def seal(self, table: BlockTable, tokens: Sequence[int], salt: str) -> None:
        """Key every whole block of ``table`` that ``computed`` now covers (``tokens``: the request's
        tokens so far), so later requests can find them."""
        whole = min(table.computed, len(tokens)) // self.block_size
        assert table.keys is not None
        if not self.caching or whole <= len(table.keys):
            return
        parent = table.keys[-1] if table.keys else _NO_PARENT
        for i, key in enumerate(chain_keys(tokens[: whole * self.block_size], self.block_size, salt,
                                           parent, start=len(table.keys)), start=len(table.keys)):
            table.keys.append(key)
            block = table.blocks[i]
            if key not in self._by_key and self._key[block] is None:
                self._key[block] = key
                self._by_key[key] = block

    def release(self, table: BlockTable) -> None:
        """Give back every block of ``table``. Its tail goes first into the eviction order, so a shared
        prefix outlives the tails that hang off it."""
        for block in table.reserved:
            if self._reserver.get(block) is table:  # still its own: taken since, it is another's or nobody's
                del self._reserver[block]
                self._unheld[block] = _UNSEALED
        table.reserved = range(0)
        for block in reversed(table.blocks):
            self._refs[block] -= 1
            if self._refs[block] == 0:
                self._used -= 1
                self._free[block] = None
                self._unheld[block] = _UNSEALED if self._key[block] is None else _CACHED
                if self._key[block] is None:
                    self._free.move_to_end(block, last=False)  # holds nothing findable: reuse first
                else:
                    self._cached += 1
        table.blocks = []
        table.computed = 0

    # -- blocks --------------------------------------------------------------
    def _hold(self, block: int) -> None:
        """Hold a sealed block a prefix matched (free and cached, or already held)."""
        if self._refs[block] == 0:
            del self._free[block]
            self._unheld[block] = _HELD
            self._used += 1
            self._cached -= 1
        self._refs[block] += 1

    def _place(self, table: BlockTable, need: int, expect: int) -> None:
        """Give a new ``table`` ``need`` blocks: at the start of the smallest free unsealed run that holds
        ``expect``, else of the longest that holds ``need``, reserving the rest of ``expect`` after them; right
        after its matched prefix where those are free. Else the next in eviction order: no cached block is
        evicted out of its least-recently-used turn to keep a table in one run."""
        if need <= 0:
            return
        after = table.blocks[-1] + 1 if table.blocks else None
        runs = [(m.start(), m.end() - m.start()) for m in _UNSEALED_RUN.finditer(self._unheld)]
        if after is not None:  # a reused prefix: continue it if its next blocks are free
            runs = [(after, n - (after - first)) for first, n in runs if first <= after < first + n]
        fits = [run for run in runs if run[1] >= expect]
        start, length = (min(fits, key=lambda run: run[1]) if fits
                         else max(runs, key=lambda run: run[1], default=(0, 0)))
        if length < need:
            table.blocks.extend(self._take_any(need))
            return
        table.blocks.extend(self._take(b) for b in range(start, start + need))
        table.reserved = range(start + need, start + min(expect, length))
        for block in table.reserved:
            self._unheld[block] = _RESERVED
            self._reserver[block] = table

    def _take_any(self, need: int) -> list[int]:
        """``need`` blocks in eviction order, blocks reserved for others' growth last; sorted (a released table's
        blocks leave the eviction order together, so they come back as a run)."""
        taken: list[int] = []
        for block in self._free:
            if self._unheld[block] != _RESERVED:
                taken.append(block)
                if len(taken) == need:
                    break
        if len(taken) < need:
            taken += [b for b in self._free if self._unheld[b] == _RESERVED][: need - len(taken)]
        return sorted(self._take(b) for b in taken)

    def _take(self, block: int) -> int:
        """Hold ``block``, unheld until now (evicting what it cached)."""
        del self._free[block]
        self._unheld[block] = _HELD
        self._reserver.pop(block, None)
        key = self._key[block]
        if key is not None:
            del self._by_key[key]
            self._key[block] = None
            self.evictions += 1
            self._cached -= 1
        self._refs[block] = 1
        self._used += 1
        return block
