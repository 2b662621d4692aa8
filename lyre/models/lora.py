"""Batched multi-LoRA: one forward serves rows of the base model and of several adapters at once.

Every adapted projection computes, for all rows together,

    y = x W  +  select((x A_all) * scale, mask) B_all     (a row on no adapter: just x W)

where the resident adapters' A (in, r) and B (r, out) are stacked into
fixed-capacity buffers A_all (in, slots * R) and B_all (slots * R, out)
(stored as (slots, R, in) and (slots, R, out)),
ranks padded to the bank's rank R with zeros, and ``mask`` (rows, slots * R)
holds each row's adapter scale on its own block and zeros elsewhere. No
Python loop over adapters, no merged weight copies, and the shapes never
change, so a CUDA graph can replay it. The extra work is two matmuls of width
slots * R per projection: small beside the projection itself when slots * R is
small beside the hidden size. A step in which no row uses an adapter skips
them. An eager step (no graph to keep) groups its rows by adapter instead:
``(x[rows of s] A_s) B_s`` for every adapter s in use, as two batched matmuls
over padded groups and one indexed add, so it costs the rows on adapters
times R, not the rows times slots * R.

One adapter must never reach another row, even when its values do not stay
finite (NaN x 0 is NaN, so a mask multiplied in would carry them). So the
stacked form *selects* each row's own block (`torch.where`) rather than
multiplying the others by zero, and a row on no adapter keeps ``x W`` as it
is; the grouped form drops its padding the same way. What the stacked form
cannot select away is a non-finite B, which its one matmul sums over every
slot (isolating it would cost a (rows, slots, out) product per projection):
so the bank holds only finite weights. `prepare` refuses any that are not
finite in the bank's own dtype, and `empty` zeroes a slot.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import torch
from torch import nn

from lyre.models.peft_folder import LORA_TARGETS, AdapterError, AdapterWeights, all_finite

__all__ = ["LoraBank", "LoraLinear", "PreparedAdapter", "attach_lora"]


@dataclass(frozen=True)
class PreparedAdapter:
    """An adapter's weights in a bank's dtype, checked finite there: per projection A (r, in) and B^T (r, out)."""

    rank: int
    scale: float
    weights: dict[tuple[int, str], tuple[torch.Tensor, torch.Tensor]]


@dataclass(frozen=True)
class _Groups:
    """An eager forward's rows grouped by adapter: group i is bank slot ``slots[i]`` (all slots in order when
    None), ``size`` positions each; ``index`` is each position's row (padding points at row 0, and ``real`` is
    False there, so what padding computes is dropped, never added), ``weight`` the adapter's scale there."""

    index: torch.Tensor  # (groups * size,)
    weight: torch.Tensor  # (groups, size, 1, 1)
    real: torch.Tensor  # (groups * size, 1, 1) bool
    slots: torch.Tensor | None
    groups: int
    size: int


class LoraBank:
    """The resident adapters' weights, ``slots`` of rank ``rank``, for every adapted projection.

    Two ways to apply them, chosen per forward. The fixed-shape (graph) step
    uses the stacked form above with a row mask (`use`): its cost grows with
    the bank's capacity, but its shapes never change. An eager step groups
    its rows by adapter (`group`) and runs two batched matmuls over the
    groups: its cost grows with the rows on adapters, not with the slots.
    """

    def __init__(self, slots: int, rank: int, dtype: torch.dtype, device: torch.device) -> None:
        self.slots, self.rank = slots, rank
        self.a: dict[tuple[int, str], torch.Tensor] = {}  # (slots, rank, in): row-major A^T per slot
        self.b: dict[tuple[int, str], torch.Tensor] = {}  # (slots, rank, out)
        self._layers: dict[int, list[tuple[int, str]]] = {}  # decoder layer -> its adapted projections
        self.scales = torch.zeros(slots, dtype=torch.float32, device=device)
        self._host_scales = [0.0] * slots
        self.dtype, self.device = dtype, device
        self._mask: torch.Tensor | None = None  # (rows, slots * rank) for the forward in progress
        self._on: tuple[torch.Tensor, torch.Tensor] | None = None  # the mask's nonzeros; rows on an adapter
        self._groups: _Groups | None = None
        self._gathered: tuple[torch.Tensor, torch.Tensor] | None = None  # an input and its rows grouped

    def add_projection(self, key: tuple[int, str], fan_in: int, fan_out: int) -> None:
        self.a[key] = torch.zeros(self.slots, self.rank, fan_in, dtype=self.dtype, device=self.device)
        self.b[key] = torch.zeros(self.slots, self.rank, fan_out, dtype=self.dtype, device=self.device)
        self._layers.setdefault(key[0], []).append(key)

    @property
    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in (*self.a.values(), *self.b.values()))

    def prepare(self, adapter: AdapterWeights) -> PreparedAdapter:
        """``adapter`` in the bank's dtype and on its device, every weight that conversion changed checked
        finite there (the reader checked the rest): AdapterError naming the layer otherwise (NaN, or beyond
        float16's range). Touches no slot: any thread may run it."""
        if not math.isfinite(adapter.scale):
            raise AdapterError(f"{adapter.path}: its scale {adapter.scale} is not finite")
        converted = {}
        for key, (a_in, b_in) in adapter.weights.items():  # (r, in), (out, r)
            a, b = a_in.to(self.dtype), b_in.T.to(self.dtype)
            for half, tensor, read in (("lora_A", a, a_in), ("lora_B", b, b_in)):
                # Unconverted values are the reader's, checked there; a narrower dtype may overflow them.
                if tensor.dtype != read.dtype and not all_finite(tensor):
                    raise AdapterError(f"{adapter.path}: layer {key[0]} {key[1]} {half} is not finite as "
                                       f"{str(self.dtype).removeprefix('torch.')} (NaN, or beyond its range)")
            converted[key] = (a.to(self.device), b.to(self.device))
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)  # staged: what `fill` copies from is on the device
        return PreparedAdapter(adapter.rank, adapter.scale, converted)

    def fill(self, slot: int, adapter: PreparedAdapter) -> Iterator[None]:
        """Copy ``adapter`` into ``slot``, one decoder layer per iteration (zero-padding its rank; projections
        it leaves alone get zeros), its scale last. An engine runs one iteration between two of its steps, so
        no step waits for a whole adapter; the caller keeps every request off the slot until it is done."""
        r = adapter.rank
        for keys in self._layers.values():
            for key in keys:
                a_all, b_all = self.a[key], self.b[key]
                if key in adapter.weights:
                    a, b = adapter.weights[key]
                    a_all[slot, :r].copy_(a)
                    b_all[slot, :r].copy_(b)
                    a_all[slot, r:].zero_()  # the rank's padding up to the bank's
                    b_all[slot, r:].zero_()
                else:
                    a_all[slot].zero_()
                    b_all[slot].zero_()
            yield
        self.scales[slot] = adapter.scale
        self._host_scales[slot] = adapter.scale

    def empty(self, slot: int) -> Iterator[None]:
        """Zero ``slot``'s scale, then its weights one decoder layer per iteration (as `fill` goes): nothing
        of what it held reaches a later forward."""
        self.scales[slot] = 0.0
        self._host_scales[slot] = 0.0
        for keys in self._layers.values():
            for key in keys:
                self.a[key][slot].zero_()
                self.b[key][slot].zero_()
            yield

    def install(self, slot: int, adapter: AdapterWeights) -> None:
        """`prepare` and `fill` in one go: AdapterError, with the slot untouched, for weights not finite."""
        for _ in self.fill(slot, self.prepare(adapter)):
            pass

    def clear(self, slot: int) -> None:
        """`empty` in one go."""
        for _ in self.empty(slot):
            pass

    def row_mask(self, row_slots: torch.Tensor) -> torch.Tensor:
        """row_slots (rows,) int64, -1 for the base model -> mask (rows, slots * rank) float."""
        one_hot = (row_slots[:, None] == torch.arange(self.slots, device=row_slots.device)[None, :])
        per_slot = torch.where(one_hot, self.scales[None, :], 0.0)  # (rows, slots)
        return per_slot.repeat_interleave(self.rank, dim=1).to(self.dtype)

    def use(self, mask: torch.Tensor | None) -> None:
        """The next forward applies the stacked form with this row mask (None: no row uses an adapter)."""
        self._mask, self._groups, self._gathered = mask, None, None
        on = None if mask is None else mask != 0  # (rows, slots * rank): each row's own block
        self._on = None if on is None else (on, on.any(dim=1))  # and (rows,): the rows on an adapter

    def group(self, row_slots: Sequence[int]) -> None:
        """The next forward applies the grouped form to rows on these slots (-1: the base model)."""
        members: dict[int, list[int]] = {}
        for row, slot in enumerate(row_slots):
            if slot >= 0:
                members.setdefault(slot, []).append(row)
        self._mask, self._gathered = None, None
        if not members:
            self._groups = None
            return
        order = sorted(members)
        size = max(len(rows) for rows in members.values())
        index = [0] * (len(order) * size)
        weight = [0.0] * (len(order) * size)
        real = [False] * (len(order) * size)
        for i, slot in enumerate(order):
            for j, row in enumerate(members[slot]):
                index[i * size + j] = row
                weight[i * size + j] = self._host_scales[slot]
                real[i * size + j] = True
        every = order == list(range(self.slots))
        self._groups = _Groups(
            index=torch.tensor(index, device=self.device),
            weight=torch.tensor(weight, dtype=self.dtype, device=self.device).view(len(order), size, 1, 1),
            real=torch.tensor(real, device=self.device).view(-1, 1, 1),
            slots=None if every else torch.tensor(order, device=self.device), groups=len(order), size=size)

    def add_delta(self, key: tuple[int, str], x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """y = x W (rows, ..., out) plus the adapters' contribution for x (rows, ..., in)."""
        if key not in self.a:
            return y
        if self._mask is not None:
            assert self._on is not None
            on, row_on = self._on
            lora = x @ self.a[key].view(-1, x.shape[-1]).T  # (rows, ..., slots * rank)
            within = (on.shape[0], *([1] * (x.dim() - 2)), on.shape[1])
            lora = torch.where(on.view(within), lora * self._mask.view(within), 0)  # only each row's own block
            delta = lora @ self.b[key].view(-1, y.shape[-1])  # (rows, ..., out)
            return torch.where(row_on.view(-1, *([1] * (y.dim() - 1))), y + delta, y)  # base rows: x W as it is
        g = self._groups
        if g is None:
            return y
        a, b = self.a[key], self.b[key]
        if g.slots is not None:
            a, b = a.index_select(0, g.slots), b.index_select(0, g.slots)
        rows, fan_in, fan_out = x.shape[0], x.shape[-1], y.shape[-1]
        steps = x.numel() // (rows * fan_in)
        if self._gathered is not None and self._gathered[0] is x:  # q, k, v (and gate, up) share their input
            grouped = self._gathered[1]
        else:
            grouped = x.reshape(rows, steps, fan_in).index_select(0, g.index).view(g.groups, g.size * steps, fan_in)
            self._gathered = (x, grouped)
        lora = torch.bmm(grouped, a.transpose(1, 2)).view(g.groups, g.size, steps, -1) * g.weight
        out = torch.bmm(lora.view(g.groups, g.size * steps, -1), b).view(g.groups * g.size, steps, fan_out)
        out = torch.where(g.real, out, 0)  # padding computed on row 0's input: dropped, not added to row 0
        return y.view(rows, steps, fan_out).index_add_(0, g.index, out).view(y.shape)  # y is fresh: in place


class LoraLinear(nn.Module):
    """A projection plus the bank's adapters: ``base(x) + bank.delta(x)``."""

    def __init__(self, base: nn.Module, bank: LoraBank, key: tuple[int, str]) -> None:
        super().__init__()
        self.base, self.key = base, key
        self._bank = [bank]  # a list: not a submodule, so the bank is not saved with every layer

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self._bank[0].add_delta(self.key, x, self.base(x))


def attach_lora(model: nn.Module, bank: LoraBank) -> None:
    """Wrap every adaptable projection of a `Llama` (plain or FP8) with the bank, in place."""
    for index, layer in enumerate(model.model.layers):
        for name, place in LORA_TARGETS.items():
            parent = getattr(layer, place)
            base = getattr(parent, name)
            bank.add_projection((index, name), base.in_features, base.out_features)
            setattr(parent, name, LoraLinear(base, bank, (index, name)))
