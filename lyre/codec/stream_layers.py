"""The layers of SNAC's decoder as steps of lyre.codec.streaming's plan, over time-major tensors (rows, time,
channels), each temporal one fed its kept inputs from a `LayerState` of per-slot state.

A step is called as ``step(decoder, rows' slots, x, fed, end, seeds, noisy)`` and returns the next x; the
streaming decoder builds its plan from these and keeps the lags and masks.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from snac.layers import ResidualUnit, Snake1d
from torch import nn

from lyre.codec.noise import SeededNoiseBlock, position_noise

__all__ = ["LayerState", "Step", "pointwise", "residual", "seeded_noise", "snake", "temporal", "transposed"]

# A plan step: (decoder, rows' slots, x (B, T, C), fed, end, seeds, noisy) -> x
Step = Callable[..., torch.Tensor]


class LayerState:
    """Per-slot state of one layer, shape (slots, keep, channels): the last ``keep`` steps it saw."""

    def __init__(self, slots: int, keep: int, channels: int, device: torch.device, dtype: torch.dtype) -> None:
        self.keep = keep
        self.state = torch.zeros(slots, keep, channels, device=device, dtype=dtype)

    def take(self, rows: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        """The rows' kept steps followed by ``x`` (B, T, C); the newest ``keep`` are kept."""
        full = torch.cat([self.state.index_select(0, rows), x], dim=1)  # (B, keep + T, C)
        self.state.index_copy_(0, rows, full[:, full.shape[1] - self.keep:])
        return full

    def reset(self, slot: int) -> None:
        self.state[slot].zero_()

    def grow(self, slots: int) -> None:
        more = self.state.new_zeros(slots - self.state.shape[0], *self.state.shape[1:])
        self.state = torch.cat([self.state, more])


# A plan step: (decoder, rows' slots, x (B, T, C), fed, end, seeds, noisy) -> x
Step = Callable[..., torch.Tensor]



def pointwise(conv: nn.Conv1d) -> Step:
    """A 1x1 convolution as one matrix multiply over every row's steps, its bias added in it."""
    weight = conv.weight[:, :, 0].t().contiguous()  # (C, C')
    bias = conv.bias

    def pointwise(s: object, i: torch.Tensor, x: torch.Tensor, *_: object) -> torch.Tensor:
        b, t, c = x.shape
        flat = x.reshape(b * t, c)
        y = flat @ weight if bias is None else torch.addmm(bias, flat, weight)
        return y.view(b, t, -1)
    return pointwise


def _depthwise(full: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, d: int) -> torch.Tensor:
    """A k-tap depthwise convolution dilated ``d`` of time-major ``full`` (B, T + (k - 1) d, C), no padding,
    ``weight`` (C, 1, 1, k) channels-last. Time-major is what a 2-D convolution calls channels-last (NHWC, H = 1),
    the layout oneDNN runs depthwise convolutions fastest in: 4-5 times the shifted multiply-adds on this CPU."""
    y = F.conv2d(full.transpose(1, 2).unsqueeze(2), weight, bias, dilation=(1, d), groups=full.shape[2])
    return y.squeeze(2).transpose(1, 2)  # (B, T, C), contiguous


def _depthwise_weight(conv: nn.Conv1d) -> torch.Tensor:
    return conv.weight.unsqueeze(2).contiguous(memory_format=torch.channels_last)  # (C, 1, 1, k)


def temporal(conv: nn.Conv1d, state: LayerState) -> Step:
    """A k-tap convolution fed the kept steps before the new ones: depthwise as shifted multiply-adds, any other
    as one matrix multiply per tap."""
    k, d = conv.kernel_size[0], conv.dilation[0]
    bias = conv.bias if conv.bias is not None else conv.weight.new_zeros(conv.out_channels)
    if conv.groups == conv.in_channels == conv.out_channels:
        taps = _depthwise_weight(conv)
        return lambda s, i, x, *_: _depthwise(state.take(i, x), taps, bias, d)
    if conv.groups != 1:
        raise ValueError(f"unexpected grouped convolution in SNAC's decoder: {conv}")
    weights = [conv.weight[:, :, tap].t().contiguous() for tap in range(k)]  # k of (C, C')

    def temporal(s: object, i: torch.Tensor, x: torch.Tensor, *_: object) -> torch.Tensor:
        full = state.take(i, x)
        t = x.shape[1]
        y = torch.matmul(full[:, :t], weights[0]) + bias
        for tap in range(1, k):
            y += torch.matmul(full[:, tap * d: tap * d + t], weights[tap])
        return y
    return temporal


def transposed(up: nn.ConvTranspose1d, tail: LayerState) -> Step:
    """A transposed convolution (kernel 2s, stride s) as one matrix multiply: each new step's 2s output taps,
    the first s added to the last s of the step before (kept per slot in ``tail``), the bias added in the
    multiply."""
    stride, c_out = up.stride[0], up.out_channels
    taps = up.weight.permute(0, 2, 1).reshape(up.in_channels, -1).contiguous()  # (C, 2s C'): tap-major
    bias = torch.cat([up.bias.repeat(stride), up.bias.new_zeros(stride * c_out)])  # on the first s taps only

    def transposed(s: object, i: torch.Tensor, x: torch.Tensor, *_: object) -> torch.Tensor:
        b, t, c = x.shape
        parts = torch.addmm(bias, x.reshape(b * t, c), taps).view(b, t, 2, stride * c_out)
        head, over = parts[:, :, 0], parts[:, :, 1]  # (B, T, s C'): each step's own taps, and its overlap
        y = head + torch.cat([tail.state.index_select(0, i), over[:, :-1]], dim=1)
        tail.state.index_copy_(0, i, over[:, -1:])
        return y.view(b, t * stride, c_out)
    return transposed


def seeded_noise(noise: SeededNoiseBlock, rate: int, lag: int) -> Step:
    """The seeded noise block: x + n * (x W), n keyed by each row's seed and absolute position (lyre.codec.noise)."""
    weight = noise.linear.weight[:, :, 0].t().contiguous()

    def seeded(s: object, i: torch.Tensor, x: torch.Tensor, fed: torch.Tensor, end: torch.Tensor,
               seeds: torch.Tensor, noisy: torch.Tensor | None) -> torch.Tensor:
        if noisy is None:
            return x
        b, t, c = x.shape
        positions = (fed * rate - lag)[:, None] + torch.arange(t, device=x.device)[None, :]
        n = position_noise(seeds, noise.index, positions.clamp(min=0)).to(x.dtype) * noisy[:, None]  # (B, T)
        return torch.addcmul(x, n[:, :, None], (x.reshape(b * t, c) @ weight).view(b, t, c))
    return seeded


def residual(unit: ResidualUnit, branch: LayerState, skip: LayerState) -> Step:
    """A residual unit: snake, the dilated depthwise convolution (fed its kept steps), snake, 1x1; plus its
    input delayed by the convolution's lookahead (kept in ``skip``)."""
    s1, c7, s2, c1 = unit.block
    first, second = snake(s1), snake(s2)
    d = c7.dilation[0]
    taps = _depthwise_weight(c7)
    weight = c1.weight[:, :, 0].t().contiguous()  # (C, C)

    def residual(s: object, i: torch.Tensor, x: torch.Tensor, *_: object) -> torch.Tensor:
        b, t, c = x.shape
        y = second(s, i, _depthwise(branch.take(i, first(s, i, x)), taps, c7.bias, d))
        out = skip.take(i, x)[:, :t] + c1.bias
        out.view(b * t, c).addmm_(y.view(b * t, c), weight)
        return out
    return residual


def snake(module: Snake1d) -> Step:
    """SNAC's Snake activation, x + sin(a x)^2 / a, with 1 / a computed once, over time-major x."""
    alpha = module.alpha[0, :, 0]  # (C,)
    inverse = (alpha + 1e-9).reciprocal()

    def snake(s: object, i: torch.Tensor, x: torch.Tensor, *_: object) -> torch.Tensor:
        wave = torch.mul(x, alpha).sin_()
        return torch.addcmul(x, inverse, wave.mul_(wave))
    return snake
