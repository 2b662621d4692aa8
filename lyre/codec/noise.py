"""Seeded, position-keyed noise for SNAC's decoder.

SNAC's decoder adds ``randn(B, 1, T) * linear(x)`` in each of its four
NoiseBlocks. Drawn from torch's global generator, that noise depends on the
batch a request shares and on where a frame sits in its decode window, so the
same frames decode to different audio each time. Here the standard normal for
batch row ``b`` at time step ``t`` is instead a pure function of

    (row seed, noise-block index, absolute time index at that block's resolution)

computed by a counter-based integer hash, with no generator state. A frame
then gets the same noise whichever window, batch or process decodes it, and
tests can compare audio bit for bit.
"""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass, field

import torch
from snac.layers import NoiseBlock
from torch import nn

__all__ = ["NOISE_BLOCKS", "NoiseControl", "SeededNoiseBlock", "install_seeded_noise", "position_noise"]

# SNAC 24 kHz has one NoiseBlock per decoder block (decoder_rates [8, 8, 4, 2]).
NOISE_BLOCKS = 4

_MASK32 = 0xFFFFFFFF
# Salts that split one position key into the two uniforms Box-Muller needs.
_LANE_RADIUS = 0x68E31DA4
_LANE_ANGLE = 0xB5297A4D
_INV_2_24 = 1.0 / (1 << 24)


def _hash32(x: torch.Tensor) -> torch.Tensor:
    """A bijective 32-bit integer hash, on int64 tensors holding values < 2**32.

    Three xorshift-multiply rounds; every multiplier is below 2**31, so a
    product stays below 2**63 and int64 never overflows.
    """
    x = x ^ (x >> 17)
    x = (x * 0x6D2B79F5) & _MASK32
    x = x ^ (x >> 11)
    x = (x * 0x2C1B3C6D) & _MASK32
    x = x ^ (x >> 15)
    x = (x * 0x297A2D39) & _MASK32
    return x ^ (x >> 14)


def _split_hash(x: torch.Tensor) -> torch.Tensor:
    """Hash a non-negative int64 tensor of any size (all 63 bits) to 32 bits."""
    return _hash32((x & _MASK32) ^ _hash32((x >> 32) & _MASK32))


def _uniform(bits: torch.Tensor) -> torch.Tensor:
    """32-bit hashes -> float32 uniforms in (0, 1): 24 bits, exact, never 0 or 1."""
    return ((bits >> 8).to(torch.float32) + 0.5) * _INV_2_24


def position_noise(seeds: torch.Tensor, block: int, positions: torch.Tensor) -> torch.Tensor:
    """Standard normals keyed by (seed, block, absolute position).

    seeds: (B,) int64, non-negative. positions: (B, T) int64, non-negative
    absolute time indices at ``block``'s resolution. Returns (B, T) float32.
    """
    if not 0 <= block < NOISE_BLOCKS:
        raise ValueError(f"block must be in [0, {NOISE_BLOCKS}), got {block}")
    row = _hash32(_split_hash(seeds) ^ block)  # (B,)
    key = _hash32(row[:, None] ^ _split_hash(positions))  # (B, T)
    u_radius = _uniform(_hash32(key ^ _LANE_RADIUS))
    u_angle = _uniform(_hash32(key ^ _LANE_ANGLE))
    # Box-Muller: u_radius > 0, so the log is finite (|z| < 6 at 24 bits).
    return torch.sqrt(-2.0 * torch.log(u_radius)) * torch.cos((2.0 * math.pi) * u_angle)


@dataclass
class NoiseControl:
    """What the next decoder forward uses; shared by one model's noise blocks.

    Set by the decode call right before the forward; whoever sets it holds
    ``lock`` until the forward is done, since the settings live on the model.
    With ``enabled`` None every block is the identity.
    """

    seeds: torch.Tensor | None = None  # (B,) int64
    start_frames: torch.Tensor | None = None  # (B,) int64, utterance frame index of each row's frame 0
    enabled: torch.Tensor | None = None  # (B,) bool; rows whose seed is None are False
    n_frames: int = 0  # frames per window; each block's length is a multiple of it
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def set(self, seeds: torch.Tensor, start_frames: torch.Tensor, enabled: torch.Tensor, n_frames: int) -> None:
        """Noise on for the rows marked in ``enabled`` (all (B,), on the model's device)."""
        self.seeds, self.start_frames, self.enabled, self.n_frames = seeds, start_frames, enabled, n_frames

    def clear(self) -> None:
        """Noise off for every row (the state between decodes)."""
        self.seeds = self.start_frames = self.enabled = None
        self.n_frames = 0


class SeededNoiseBlock(nn.Module):
    """SNAC's NoiseBlock with its randomness taken from `position_noise`.

    Holds the original block's ``linear`` module (same weights, same state
    dict key), so ``x + noise * linear(x)`` is computed as before.
    """

    def __init__(self, linear: nn.Module, index: int, control: NoiseControl) -> None:
        super().__init__()
        self.linear = linear
        self.index = index
        self.control = control

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # x: (B, C, T)
        c = self.control
        if c.enabled is None:
            return x
        assert c.seeds is not None and c.start_frames is not None
        length = x.shape[-1]
        per_frame = length // c.n_frames  # 32, 256, 1024, 2048 steps per frame in SNAC 24 kHz
        t = torch.arange(length, device=x.device)
        positions = c.start_frames[:, None] * per_frame + t[None, :]  # (B, T)
        noise = position_noise(c.seeds, self.index, positions)[:, None, :].to(x.dtype)  # (B, 1, T)
        noisy = x + noise * self.linear(x)
        # Rows without a seed pass through untouched, not as x + 0 * h (nan if h is inf).
        return torch.where(c.enabled[:, None, None], noisy, x)


def install_seeded_noise(model: nn.Module) -> NoiseControl:
    """Replace every SNAC NoiseBlock in ``model`` with a `SeededNoiseBlock`.

    Blocks are numbered 0..3 in forward order. Returns the control object the
    decode call sets; until it is set, noise is off. On a model already
    converted it returns the existing control, so decoders sharing a model
    share its settings and lock.
    """
    installed = [m for m in model.modules() if isinstance(m, SeededNoiseBlock)]
    if installed:
        return installed[0].control
    control = NoiseControl()
    index = 0
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if isinstance(child, NoiseBlock):
                setattr(parent, name, SeededNoiseBlock(child.linear, index, control))
                index += 1
    if index not in (0, NOISE_BLOCKS):
        raise ValueError(f"expected {NOISE_BLOCKS} SNAC noise blocks (or none), found {index}")
    return control
