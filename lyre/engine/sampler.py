"""Batched sampling with per-row parameters and counter-based randomness.

Randomness comes from hashing (request seed, token index, token id) rather
than from a stateful generator. A row's noise therefore depends on nothing
else in the batch, so a seeded request produces the same tokens alone or
beside any others, and no per-request generator or Python loop is needed.
Sampling uses the Gumbel-max trick: argmax(logits + Gumbel noise) draws from
softmax(logits) exactly.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

__all__ = ["SamplingTensors", "hash_ids", "row_keys", "sample"]

_MASK32 = 0xFFFFFFFF
_GOLDEN = 0x9E3779B9


def _mix32(x: torch.Tensor) -> torch.Tensor:
    """A 32-bit integer hash on int64 tensors holding values < 2**32.

    Both multipliers are below 2**31, so no product overflows int64.
    """
    x = x ^ (x >> 16)
    x = (x * 0x7FEB352D) & _MASK32
    x = x ^ (x >> 15)
    x = (x * 0x21F0AAAD) & _MASK32
    return x ^ (x >> 16)


def hash_ids(ids: torch.Tensor) -> torch.Tensor:
    """Per-token-id hashes (int64), computed once for the whole vocabulary."""
    return _mix32((ids.long() + _GOLDEN) & _MASK32)


def row_keys(seeds: torch.Tensor, steps: torch.Tensor) -> torch.Tensor:
    """One key per row from its 63-bit seed and the index of the token being drawn."""
    lo = seeds & _MASK32
    hi = (seeds >> 32) & _MASK32
    return _mix32(_mix32(lo ^ _mix32(hi)) ^ (steps & _MASK32))


def _gumbel(keys: torch.Tensor, id_hashes: torch.Tensor) -> torch.Tensor:
    """keys (N,), id_hashes (N, V) -> Gumbel(0, 1) noise (N, V), float32."""
    x = _mix32(keys[:, None] ^ id_hashes)
    u = ((x >> 8).float() + 0.5) * (1.0 / (1 << 24))  # 24 bits: exact in float32, never 0 or 1
    return -torch.log(-torch.log(u))


@dataclass
class SamplingTensors:
    """Per-row sampling parameters, each of shape (N,)."""

    temperature: torch.Tensor  # float32; 0 means greedy
    top_p: torch.Tensor  # float32
    top_k: torch.Tensor  # int64; 0 means off
    repetition_penalty: torch.Tensor  # float32
    keys: torch.Tensor  # int64, from row_keys


def sample(logits: torch.Tensor, seen: torch.Tensor, id_hashes: torch.Tensor, p: SamplingTensors) -> torch.Tensor:
    """Pick one column per row.

    logits (N, V) float32, restricted to the allowed ids; seen (N, V) bool, the
    ids already in the request; id_hashes (V,) for those same ids. Returns the
    chosen column index per row (N,), int64. Order as in transformers:
    repetition penalty, temperature, top-k, top-p.
    """
    penalty = p.repetition_penalty[:, None]
    logits = torch.where(seen, torch.where(logits > 0, logits / penalty, logits * penalty), logits)
    greedy = p.temperature == 0
    logits = logits / torch.where(greedy, 1.0, p.temperature)[:, None]

    ordered, order = logits.sort(dim=-1, descending=True, stable=True)  # (N, V)
    ranks = torch.arange(ordered.shape[-1], device=logits.device)
    outside_k = (p.top_k[:, None] > 0) & (ranks[None, :] >= p.top_k[:, None])
    ordered = ordered.masked_fill(outside_k, float("-inf"))
    probs = ordered.softmax(dim=-1)
    # Keep the smallest prefix whose mass reaches top_p; the top token always stays.
    outside_p = (probs.cumsum(dim=-1) - probs) >= p.top_p[:, None]
    ordered = ordered.masked_fill(outside_p, float("-inf"))

    noise = _gumbel(p.keys, id_hashes[order])
    noise = noise.masked_fill(greedy[:, None], 0.0)
    choice = (ordered + noise).argmax(dim=-1, keepdim=True)  # (N, 1) in sorted order
    return order.gather(1, choice).squeeze(1)
