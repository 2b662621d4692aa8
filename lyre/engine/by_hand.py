"""Driving a `ModelRunner` without an engine, for tests and benchmarks: rows, blocks and steps by hand.

The scheduler's bookkeeping in miniature: a request is placed in a row with
blocks for its tokens, a prefill runs what is not yet computed, a decode step
grows each row's blocks by its next key first.

    hand = ByHand(runner)
    for slot, req in enumerate(reqs):
        hand.place(req, slot)
    first = hand.prefill(reqs)
    nxt = hand.decode(reqs)  # after appending each request's token
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from lyre.engine.batch import PrefillChunk
from lyre.engine.block_manager import BlockManager
from lyre.engine.sequence import Request

if TYPE_CHECKING:
    from lyre.engine.runner import ModelRunner

__all__ = ["ByHand"]


class ByHand:
    def __init__(self, runner: ModelRunner, caching: bool = False) -> None:
        self.runner = runner
        self.blocks = BlockManager(runner.kv_blocks, runner.block_size, caching=caching)

    def place(self, req: Request, slot: int) -> None:
        """Row ``slot`` and blocks for every token ``req`` has (reusing a cached prefix when caching)."""
        table = self.blocks.admit(req.tokens, req.salt)
        if table is None:
            raise RuntimeError(f"the KV cache has no room for request {req.request_id}'s {req.num_tokens} tokens")
        req.slot, req.kv = slot, table

    def chunks(self, reqs: list[Request], limit: int | None = None) -> list[PrefillChunk]:
        """Each request's next prompt chunk: what is not computed yet, at most ``limit`` tokens."""
        chunks = []
        for req in reqs:
            assert req.kv is not None
            end = req.num_tokens if limit is None else min(req.num_tokens, req.kv.computed + limit)
            chunks.append(PrefillChunk(req, req.kv.computed, end))
        return chunks

    def prefill(self, reqs: list[Request], limit: int | None = None) -> list[int]:
        """Run each request's next chunk (all it has not computed, by default); the ids of those whose prompt it
        ended, in order."""
        chunks = self.chunks(reqs, limit)
        tokens = self.runner.step(chunks, [])
        for chunk in chunks:
            assert chunk.req.kv is not None
            chunk.req.kv.computed = chunk.end
            self.blocks.seal(chunk.req.kv, chunk.req.tokens, chunk.req.salt)
        return tokens

    def decode(self, reqs: list[Request]) -> list[int]:
        """One decode step over ``reqs`` (each has appended its last token)."""
        for req in reqs:
            assert req.kv is not None
            if not self.blocks.grow(req.kv, req.num_tokens):
                raise RuntimeError(f"the KV cache has no room for request {req.request_id}'s next token")
        tokens = self.runner.step([], reqs)
        for req in reqs:
            assert req.kv is not None
            req.kv.computed = req.num_tokens
            self.blocks.seal(req.kv, req.tokens, req.salt)
        return tokens

    def release(self, req: Request) -> None:
        assert req.kv is not None
        self.blocks.release(req.kv)
        req.kv = None
