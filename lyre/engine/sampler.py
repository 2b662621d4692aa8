"""Batched sampling with per-row parameters and counter-based randomness.

Each draw's random number comes from hashing (request seed, token index)
rather than from a stateful generator. A row's draw therefore depends on
nothing else in the batch: a seeded request produces the same tokens alone or
beside any others, with no per-request generator and no Python loop.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

__all__ = ["SamplingTensors", "row_keys", "sample"]

_MASK32 = 0xFFFFFFFF
# Top-p usually keeps a few dozen tokens; when every row's nucleus fits in the
# top CANDIDATES logits, a partial top-k replaces a sort of the whole row.
CANDIDATES = 1024


def _mix32(x: torch.Tensor) -> torch.Tensor:
    """A 32-bit integer hash on int64 tensors holding values < 2**32.

    Both multipliers are below 2**31, so no product overflows int64.
    """
    x = x ^ (x >> 16)
    x = (x * 0x7FEB352D) & _MASK32
    x = x ^ (x >> 15)
    x = (x * 0x21F0AAAD) & _MASK32
    return x ^ (x >> 16)


def row_keys(seeds: torch.Tensor, steps: torch.Tensor) -> torch.Tensor:
    """One key per row from its 63-bit seed and the index of the token being drawn."""
    lo = seeds & _MASK32
    hi = (seeds >> 32) & _MASK32
    return _mix32(_mix32(lo ^ _mix32(hi)) ^ (steps & _MASK32))


def _uniform(keys: torch.Tensor) -> torch.Tensor:
    """keys (N,) -> uniforms in (0, 1), float32 (24 bits: exact, never 0 or 1)."""
    return ((_mix32(keys) >> 8).float() + 0.5) * (1.0 / (1 << 24))


@dataclass
class SamplingTensors:
    """Per-row sampling parameters, each of shape (N,)."""

    temperature: torch.Tensor  # float32; 0 means greedy
    top_p: torch.Tensor  # float32
    top_k: torch.Tensor  # int64; 0 means off
    repetition_penalty: torch.Tensor  # float32
    keys: torch.Tensor  # int64, from row_keys


def sample(logits: torch.Tensor, seen: torch.Tensor, p: SamplingTensors, exact: bool = False) -> torch.Tensor:
    """Pick one column per row.

    logits (N, V) float32, restricted to the allowed ids; seen (N, V) bool, the
    ids already in the request. Returns the chosen column per row (N,), int64.
    Order as in transformers: repetition penalty, temperature, top-k, top-p
    (the nucleus measured after top-k), then a draw from what is left.
    ``exact`` always sorts whole rows: no host wait (a GPU, a CUDA graph), and
    the same draws as the small-nucleus shortcut it skips.
    """
    penalty = p.repetition_penalty[:, None]
    logits = torch.where(seen, torch.where(logits > 0, logits / penalty, logits * penalty), logits)
    greedy = p.temperature == 0
    logits = logits / torch.where(greedy, 1.0, p.temperature)[:, None]

    ordered, order = logits.sort(dim=-1, descending=True, stable=True) if exact else _candidates(logits, p)
    ranks = torch.arange(ordered.shape[-1], device=logits.device)
    top_k_on = p.top_k > 0
    ordered = ordered.masked_fill(top_k_on[:, None] & (ranks[None, :] >= p.top_k[:, None]), float("-inf"))
    # Probabilities relative to the whole row, or to the top-k survivors when top-k is on.
    norm = torch.where(top_k_on, ordered.logsumexp(dim=-1), logits.logsumexp(dim=-1))
    probs = (ordered - norm[:, None]).exp()
    # Keep the smallest prefix whose mass reaches top_p; the top token always stays.
    outside_p = (probs.cumsum(dim=-1) - probs) >= p.top_p[:, None]
    probs = probs.masked_fill(outside_p, 0.0)
    kept = probs.cumsum(dim=-1)  # (N, C), flat after the nucleus
    target = _uniform(p.keys) * kept[:, -1]
    choice = torch.searchsorted(kept, target[:, None], right=True)
    # Rounding can put the target at the very top: fall back to the last kept token.
    last_kept = ((probs > 0).sum(dim=-1, keepdim=True) - 1).clamp_(min=0)
    choice = torch.minimum(choice, last_kept).masked_fill(greedy[:, None], 0)
    return order.gather(1, choice).squeeze(1)


def _candidates(logits: torch.Tensor, p: SamplingTensors) -> tuple[torch.Tensor, torch.Tensor]:
    """Logits sorted best first with their columns: all of them, or only the top
    CANDIDATES when that provably holds every row's nucleus."""
    width = logits.shape[-1]
    if width > 2 * CANDIDATES:
        values, columns = logits.topk(CANDIDATES, dim=-1)
        mass = (values - logits.logsumexp(dim=-1, keepdim=True)).exp().sum(dim=-1)
        fits = ((p.top_k > 0) & (p.top_k <= CANDIDATES)) | (mass >= p.top_p) | (p.temperature == 0)
        if bool(fits.all()):  # a host wait: the exact path avoids it
            # Order ties by column, exactly as the stable full sort below would,
            # so a row draws the same token whichever path its batch takes.
            columns, by_column = columns.sort(dim=-1)
            values, by_value = values.gather(1, by_column).sort(dim=-1, descending=True, stable=True)
            return values, columns.gather(1, by_value)
    return logits.sort(dim=-1, descending=True, stable=True)
