"""The one place that builds tensors: prefill, decode and sampling for a step.

Every request's keys and values live in the blocks of its block table
(`lyre.engine.block_manager`); the runner keeps each resident request's table
in a device tensor, one row per slot, rewritten only when a table changes.
A prefill runs prompt chunks (a whole prompt, or the part a cached prefix
and earlier chunks left); only a prompt's last chunk samples a token.

A decode step's inputs live in persistent buffers, written from one small
block the host packs (`lyre.engine.step_inputs`) in one transfer; the step's
only device-to-host transfer is the sampled ids, started asynchronously so
the engine can do host work while the device runs (`lyre.engine.launch`).

Two decode paths share that layout:

- eager: exactly the step's rows; attention over each row's own blocks (on
  a CPU in place, `lyre.engine.cpu_decode`; elsewhere gathered up to the
  longest row); rows sampled in groups of equal slices. The default, and the
  CPU's.
- fixed-shape (``cuda_graphs``): rows padded to a batch bucket, each reading
  its blocks up to a context bucket (twice its longest row at most, not the
  whole table), each row's slice cut from one projection of its constraint's
  whole `SliceFamily` (`lyre.engine.slice_projection`); no host figure
  inside, so it is captured in a CUDA graph per (batch, context) bucket
  (`lyre.engine.graphs`) and replayed.
"""

from __future__ import annotations

import time
from collections import defaultdict

import torch

from lyre.common.batching import bucket_for
from lyre.engine.attention import CachedAttention, FlexBlocks, FlexDecode, FreshPrefill, StepRows
from lyre.engine.batch import PrefillChunk
from lyre.engine.block_tables import BlockTables
from lyre.engine.config import EngineConfig
from lyre.engine.cpu_decode import BlockDecode, BlockOwners, RunDecode, SpanDecode
from lyre.engine.constraint import SliceFamily, TokenSlice
from lyre.engine.graphs import DecodeGraphs, batch_buckets, context_buckets
from lyre.engine.kv_cache import KVCache
from lyre.engine.launch import PendingTokens
from lyre.engine.sampler import SamplingTensors, row_keys, sample
from lyre.engine.sequence import Request
from lyre.engine.slice_projection import SliceProjection
from lyre.engine.step_inputs import ADAPTER, OFFSET, POSITION, SLOT, TOKEN, decode_fields, pack_decode, pack_prefill
from lyre.models.llama import Llama
from lyre.models.lora import LoraBank

__all__ = ["ModelRunner"]

_KEY_ROUND = 64  # eager decode reads keys up to the longest row, rounded up to this (fewer distinct shapes)
# How an eager CPU step reads the pool in place (lyre.engine.cpu_decode): "spans" (the default: one masked call
# per group of rows over the span their blocks lie in, the fewest calls; past _SPAN_ROWS rows, block by block),
# "runs" (one call per row over a view of its blocks, as the slot cache read its slots) or "blocks" (block by
# block, a split softmax per row, whatever the rows).
CPU_DECODE_PATHS = ("spans", "runs", "blocks")
_SPAN_ROWS = 8  # measured on 2 cores: at more rows, block by block costs less than the span's extra scores


class ModelRunner:
    """Runs the model over a step's requests and samples their next tokens.

    Per-slot state (sampling parameters, seeds, which ids each request has
    seen, how many tokens it has drawn) lives in tensors allocated once, one
    row per KV-cache slot plus the spare, written when a request is admitted.
    """

    def __init__(self, model: Llama, config: EngineConfig, family: SliceFamily | None = None,
                 fixed_shape: bool | None = None, bank: LoraBank | None = None) -> None:
        """``fixed_shape``: decode through the fixed-shape path (default: when CUDA graphs are on); off
        CUDA it runs eagerly, which is how its padding and slicing are tested without a GPU. ``bank``:
        the LoRA adapters attached to ``model`` (`lyre.models.lora`), chosen per row."""
        self.model = model
        self.bank = bank
        self.config = config
        self.device = device = model.output_weight.device
        self.vocab_size = vocab = model.config.vocab_size
        self.attention = config.resolved_attention
        slots = config.max_batch
        self.cache = KVCache(model.config, config.kv_blocks(model.config), config.resolved_block_size,
                             model.output_weight.dtype, device)
        self.kv_cache_bytes = self.cache.nbytes
        self.kv_blocks, self.block_size = self.cache.blocks, self.cache.block_size
        self.spare = slots  # the spare slot: padding rows use it; its block table is all trash
        n = slots + 1  # the spare slot has state too, so padded rows index something real
        self.seen = torch.zeros(n, vocab, dtype=torch.bool, device=device)  # repetition-penalty history
        self.temperature = torch.zeros(n, device=device)
        self.top_p = torch.ones(n, device=device)
        self.top_k = torch.zeros(n, dtype=torch.long, device=device)
        self.penalty = torch.ones(n, device=device)
        self.seeds = torch.zeros(n, dtype=torch.long, device=device)
        self.drawn = torch.zeros(n, dtype=torch.long, device=device)  # tokens drawn so far, per slot
        self.full_vocab = TokenSlice(0, vocab)
        self.family = family or SliceFamily(0, vocab, vocab)
        self.slices = SliceProjection(model, self.family)
        self._exact = device.type == "cuda"  # the small-nucleus shortcut asks the device a question
        # Persistent decode inputs and outputs.
        fields = decode_fields(self.family)
        cuda = device.type == "cuda"
        self._host_rows = torch.zeros(fields, slots, dtype=torch.long, pin_memory=cuda)
        self._rows = torch.zeros(fields, slots, dtype=torch.long, device=device)
        self._rows[SLOT] = self.spare
        self._rows[ADAPTER] = -1
        self.max_blocks = -(-config.max_seq_len // self.cache.block_size)
        self.tables = BlockTables(n, self.max_blocks, self.cache.block_size, self.cache.trash, device)
        self._slot_lengths = torch.zeros(n, dtype=torch.int32, device=device)  # flex's mask
        self._out = torch.zeros(slots, dtype=torch.long, device=device)
        self._host_out = torch.zeros(2 * slots, dtype=torch.long, pin_memory=cuda)
        self.flex = FlexBlocks(n, self.cache) if self.attention == "flex" else None
        self.buckets = batch_buckets(config.compute_batch or slots)
        # Flex reads each row's live blocks whatever the shape: one context bucket, the whole table.
        self.contexts = (self.max_blocks,) if self.flex is not None else context_buckets(self.max_blocks,
                                                                                          self.cache.block_size)
        self.shapes = tuple((rows, blocks) for rows in self.buckets for blocks in self.contexts)
        self.fixed_shape = config.cuda_graphs if fixed_shape is None else fixed_shape
        # Captured here, at start-up, with autograd off (DecodeGraphs warms up and captures in inference mode).
        self.graphs = (DecodeGraphs(self._decode_fixed, self.shapes, device)
                       if config.cuda_graphs else None)
        self.forward_seconds = 0.0  # time in prefill and decode (forward, projection, sampling), cumulative
        self.cpu_decode, self.span_rows = "spans", _SPAN_ROWS

    # -- admission ---------------------------------------------------------
    def _claim(self, req: Request) -> None:
        slot = req.slot
        s = req.sampling
        self.temperature[slot] = s.temperature
        self.top_p[slot] = s.top_p
        self.top_k[slot] = s.top_k
        self.penalty[slot] = s.repetition_penalty
        self.seeds[slot] = req.seed
        self.drawn[slot] = len(req.output_ids)  # a resumed request draws on where it left off
        self.seen[slot] = False
        self.seen[slot, torch.tensor(req.tokens, device=self.device)] = True

    # -- a step --------------------------------------------------------------
    @torch.inference_mode()
    def launch(self, prefill: list[PrefillChunk], decode: list[Request]) -> PendingTokens:
        """Start the step: the next token of every ``prefill`` chunk that ends its prompt, then of every
        ``decode`` request."""
        events = None
        if self.device.type == "cuda":
            events = (torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
            events[0].record()
        started = time.perf_counter()
        parts = []
        if prefill:
            parts.append(self._prefill(prefill))
        if decode:
            parts.append(self._decode(decode))
        ids = torch.cat(parts) if parts else self._out[:0]
        if events is not None:
            events[1].record()
        return PendingTokens(ids, self._host_out, started, events)

    def step(self, prefill: list[PrefillChunk], decode: list[Request]) -> list[int]:
        """`launch` and wait: the ids in request order (for callers without an engine loop)."""
        pending = self.launch(prefill, decode)
        tokens = pending.tokens()
        self.forward_seconds += pending.forward_seconds
        return tokens

    def _prefill(self, chunks: list[PrefillChunk]) -> torch.Tensor:
        """Prompt chunks, right-padded into one forward -> next ids (F,) of the F chunks that end a prompt."""
        for chunk in chunks:
            if chunk.first:
                self._claim(chunk.req)
        reqs = [c.req for c in chunks]
        self.tables.sync(reqs)
        size = self.cache.block_size
        tokens, positions, where = pack_prefill(chunks, size, self.cache.trash)
        slots = torch.tensor([r.slot for r in reqs], device=self.device)
        where = where.view(-1).to(self.device)
        if all(c.start == 0 for c in chunks):
            context: FreshPrefill | CachedAttention = FreshPrefill(self.cache, where)
        else:  # after a reused prefix or an earlier chunk: attend to the cache as well
            n = -(-max(c.end for c in chunks) // size)
            context = CachedAttention(self.cache, StepRows(where, self.tables.device[slots, :n],
                                                           torch.tensor([c.start for c in chunks], device=self.device),
                                                           torch.tensor([c.end for c in chunks], device=self.device)),
                                      tokens.shape[1])
        self._use_adapters(reqs)
        out = self.model(tokens.to(self.device), positions.to(self.device), context)
        final = [i for i, c in enumerate(chunks) if c.final]
        if not final:
            return self._out[:0]
        rows = torch.tensor(final, device=self.device)
        last = torch.tensor([chunks[i].end - chunks[i].start - 1 for i in final], device=self.device)
        return self._sample_groups([reqs[i] for i in final], slots[rows], out[rows, last])

    def _decode(self, reqs: list[Request]) -> torch.Tensor:
        """One new token per running request -> next ids (B,)."""
        n = len(reqs)
        fixed = self.fixed_shape and all(self._in_family(r) for r in reqs)
        rows = bucket_for(n, self.buckets) if fixed else n
        if rows is None:  # the scheduler never runs more rows than compute_batch, the largest bucket
            raise RuntimeError(f"{n} rows in one step, more than the largest batch bucket {self.buckets[-1]}")
        self._write_rows(reqs, rows, with_slices=fixed)
        self.tables.sync(reqs)
        if fixed:
            blocks = bucket_for(-(-max(r.num_tokens for r in reqs) // self.cache.block_size), self.contexts)
            assert blocks is not None  # no row is longer than max_seq_len, the largest bucket
            if self.graphs is not None:
                self.graphs.run(rows, blocks)
            else:
                self._decode_fixed(rows, blocks)
            return self._out[:n]
        slots = self._rows[SLOT, :n]
        self._use_adapters(reqs)
        context: CachedAttention | FlexDecode | BlockDecode | RunDecode | SpanDecode
        if self.flex is None and self.device.type == "cpu":  # read in place: masked spans, runs or blocks
            where = self.tables.where(self.tables.device[slots], self._rows[POSITION, :n])
            if self.cpu_decode == "runs" or (self.cpu_decode == "spans" and n <= self.span_rows):
                way = SpanDecode if self.cpu_decode == "spans" else RunDecode
                context = way(self.cache, where, [r.kv.blocks for r in reqs],  # type: ignore[union-attr]
                              [r.num_tokens for r in reqs])
            else:
                context = BlockDecode(self.cache, where, BlockOwners.of(
                    self.tables.host[[r.slot for r in reqs]],  # type: ignore[misc]
                    torch.tensor([r.num_tokens for r in reqs]), self.cache.block_size))
        else:
            key_len = -(-max(r.num_tokens for r in reqs) // _KEY_ROUND) * _KEY_ROUND
            context = self._decode_context(n, min(-(-key_len // self.cache.block_size), self.max_blocks))
        hidden = self.model(self._rows[TOKEN, :n, None], self._rows[POSITION, :n, None], context)[:, 0]
        return self._sample_groups(reqs, slots, hidden)

    def _use_adapters(self, reqs: list[Request]) -> None:
        """Point the LoRA bank at an eager forward's rows, grouped by adapter (none: no LoRA matmuls)."""
        if self.bank is not None:
            self.bank.group([-1 if r.adapter_slot is None else r.adapter_slot for r in reqs])

    def _in_family(self, req: Request) -> bool:
        family = req.constraint.family if req.constraint is not None else None
        return family == self.family or (req.constraint is None and self.family.width == self.vocab_size)

    def _write_rows(self, reqs: list[Request], rows: int, with_slices: bool) -> None:
        """Pack rows [0, rows) (padding after the requests) and copy them to the device in one transfer."""
        pack_decode(self._host_rows, reqs, rows, self.spare, self.family if with_slices else None, self.full_vocab)
        self._rows[:, :rows].copy_(self._host_rows[:, :rows], non_blocking=True)

    def _decode_context(self, rows: int, blocks: int) -> CachedAttention | FlexDecode:
        """Attention for decode rows [0, rows) of the persistent inputs, reading ``blocks`` blocks a row."""
        slots, positions = self._rows[SLOT, :rows], self._rows[POSITION, :rows]
        tables = self.tables.device[slots, :blocks]  # (rows, blocks)
        where = self.tables.where(tables, positions)
        if self.flex is not None:
            self._slot_lengths.zero_()
            self._slot_lengths[slots] = (positions + 1).to(torch.int32)
            return FlexDecode(self.cache, where, slots, self.flex, self.tables.device, self._slot_lengths)
        return CachedAttention(self.cache, StepRows(where, tables, positions, positions + 1), 1)

    def _decode_fixed(self, rows: int, blocks: int) -> None:
        """Rows [0, rows) of the persistent inputs, each reading ``blocks`` blocks -> ids in ``_out[:rows]``. No
        host figure: capturable."""
        slots = self._rows[SLOT, :rows]
        if self.bank is not None:  # always on in a fixed-shape step: a base row's mask is all zeros
            self.bank.use(self.bank.row_mask(self._rows[ADAPTER, :rows]))
        context = self._decode_context(rows, blocks)
        hidden = self.model(self._rows[TOKEN, :rows, None], self._rows[POSITION, :rows, None], context)[:, 0]
        offsets = self._rows[OFFSET, :rows]
        logits, seen = self.slices.family_logits(hidden, self.seen, slots, offsets, self._rows[OFFSET + 1 :, :rows])
        picked = self.slices.family_ids(sample(logits, seen, self._params(slots), exact=True), offsets)
        self._record(slots, picked)
        self._out[:rows] = picked

    # -- sampling ----------------------------------------------------------
    def _params(self, slots: torch.Tensor) -> SamplingTensors:
        return SamplingTensors(
            temperature=self.temperature[slots],
            top_p=self.top_p[slots],
            top_k=self.top_k[slots],
            repetition_penalty=self.penalty[slots],
            keys=row_keys(self.seeds[slots], self.drawn[slots]),
        )

    def _record(self, slots: torch.Tensor, ids: torch.Tensor) -> None:
        self.seen[slots, ids] = True
        self.drawn[slots] += 1

    def _sample_groups(self, reqs: list[Request], all_slots: torch.Tensor, hidden: torch.Tensor) -> torch.Tensor:
        """Group rows by their allowed slice; project and sample each group on that slice only."""
        groups: dict[TokenSlice, list[int]] = defaultdict(list)
        for row, req in enumerate(reqs):
            allowed = req.constraint.allowed(len(req.output_ids)) if req.constraint else self.full_vocab
            groups[allowed].append(row)
        tokens = torch.empty(len(reqs), dtype=torch.long, device=self.device)
        for allowed, rows in groups.items():
            row_index = torch.tensor(rows, device=self.device)
            slots = all_slots[row_index]
            logits = self.slices.logits(hidden[row_index], allowed)
            choice = sample(logits, self.slices.history(self.seen, slots, allowed), self._params(slots),
                            exact=self._exact)
            tokens[row_index] = self.slices.ids(allowed)[choice]
        self._record(all_slots, tokens)
        return tokens
