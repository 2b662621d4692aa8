"""SNAC 24 kHz decoded as a stream: each frame once, its audio equal to the whole utterance's decode.

    stream = StreamingSnac(model, slots=16)
    a = stream.open(seed=7)                          # a slot: the stream's state, all zeros
    pcm = stream.push([(a, frames)])[0]              # float32 samples as far as the lookahead allows
    pcm = stream.finish([a])[0]                      # the rest; the slot is free again
    stream.close(a)                                  # or drop a stream (cancelled, failed) at any time

SNAC's decoder is centred convolutions: a sample depends on 4,757 samples
(2.3 frames) after it. Here every temporal layer keeps, per stream, the
inputs it still needs (a k-tap convolution its last ``(k - 1) d`` inputs,
a transposed convolution its last input step, a residual unit its input for
the branch's delay), so a call feeds only the new frames and each layer gives
out exactly as many new samples as came in, late by its own lookahead. Zero
padding is reproduced exactly: a layer's output at a position outside the
utterance (before its start, or past its end once the end is known) is set to
zero before the next layer reads it, as the whole decode's padding would
have it. The noise is `lyre.codec.noise`'s, keyed by the absolute position,
so a stream decodes to the whole decode of its codes and seed, for any split
of its frames into calls and whatever streams share a call.

Streams in one call are rows of one batch, each at its own position; a call
feeds every row the same number of frames (group them first). A stream holds
its slot until `finish` (its end, fed with the lookahead's worth of silence
that the whole decode's padding is) or `close`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from snac import SNAC
from snac.layers import DecoderBlock, ResidualUnit, Snake1d
from torch import nn

from lyre.codec.noise import SeededNoiseBlock, install_seeded_noise, position_noise
from lyre.orpheus import codes_to_snac_levels

__all__ = ["StreamingSnac"]

_STEPS_PER_FRAME = 4  # latent steps of one 7-code frame (SNAC's finest level: 4 codes a frame)


@dataclass
class _Row:
    """One stream's place: latent steps fed so far, and its length once known."""

    seed: int | None
    fed: int = 0  # latent steps
    end: int | None = None  # the utterance's latent steps, once it has ended


class _Layer:
    """A temporal layer with per-slot state: its kept inputs, shape (slots, channels, keep)."""

    def __init__(self, slots: int, channels: int, keep: int, device: torch.device, dtype: torch.dtype) -> None:
        self.keep = keep
        self.state = torch.zeros(slots, channels, keep, device=device, dtype=dtype)

    def take(self, rows: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        """The rows' kept inputs followed by ``x`` (B, C, T); what is kept is updated."""
        full = torch.cat([self.state.index_select(0, rows), x], dim=-1)  # (B, C, keep + T)
        self.state.index_copy_(0, rows, full[..., full.shape[-1] - self.keep:])
        return full

    def reset(self, slot: int) -> None:
        self.state[slot].zero_()


class StreamingSnac:
    """SNAC's decoder run as a stream per slot; see the module docstring."""

    def __init__(self, model: SNAC, slots: int) -> None:
        install_seeded_noise(model)  # the same noise blocks as the window decoder's (shares its state dict)
        self.model = model
        p = next(model.parameters())
        self.device, self.dtype = p.device, p.dtype
        self.slots = slots
        self._rows: dict[int, _Row] = {}
        self._clear = False  # this call's rows have nothing outside their utterances to mask
        self._free = list(range(slots - 1, -1, -1))
        self._plan = self._build(model.decoder.model)
        self.lookahead = sum(lag * rate for lag, rate in self._lag_rates)  # output samples: 4,757 for SNAC 24 kHz
        self._flush_steps = -(-self.lookahead // self._rate)  # latent steps of silence that bring it all out

    # -- streams --

    def open(self, seed: int | None = 0) -> int:
        """A slot for a new stream (noise keyed by ``seed``; None: no noise). RuntimeError when all are taken."""
        if not self._free:
            raise RuntimeError(f"all {self.slots} streaming codec slots are in use")
        slot = self._free.pop()
        for layer in self._layers:
            layer.reset(slot)
        self._rows[slot] = _Row(seed)
        return slot

    def close(self, slot: int) -> None:
        """Free ``slot`` (its stream ended, was cancelled or failed); a slot not open is left alone."""
        if self._rows.pop(slot, None) is not None:
            self._free.append(slot)

    @property
    def open_slots(self) -> int:
        return len(self._rows)

    @torch.inference_mode()
    def push(self, feeds: Sequence[tuple[int, Sequence[Sequence[int]]]]) -> list[np.ndarray]:
        """The next frames of each (slot, frames) in one batch (every row the same number of frames): the
        audio each row's lookahead now lets out, float32."""
        if not feeds:
            return []
        n = len(feeds[0][1])
        if n == 0 or any(len(frames) != n for _, frames in feeds):
            raise ValueError(f"every row of a call takes the same number of frames (>= 1), got "
                             f"{[len(frames) for _, frames in feeds]}")
        slots = [slot for slot, _ in feeds]
        for slot in slots:
            if slot not in self._rows or self._rows[slot].end is not None:
                raise ValueError(f"slot {slot} is not an open stream")
        z = self._latent([codes_to_snac_levels(frames) for _, frames in feeds])  # (B, D, 4n)
        return self._run(slots, z)

    @torch.inference_mode()
    def finish(self, slots: Sequence[int]) -> list[np.ndarray]:
        """End each stream: the audio still held back, up to its last frame; its slot is free again."""
        if not slots:
            return []
        for slot in slots:
            row = self._rows.get(slot)
            if row is None or row.end is not None:
                raise ValueError(f"slot {slot} is not an open stream")
            row.end = row.fed
        z = torch.zeros(len(slots), self._latent_dim, self._flush_steps, device=self.device, dtype=self.dtype)
        out = self._run(list(slots), z)
        for slot in slots:
            self.close(slot)
        return out

    # -- the decoder, layer by layer --

    def _run(self, slots: list[int], z: torch.Tensor) -> list[np.ndarray]:
        rows = [self._rows[s] for s in slots]
        index = torch.tensor(slots, device=self.device)
        fed = torch.tensor([r.fed for r in rows], device=self.device)  # (B,) latent steps before this call
        end = torch.tensor([r.end if r.end is not None else 2**40 for r in rows], device=self.device)  # (B,)
        seeds = torch.tensor([r.seed or 0 for r in rows], device=self.device)
        noisy = torch.tensor([r.seed is not None for r in rows], device=self.device)
        # Every row far enough in (its lookahead past the start) and not ending: no layer's output is outside
        # its utterance, so the masks have nothing to do.
        self._clear = all(r.end is None and r.fed * self._rate >= self.lookahead for r in rows)
        x = z if self._clear else z * self._inside(fed, end, z.shape[-1], 1, 0)
        for step in self._plan:
            x = step(self, index, x, fed, end, seeds, noisy)
        n = z.shape[-1]
        for r in rows:
            r.fed += n
        audio = x[:, 0].float().cpu().numpy()  # (B, 512 n): positions [512 fed - lookahead, ...)
        out = []
        for row, samples, start in zip(rows, audio, (512 * (r.fed - n) - self.lookahead for r in rows)):
            lo = max(0, -start)
            hi = samples.shape[0] if row.end is None else max(lo, min(samples.shape[0], self._rate * row.end - start))
            out.append(samples[lo:hi].copy())
        return out

    def _inside(self, fed: torch.Tensor, end: torch.Tensor, length: int, rate: int, lag: int) -> torch.Tensor:
        """(B, 1, length) 1.0 where a layer's output (``rate`` samples a latent step, ``lag`` late) is inside
        its utterance, 0.0 where the whole decode's padding is."""
        positions = (fed * rate - lag)[:, None] + torch.arange(length, device=self.device)[None, :]  # (B, T)
        return ((positions >= 0) & (positions < (end * rate)[:, None])).to(self.dtype)[:, None, :]

    def _latent(self, levels: list[tuple[list[int], list[int], list[int]]]) -> torch.Tensor:
        """Codes of n frames per row -> SNAC's latent (B, D, 4n), as its quantizer's ``from_codes``."""
        codes = [torch.tensor([lv[i] for lv in levels], dtype=torch.long, device=self.device) for i in range(3)]
        return self.model.quantizer.from_codes(codes).to(self.dtype)

    def _build(self, layers: nn.Sequential) -> list:  # type: ignore[type-arg]
        """The decoder as steps over (rows, x); each temporal one with its state and its lag."""
        device, dtype, slots = self.device, self.dtype, self.slots
        self._layers: list[_Layer] = []
        self._lag_rates: list[tuple[int, int]] = []  # (lag at a layer's rate, output samples per sample there)
        upsampling = 1
        for module in layers:
            if isinstance(module, DecoderBlock):
                upsampling *= module.block[1].stride[0]
        self._rate = upsampling  # output samples per latent step: 512
        self._latent_dim = layers[0].in_channels
        plan: list = []  # type: ignore[type-arg]
        rate, lag = 1, 0  # of the current x: samples per latent step, and how late (at its rate)

        def conv(module: nn.Conv1d) -> None:
            nonlocal lag
            d, k = module.dilation[0], module.kernel_size[0]
            if k == 1:
                plan.append(lambda s, i, x, *_: _pointwise(x, module))
                return
            layer = _Layer(slots, module.in_channels, (k - 1) * d, device, dtype)
            self._layers.append(layer)
            plan.append(lambda s, i, x, *_: F.conv1d(layer.take(i, x), module.weight, module.bias, dilation=d,
                                                     groups=module.groups))
            lag += (k - 1) * d // 2
            self._lag_rates.append(((k - 1) * d // 2, upsampling // rate))

        def mask() -> None:
            r, g = rate, lag
            plan.append(lambda s, i, x, fed, end, *_: x if s._clear else x * s._inside(fed, end, x.shape[-1], r, g))

        for module in layers:
            if isinstance(module, nn.Conv1d):
                conv(module)
                if module.kernel_size[0] == 1:
                    mask()
            elif isinstance(module, Snake1d):
                plan.append(_snake(module))
            elif isinstance(module, nn.Tanh):
                plan.append(lambda s, i, x, *_: torch.tanh(x))
            elif isinstance(module, DecoderBlock):
                snake, up, noise, *units = module.block
                plan.append(_snake(snake))
                stride = up.stride[0]
                state = _Layer(slots, up.in_channels, 1, device, dtype)
                self._layers.append(state)
                pad = up.padding[0]

                # (Cin, Cout * 2s): each input step's 2s output taps as one matrix multiply, then overlap-add
                # (torch's CPU conv_transpose1d is several times slower on the few steps a call brings).
                taps = up.weight.reshape(up.in_channels, -1)

                def transposed(s: StreamingSnac, i: torch.Tensor, x: torch.Tensor, *_: object, up: nn.Module = up,
                               state: _Layer = state, stride: int = stride, taps: torch.Tensor = taps) -> torch.Tensor:
                    full = state.take(i, x)  # (B, Cin, T + 1): the step before, then the new ones
                    b, _, t = full.shape
                    parts = (full.transpose(1, 2) @ taps).view(b, t, -1, 2 * stride)  # (B, T + 1, Cout, 2s)
                    y = parts[:, 1:, :, :stride] + parts[:, :-1, :, stride:]  # (B, T, Cout, s)
                    return y.permute(0, 2, 1, 3).reshape(b, -1, (t - 1) * stride) + up.bias[None, :, None]
                plan.append(transposed)
                rate, lag = rate * stride, lag * stride + pad
                self._lag_rates.append((pad, upsampling // rate))
                mask()
                assert isinstance(noise, SeededNoiseBlock)
                r, g = rate, lag

                def seeded(s: StreamingSnac, i: torch.Tensor, x: torch.Tensor, fed: torch.Tensor, end: torch.Tensor,
                           seeds: torch.Tensor, noisy: torch.Tensor, noise: SeededNoiseBlock = noise, r: int = r,
                           g: int = g) -> torch.Tensor:
                    positions = ((fed * r - g)[:, None] + torch.arange(x.shape[-1], device=x.device)[None, :])
                    n = position_noise(seeds, noise.index, positions.clamp(min=0))[:, None, :].to(x.dtype)
                    return torch.where(noisy[:, None, None], x + n * _pointwise(x, noise.linear), x)
                plan.append(seeded)
                for unit in units:
                    assert isinstance(unit, ResidualUnit)
                    s1, c7, s2, c1 = unit.block
                    s1, s2 = _snake(s1), _snake(s2)
                    d = c7.dilation[0]
                    branch = _Layer(slots, c7.in_channels, 6 * d, device, dtype)
                    skip = _Layer(slots, c7.in_channels, 3 * d, device, dtype)
                    self._layers += [branch, skip]

                    def residual(s: StreamingSnac, i: torch.Tensor, x: torch.Tensor, *_: object, s1: Any = s1,
                                 c7: nn.Conv1d = c7, s2: Any = s2, c1: nn.Conv1d = c1, branch: _Layer = branch,
                                 skip: _Layer = skip, d: int = d) -> torch.Tensor:
                        y = _dilated(branch.take(i, s1(s, i, x)), c7, d)
                        y = _pointwise(s2(s, i, y), c1)
                        return skip.take(i, x)[..., : x.shape[-1]] + y
                    plan.append(residual)
                    lag += 3 * d
                    self._lag_rates.append((3 * d, upsampling // rate))
                    mask()
            else:
                raise ValueError(f"unexpected layer in SNAC's decoder: {type(module).__name__}")
        return plan


def _dilated(x: torch.Tensor, conv: nn.Conv1d, d: int) -> torch.Tensor:
    """``conv`` (a k-tap convolution dilated ``d``, no padding) of x (B, C, T + (k - 1) d) -> (B, C', T). A
    depthwise one (SNAC's residual units) is k shifted multiply-adds: on the CPU, torch's grouped convolution
    takes a slow path several times longer on these lengths."""
    k = conv.kernel_size[0]
    t = x.shape[-1] - (k - 1) * d
    if conv.groups != conv.in_channels or conv.in_channels != conv.out_channels:
        return F.conv1d(x, conv.weight, conv.bias, dilation=d, groups=conv.groups)
    w = conv.weight[:, 0, :, None]  # (C, k, 1)
    y = torch.addcmul(conv.bias[:, None], w[:, 0], x[..., :t])
    for tap in range(1, k):
        y = torch.addcmul(y, w[:, tap], x[..., tap * d: tap * d + t])
    return y


def _pointwise(x: torch.Tensor, conv: nn.Conv1d) -> torch.Tensor:
    """A 1x1 convolution of x (B, C, T) as one matrix multiply (the CPU's 1x1 convolution is slower)."""
    y = torch.matmul(conv.weight[:, :, 0], x)  # (B, C', T)
    return y if conv.bias is None else y + conv.bias[:, None]


def _snake(module: Snake1d) -> Any:
    """SNAC's Snake activation, x + sin(a x)^2 / a, as a plan step with 1 / a computed once."""
    alpha = module.alpha  # (1, C, 1)
    inverse = (alpha + 1e-9).reciprocal()

    def snake(s: StreamingSnac, i: torch.Tensor, x: torch.Tensor, *_: object) -> torch.Tensor:
        wave = torch.sin(alpha * x)
        return torch.addcmul(x, inverse, wave * wave)
    return snake
