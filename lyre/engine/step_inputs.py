"""A step's model inputs packed on the host from its requests: prompt chunks into one right-padded batch, decode
rows into one int64 block.

The decode block is what the runner's persistent buffers hold: one row per
field (token, position, slot, LoRA slot and the slice placement of every
request), one column per request; the runner copies it to the device in one
transfer and derives everything else there (each slot's key count, the
attention mask, the sampling parameters).
"""

from __future__ import annotations

import torch

from lyre.engine.batch import PrefillChunk
from lyre.engine.constraint import SliceFamily, TokenSlice
from lyre.engine.sequence import Request

__all__ = ["ADAPTER", "OFFSET", "POSITION", "SLOT", "TOKEN", "decode_fields", "pack_decode", "pack_prefill"]

# Rows of the packed decode inputs (the LoRA slot is -1 for the base model); extras' flags follow.
TOKEN, POSITION, SLOT, ADAPTER, OFFSET = range(5)


def decode_fields(family: SliceFamily) -> int:
    """Rows of the packed decode inputs for slices placed in ``family``: the fields, then a flag per extra id."""
    return OFFSET + 1 + len(family.extras)


def pack_prefill(chunks: list[PrefillChunk], block_size: int,
                 trash: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Prompt chunks right-padded into one batch -> host (chunks, width) token ids, positions, and the cache
    index (block * ``block_size`` + offset) each position's key goes to."""
    lengths = [c.end - c.start for c in chunks]
    width = max(lengths)
    tokens = torch.zeros(len(chunks), width, dtype=torch.long)
    # Padding writes to the trash block, at positions that stay inside the RoPE table.
    positions = torch.zeros(len(chunks), width, dtype=torch.long)
    where = torch.full((len(chunks), width), trash * block_size, dtype=torch.long)
    for i, c in enumerate(chunks):
        assert c.req.kv is not None
        tokens[i, : lengths[i]] = torch.tensor(c.req.tokens[c.start : c.end])
        at = torch.arange(c.start, c.end)
        positions[i, : lengths[i]] = at
        where[i, : lengths[i]] = torch.tensor(c.req.kv.blocks)[at // block_size] * block_size + at % block_size
    return tokens, positions, where


def pack_decode(host: torch.Tensor, reqs: list[Request], rows: int, spare: int, family: SliceFamily | None,
                full_vocab: TokenSlice) -> None:
    """Write columns [0, rows) of ``host`` (fields, slots): ``reqs``, then padding rows that touch only the
    ``spare`` slot. ``family``: place each row's allowed slice in it (``full_vocab`` for an unconstrained row),
    as the fixed-shape path reads them; None: no placement (eager decoding samples each slice itself)."""
    n = len(reqs)
    packed = [[r.output_ids[-1] for r in reqs], [r.num_tokens - 1 for r in reqs], [r.slot for r in reqs],
              [-1 if r.adapter_slot is None else r.adapter_slot for r in reqs]]
    if family is not None:
        placed = [family.place(r.constraint.allowed(len(r.output_ids)) if r.constraint else full_vocab)
                  for r in reqs]
        packed.append([offset for offset, _ in placed])
        packed.extend([int(flags[e]) for _, flags in placed] for e in range(len(family.extras)))
    host[: len(packed), :n] = torch.tensor(packed, dtype=torch.long)
    host[:, n:rows] = 0
    host[SLOT, n:rows] = spare
    host[ADAPTER, n:rows] = -1
