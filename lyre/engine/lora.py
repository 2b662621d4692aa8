"""Batched multi-LoRA: one forward serves rows of the base model and of several adapters at once.

Every adapted projection computes, for all rows together,

    y = x W  +  ((x A_all) * mask) B_all

where the resident adapters' A (in, r) and B (r, out) are stacked into
fixed-capacity buffers A_all (in, slots * R) and B_all (slots * R, out),
ranks padded to the bank's rank R with zeros, and ``mask`` (rows, slots * R)
holds each row's adapter scale on its own block and zeros elsewhere (a base
row is all zeros). No Python loop over adapters, no merged weight copies, and
the shapes never change, so a CUDA graph can replay it. The extra work is two
matmuls of width slots * R per projection: small beside the projection itself
when slots * R is small beside the hidden size. A step in which no row uses
an adapter skips them (`LoraBank.use(None)`).
"""

from __future__ import annotations

import torch
from torch import nn

from lyre.engine.peft_folder import LORA_TARGETS, AdapterWeights

__all__ = ["LoraBank", "LoraLinear", "attach_lora"]


class LoraBank:
    """The resident adapters' weights, ``slots`` of rank ``rank``, for every adapted projection."""

    def __init__(self, slots: int, rank: int, dtype: torch.dtype, device: torch.device) -> None:
        self.slots, self.rank = slots, rank
        self.a: dict[tuple[int, str], torch.Tensor] = {}  # (in, slots * rank)
        self.b: dict[tuple[int, str], torch.Tensor] = {}  # (slots * rank, out)
        self.scales = torch.zeros(slots, dtype=torch.float32, device=device)
        self.dtype, self.device = dtype, device
        self._mask: torch.Tensor | None = None  # (rows, slots * rank) for the forward in progress

    def add_projection(self, key: tuple[int, str], fan_in: int, fan_out: int) -> None:
        width = self.slots * self.rank
        self.a[key] = torch.zeros(fan_in, width, dtype=self.dtype, device=self.device)
        self.b[key] = torch.zeros(width, fan_out, dtype=self.dtype, device=self.device)

    @property
    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in (*self.a.values(), *self.b.values()))

    def install(self, slot: int, adapter: AdapterWeights) -> None:
        """Copy ``adapter`` into ``slot`` (zero-padding its rank); projections it leaves alone get zeros."""
        block = slice(slot * self.rank, (slot + 1) * self.rank)
        r = adapter.rank
        for key, a_all in self.a.items():
            b_all = self.b[key]
            a_all[:, block] = 0
            b_all[block] = 0
            if key in adapter.weights:
                a, b = adapter.weights[key]  # (r, in), (out, r)
                a_all[:, block.start : block.start + r] = a.T.to(self.dtype)
                b_all[block.start : block.start + r] = b.T.to(self.dtype)
        self.scales[slot] = adapter.scale

    def clear(self, slot: int) -> None:
        self.scales[slot] = 0.0

    def row_mask(self, row_slots: torch.Tensor) -> torch.Tensor:
        """row_slots (rows,) int64, -1 for the base model -> mask (rows, slots * rank) float."""
        one_hot = (row_slots[:, None] == torch.arange(self.slots, device=row_slots.device)[None, :])
        per_slot = one_hot.to(self.scales.dtype) * self.scales[None, :]  # (rows, slots)
        return per_slot.repeat_interleave(self.rank, dim=1).to(self.dtype)

    def use(self, mask: torch.Tensor | None) -> None:
        """The next forward's row mask (None: no row uses an adapter; the LoRA matmuls are skipped)."""
        self._mask = mask

    def delta(self, key: tuple[int, str], x: torch.Tensor) -> torch.Tensor | None:
        """x (rows, ..., in) -> the adapters' contribution (rows, ..., out), or None."""
        mask = self._mask
        if mask is None or key not in self.a:
            return None
        lora = x @ self.a[key]  # (rows, ..., slots * rank)
        lora = lora * mask.view(mask.shape[0], *([1] * (x.dim() - 2)), mask.shape[1])
        return lora @ self.b[key]


class LoraLinear(nn.Module):
    """A projection plus the bank's adapters: ``base(x) + bank.delta(x)``."""

    def __init__(self, base: nn.Module, bank: LoraBank, key: tuple[int, str]) -> None:
        super().__init__()
        self.base, self.key = base, key
        self._bank = [bank]  # a list: not a submodule, so the bank is not saved with every layer

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.base(x)
        delta = self._bank[0].delta(self.key, x)
        return y if delta is None else y + delta


def attach_lora(model: nn.Module, bank: LoraBank) -> None:
    """Wrap every adaptable projection of a `Llama` (plain or FP8) with the bank, in place."""
    for index, layer in enumerate(model.model.layers):
        for name, place in LORA_TARGETS.items():
            parent = getattr(layer, place)
            base = getattr(parent, name)
            bank.add_projection((index, name), base.in_features, base.out_features)
            setattr(parent, name, LoraLinear(base, bank, (index, name)))
