"""Projecting onto slices of the vocabulary: logits over only the ids a row may draw, and back from a sampled
column to its token id.

A constrained row never pays for the whole vocabulary. Eager decoding
projects each group of rows that share an allowed slice onto that slice;
the fixed-shape path projects every row onto its `SliceFamily`'s union once
and cuts each row's slice from it, with no host figure inside (capturable).
"""

from __future__ import annotations

import torch

from lyre.engine.constraint import SliceFamily, TokenSlice
from lyre.models.llama import Llama

__all__ = ["SliceProjection"]


class SliceProjection:
    """The model's output projection cut to slices, and each slice's token ids (cached on the device)."""

    def __init__(self, model: Llama, family: SliceFamily) -> None:
        self.model, self.family = model, family
        self.vocab_size = model.config.vocab_size
        self.device = model.output_weight.device
        self._slice_ids: dict[TokenSlice, torch.Tensor] = {}
        self._family_ids = torch.cat((torch.arange(family.lo, family.hi),
                                      torch.tensor(family.extras, dtype=torch.long))).to(self.device)

    def ids(self, allowed: TokenSlice) -> torch.Tensor:
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

    def logits(self, hidden: torch.Tensor, allowed: TokenSlice) -> torch.Tensor:
        """hidden (N, hidden) -> logits (N, slice size) over ``allowed``'s ids, in `ids`' order."""
        ids = self.ids(allowed)  # a slice past the vocabulary is refused before any projection
        logits = self.model.logits(hidden, allowed.start, allowed.stop)
        if allowed.extra:
            extra = hidden @ self.model.output_weight[ids[-len(allowed.extra):]].T
            logits = torch.cat((logits, extra.float()), dim=-1)
        return logits

    @staticmethod
    def history(seen: torch.Tensor, slots: torch.Tensor, allowed: TokenSlice) -> torch.Tensor:
        """(N, slice size) history mask of ``slots`` (rows of ``seen``, (slots, vocab)) over the slice's ids."""
        history = seen[slots, allowed.start : allowed.stop]
        if allowed.extra:
            history = torch.cat((history, seen[slots][:, list(allowed.extra)]), dim=-1)
        return history

    def family_logits(self, hidden: torch.Tensor, seen: torch.Tensor, slots: torch.Tensor, offsets: torch.Tensor,
                      flags: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Each row's slice of the family, cut from one projection onto its union -> logits and the history
        mask of ``slots`` (rows of ``seen``), both (rows, width + E). ``offsets`` (rows,): where each row's
        slice starts past the union's first id; ``flags`` (E, rows): 1 where a row may draw that extra id."""
        family = self.family
        union = self.model.logits(hidden, family.lo, family.hi)  # (rows, hi - lo)
        columns = offsets[:, None] + torch.arange(family.width, device=self.device)  # (rows, W)
        logits = [union.gather(1, columns)]
        history = [seen[slots, family.lo : family.hi].gather(1, columns)]
        if family.extras:
            extra_ids = self._family_ids[family.hi - family.lo :]  # (E,)
            ok = flags.T.bool()  # (rows, E)
            extra = (hidden @ self.model.output_weight[extra_ids].T).float()
            logits.append(extra.masked_fill(~ok, float("-inf")))
            history.append(seen[slots[:, None], extra_ids[None, :]])
        return torch.cat(logits, dim=-1), torch.cat(history, dim=-1)

    def family_ids(self, choice: torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
        """The token ids of the columns ``choice`` (rows,) sampled from `family_logits` at ``offsets``."""
        family = self.family
        in_slice = family.lo + offsets  # (rows,) first id of each row's slice
        if not family.extras:
            return in_slice + choice
        extra_ids = self._family_ids[family.hi - family.lo :]  # (E,)
        return torch.where(choice < family.width, in_slice + choice, extra_ids[(choice - family.width).clamp(min=0)])
