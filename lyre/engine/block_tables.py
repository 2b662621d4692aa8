"""Every resident request's block table, by slot, on the device: what a step's attention reads.

One row per slot (and the spare's, all trash), `max_blocks` entries each,
trash where a table has no block. A host copy is kept beside it; `sync`
rewrites only the rows whose table changed (a new request in the slot, or
blocks it took since) and copies the whole table to the device in one
transfer, outside any captured graph, so a CUDA graph reading it replays
with the new contents.
"""

from __future__ import annotations

import torch

from lyre.engine.block_manager import BlockTable
from lyre.engine.sequence import Request

__all__ = ["BlockTables"]


class BlockTables:
    def __init__(self, slots: int, max_blocks: int, block_size: int, trash: int, device: torch.device) -> None:
        cuda = device.type == "cuda"
        self.block_size, self.trash = block_size, trash
        self.host = torch.full((slots, max_blocks), trash, dtype=torch.long, pin_memory=cuda)
        self.device = self.host.to(device)  # (slots, max_blocks)
        self._bound: list[tuple[BlockTable | None, int]] = [(None, 0)] * slots  # each row's table, and its length

    def sync(self, reqs: list[Request]) -> None:
        """Bring the rows of ``reqs`` up to date (new tables, and blocks added since)."""
        dirty = False
        for req in reqs:
            table = req.kv
            assert table is not None and req.slot is not None, f"request {req.request_id} holds no blocks"
            bound, written = self._bound[req.slot]
            if bound is table and written == len(table.blocks):
                continue
            if bound is not table:
                self.host[req.slot] = self.trash
                written = 0
            self.host[req.slot, written : len(table.blocks)] = torch.tensor(table.blocks[written:])
            self._bound[req.slot] = (table, len(table.blocks))
            dirty = True
        if dirty:
            self.device.copy_(self.host, non_blocking=True)

    def where(self, tables: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """The flat cache position of each row's new key: (rows,) from its table (rows, n) and position (rows,)."""
        size = self.block_size
        return tables.gather(1, (positions // size)[:, None])[:, 0] * size + positions % size
