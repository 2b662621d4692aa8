"""The one place that builds tensors: prefill, decode and sampling for a step."""

from __future__ import annotations

import time
from collections import defaultdict

import torch

from lyre.engine.config import EngineConfig
from lyre.engine.constraint import TokenSlice
from lyre.engine.kv_cache import KVCache
from lyre.engine.llama import Llama
from lyre.engine.sampler import SamplingTensors, row_keys, sample
from lyre.engine.sequence import Request

__all__ = ["ModelRunner"]


class ModelRunner:
    """Runs the model over a step's requests and samples their next tokens.

    Per-slot state (sampling parameters, seeds, which ids each request has
    seen, how many tokens it has drawn) lives in tensors allocated once and
    written when a request is admitted, so a decode step allocates only the
    small index tensors of that step.
    """

    def __init__(self, model: Llama, config: EngineConfig) -> None:
        self.model = model
        self.config = config
        device = model.output_weight.device
        self.device = device
        vocab = model.config.vocab_size
        self.vocab_size = vocab
        n = config.max_batch
        self.cache = KVCache(model.config, n, config.max_seq_len, model.output_weight.dtype, device)
        self.seen = torch.zeros(n, vocab, dtype=torch.bool, device=device)  # repetition-penalty history
        self.temperature = torch.zeros(n, device=device)
        self.top_p = torch.ones(n, device=device)
        self.top_k = torch.zeros(n, dtype=torch.long, device=device)
        self.penalty = torch.ones(n, device=device)
        self.seeds = torch.zeros(n, dtype=torch.long, device=device)
        self.drawn = torch.zeros(n, dtype=torch.long, device=device)  # tokens drawn so far, per slot
        self.full_vocab = TokenSlice(0, vocab)
        self._slice_ids: dict[TokenSlice, torch.Tensor] = {}
        self.forward_seconds = 0.0  # time in model forward + output projection, cumulative

    # -- admission ---------------------------------------------------------
    def _claim(self, req: Request) -> None:
        slot = req.slot
        s = req.sampling
        self.temperature[slot] = s.temperature
        self.top_p[slot] = s.top_p
        self.top_k[slot] = s.top_k
        self.penalty[slot] = s.repetition_penalty
        self.seeds[slot] = req.seed
        self.drawn[slot] = 0
        self.seen[slot] = False
        self.seen[slot, torch.tensor(req.prompt_ids, device=self.device)] = True

    # -- forward passes ----------------------------------------------------
    @torch.inference_mode()
    def step(self, prefill: list[Request], decode: list[Request]) -> list[int]:
        """Next token for every request: ``prefill`` ones first, then ``decode`` ones."""
        reqs = prefill + decode
        slots = torch.tensor([r.slot for r in reqs], device=self.device)  # (B,), rows in ``reqs`` order
        hidden: list[torch.Tensor] = []
        if prefill:
            hidden.append(self._prefill(prefill, slots[: len(prefill)]))
        if decode:
            hidden.append(self._decode(decode, slots[len(prefill) :]))
        return self._sample(reqs, slots, torch.cat(hidden) if len(hidden) > 1 else hidden[0])

    def _prefill(self, reqs: list[Request], slots: torch.Tensor) -> torch.Tensor:
        """Whole prompts, right-padded into one forward -> last hidden state per request (B, H)."""
        for req in reqs:
            self._claim(req)
        lengths = [len(r.prompt_ids) for r in reqs]
        width = max(lengths)
        tokens = torch.zeros(len(reqs), width, dtype=torch.long)
        for i, r in enumerate(reqs):
            tokens[i, : lengths[i]] = torch.tensor(r.prompt_ids)
        # Padding continues each row's positions; those cache entries are
        # overwritten by later tokens before any query can see them.
        positions = torch.arange(width).expand(len(reqs), width)
        start = time.perf_counter()
        out = self.model(tokens.to(self.device), positions.to(self.device), slots, self.cache)
        self.forward_seconds += time.perf_counter() - start
        last = torch.tensor(lengths, device=self.device) - 1
        return out[torch.arange(len(reqs), device=self.device), last]

    def _decode(self, reqs: list[Request], slots: torch.Tensor) -> torch.Tensor:
        """One new token per running request in a single forward -> (B, H)."""
        tokens = torch.tensor([[r.output_ids[-1]] for r in reqs], device=self.device)
        positions = torch.tensor([[r.num_tokens - 1] for r in reqs], device=self.device)
        start = time.perf_counter()
        out = self.model(tokens, positions, slots, self.cache)
        self.forward_seconds += time.perf_counter() - start
        return out[:, 0]

    # -- sampling ----------------------------------------------------------
    def _sample(self, reqs: list[Request], all_slots: torch.Tensor, hidden: torch.Tensor) -> list[int]:
        """Group rows by their allowed slice; project and sample each group on that slice only."""
        groups: dict[TokenSlice, list[int]] = defaultdict(list)
        for row, req in enumerate(reqs):
            allowed = req.constraint.allowed(len(req.output_ids)) if req.constraint else self.full_vocab
            groups[allowed].append(row)
        tokens = torch.empty(len(reqs), dtype=torch.long, device=self.device)
        for allowed, rows in groups.items():
            ids = self._ids(allowed)
            row_index = torch.tensor(rows, device=self.device)
            slots, group_hidden = all_slots[row_index], hidden[row_index]
            start = time.perf_counter()
            logits = self.model.logits(group_hidden, allowed.start, allowed.stop)
            if allowed.extra:
                extra = group_hidden @ self.model.output_weight[ids[-len(allowed.extra):]].T
                logits = torch.cat((logits, extra.float()), dim=-1)
            self.forward_seconds += time.perf_counter() - start
            params = SamplingTensors(
                temperature=self.temperature[slots],
                top_p=self.top_p[slots],
                top_k=self.top_k[slots],
                repetition_penalty=self.penalty[slots],
                keys=row_keys(self.seeds[slots], self.drawn[slots]),
            )
            choice = sample(logits, self._seen(slots, allowed), params)
            tokens[row_index] = ids[choice]
        self.seen[all_slots, tokens] = True
        self.drawn[all_slots] += 1
        return tokens.tolist()  # the step's one device -> host sync

    def _seen(self, slots: torch.Tensor, allowed: TokenSlice) -> torch.Tensor:
        """(N, slice size) history mask of ``slots`` over the slice's ids."""
        seen = self.seen[slots, allowed.start : allowed.stop]
        if allowed.extra:
            seen = torch.cat((seen, self.seen[slots][:, list(allowed.extra)]), dim=-1)
        return seen

    def _ids(self, allowed: TokenSlice) -> torch.Tensor:
        """Token ids of a slice, in the column order of its logits; cached per slice."""
        ids = self._slice_ids.get(allowed)
        if ids is None:
            if allowed.stop > self.vocab_size or any(t >= self.vocab_size for t in allowed.extra):
                raise ValueError(f"constraint slice {allowed} exceeds the vocabulary ({self.vocab_size})")
            ids = torch.cat(
                (torch.arange(allowed.start, allowed.stop), torch.tensor(allowed.extra, dtype=torch.long))
            ).to(self.device)
            self._slice_ids[allowed] = ids
        return ids
