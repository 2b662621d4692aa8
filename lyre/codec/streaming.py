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
that the whole decode's padding is) or `close`. The pool of slots grows when
all are taken.

Tensors run time-major, (rows, time, channels), so that every pointwise
convolution (the 1x1s, the noise blocks' projections) and every transposed
convolution is one matrix multiply over all rows' steps together: SNAC's
convolutions as torch runs them on the CPU are several times slower on the
few steps a call brings (benchmarks/codec.py). A transposed convolution keeps
the overlap its last step leaves on the next, not its input, so no step is
multiplied twice.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from snac import SNAC
from snac.layers import DecoderBlock, ResidualUnit, Snake1d
from torch import nn

from lyre.codec.graphs import CODEC_BUCKETS, StreamGraphs
from lyre.codec.noise import SeededNoiseBlock, install_seeded_noise
from lyre.codec.stream_layers import (
    LayerState, Step, pointwise, residual, seeded_noise, snake, temporal, transposed)
from lyre.common.batching import bucket_for
from lyre.orpheus import codes_to_snac_levels

__all__ = ["StreamingSnac"]

log = logging.getLogger(__name__)

_STEPS_PER_FRAME = 4  # latent steps of one 7-code frame (SNAC's finest level: 4 codes a frame)


@dataclass
class _Row:
    """One stream's place: latent steps fed so far, and its length once known."""

    seed: int | None
    fed: int = 0  # latent steps
    end: int | None = None  # the utterance's latent steps, once it has ended


class StreamingSnac:
    """SNAC's decoder run as a stream per slot; see the module docstring."""

    def __init__(self, model: SNAC, slots: int, fixed_shape: bool = False) -> None:
        """``slots``: streams to hold state for at first; ``fixed_shape``: every call runs the same steps
        whatever its rows (masks always on, rows padded to a batch bucket with a scratch slot's), as a CUDA
        graph replays them (`capture_graphs`)."""
        install_seeded_noise(model)  # the same noise blocks as the window decoder's (shares its state dict)
        self.model = model
        p = next(model.parameters())
        self.device, self.dtype = p.device, p.dtype
        self.fixed_shape = fixed_shape
        self.scratch = 0 if fixed_shape else None  # the slot padded rows read and write
        self._first = 1 if fixed_shape else 0  # the first slot a stream can have
        self.slots = slots
        self._rows: dict[int, _Row] = {}
        self._clear = False  # this call's rows have nothing outside their utterances to mask
        self._free = list(range(self._first + slots - 1, self._first - 1, -1))
        self._states: list[LayerState] = []
        self._graphs: StreamGraphs | None = None
        self._plan = self._build(model.decoder.model)
        self.lookahead = sum(lag * rate for lag, rate in self._lag_rates)  # output samples: 4,757 for SNAC 24 kHz
        self._flush_steps = -(-self.lookahead // self._rate)  # latent steps of silence that bring it all out
        self.flush_frames = -(-self._flush_steps // _STEPS_PER_FRAME)  # what a finish costs, in frames' decode

    # -- streams --

    def open(self, seed: int | None = 0) -> int:
        """A slot for a new stream (noise keyed by ``seed``; None: no noise); the pool doubles when all are
        taken."""
        if not self._free:
            self._grow(2 * self.slots)
        slot = self._free.pop()
        for state in self._states:
            state.reset(slot)
        self._rows[slot] = _Row(seed)
        return slot

    def close(self, slot: int) -> None:
        """Free ``slot`` (its stream ended, was cancelled or failed); a slot not open is left alone."""
        if self._rows.pop(slot, None) is not None:
            self._free.append(slot)

    @property
    def open_slots(self) -> int:
        return len(self._rows)

    @property
    def graphs(self) -> StreamGraphs | None:
        """The calls captured as CUDA graphs (None: eager)."""
        return self._graphs

    @property
    def bytes_per_slot(self) -> int:
        """Memory one stream's state takes."""
        return sum(s.state[0].numel() * s.state.element_size() for s in self._states)

    def _grow(self, slots: int) -> None:
        if self._graphs is not None:  # they read the state where it is now
            log.warning("the streaming codec's %d slots are all taken: it grows to %d and decodes without its "
                        "CUDA graphs from now on", self.slots, slots)
            self._graphs = None
        for state in self._states:
            state.grow(self._first + slots)
        self._free = list(range(self._first + slots - 1, self._first + self.slots - 1, -1)) + self._free
        self.slots = slots

    def capture_graphs(self, max_frames: int, buckets: tuple[int, ...] = CODEC_BUCKETS) -> int:
        """Capture a CUDA graph of a call for every 1 to ``max_frames`` frames a row, and of a finish, at every
        batch bucket (on a fixed-shape decoder on a CUDA device; before serving: lyre.codec.graphs says why).
        Calls of those shapes replay them from then on; the number captured."""
        if not self.fixed_shape:
            raise ValueError("CUDA graphs need a fixed-shape streaming decoder")
        steps = [n * _STEPS_PER_FRAME for n in range(1, max_frames + 1)] + [self._flush_steps]
        self._graphs = StreamGraphs(self, sorted(set(steps)), buckets)
        return self._graphs.captured

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
        self._check_open(slots)
        z = self._latent([codes_to_snac_levels(frames) for _, frames in feeds])  # (B, 4n, D)
        return self._run(slots, z)

    @torch.inference_mode()
    def finish(self, slots: Sequence[int]) -> list[np.ndarray]:
        """End each stream: the audio still held back, up to its last frame; its slot is free again."""
        if not slots:
            return []
        self._check_open(slots)
        for slot in slots:
            row = self._rows[slot]
            row.end = row.fed
        z = torch.zeros(len(slots), self._flush_steps, self.latent_dim, device=self.device, dtype=self.dtype)
        out = self._run(list(slots), z)
        for slot in slots:
            self.close(slot)
        return out

    def _check_open(self, slots: Sequence[int]) -> None:
        if len(set(slots)) != len(slots):
            raise ValueError(f"a slot appears twice in one call: {list(slots)}")
        for slot in slots:
            if slot not in self._rows or self._rows[slot].end is not None:
                raise ValueError(f"slot {slot} is not an open stream")

    # -- the decoder, layer by layer --

    def _run(self, slots: list[int], z: torch.Tensor) -> list[np.ndarray]:
        rows = [self._rows[s] for s in slots]
        pad = (bucket_for(len(rows), CODEC_BUCKETS) or len(rows)) - len(rows) if self.fixed_shape else 0
        # A padded row (the scratch slot's) ends before it starts: every output of it is masked.
        index, fed, end, seeds = (torch.tensor(values, device=self.device) for values in (
            slots + [self.scratch] * pad, [r.fed for r in rows] + [0] * pad,
            [r.end if r.end is not None else 2**40 for r in rows] + [0] * pad, [r.seed or 0 for r in rows] + [0] * pad))
        noisy = None if not self.fixed_shape and all(r.seed is None for r in rows) else torch.tensor(
            [r.seed is not None for r in rows] + [False] * pad, device=self.device, dtype=self.dtype)
        if pad:
            z = torch.cat([z, z.new_zeros(pad, *z.shape[1:])])
        # Every row far enough in (its lookahead past the start) and not ending: no layer's output is outside
        # its utterance, so the masks have nothing to do (a fixed-shape call masks all the same).
        self._clear = not self.fixed_shape and all(r.end is None and r.fed * self._rate >= self.lookahead
                                                   for r in rows)
        x = self._graphs.replay(index, z, fed, end, seeds, noisy) if self._graphs is not None else None
        if x is None:
            x = self.forward(index, z, fed, end, seeds, noisy)
        n = z.shape[1]
        for r in rows:
            r.fed += n
        audio = x[:len(rows)].float().cpu().numpy()  # (B, 512 n): positions [512 fed - lookahead, ...)
        out = []
        for row, samples, start in zip(rows, audio, (self._rate * (r.fed - n) - self.lookahead for r in rows)):
            lo = max(0, -start)
            hi = samples.shape[0] if row.end is None else max(lo, min(samples.shape[0], self._rate * row.end - start))
            out.append(samples[lo:hi].copy())
        return out

    def forward(self, index: torch.Tensor, z: torch.Tensor, fed: torch.Tensor, end: torch.Tensor,
                seeds: torch.Tensor, noisy: torch.Tensor | None) -> torch.Tensor:
        """One call's decode: latent ``z`` (B, T, D) of the rows in slots ``index`` at latent step ``fed``
        (their ends ``end``, noise ``seeds`` where ``noisy``) -> audio (B, 512 T), their state moved on."""
        x = z if self._clear else z * self._inside(fed, end, z.shape[1], 1, 0)
        for step in self._plan:
            x = step(self, index, x, fed, end, seeds, noisy)
        return x[..., 0]

    def _inside(self, fed: torch.Tensor, end: torch.Tensor, length: int, rate: int, lag: int) -> torch.Tensor:
        """(B, length, 1) 1.0 where a layer's output (``rate`` samples a latent step, ``lag`` late) is inside
        its utterance, 0.0 where the whole decode's padding is."""
        positions = (fed * rate - lag)[:, None] + torch.arange(length, device=self.device)[None, :]  # (B, T)
        return ((positions >= 0) & (positions < (end * rate)[:, None])).to(self.dtype)[:, :, None]

    def _latent(self, levels: list[tuple[list[int], list[int], list[int]]]) -> torch.Tensor:
        """Codes of n frames per row -> SNAC's latent, time-major (B, 4n, D), as its quantizer's ``from_codes``."""
        codes = [torch.tensor([lv[i] for lv in levels], dtype=torch.long, device=self.device) for i in range(3)]
        return self.model.quantizer.from_codes(codes).to(self.dtype).transpose(1, 2).contiguous()

    def _build(self, layers: nn.Sequential) -> list[Step]:  # type: ignore[type-arg]
        """The decoder as steps over (rows, x); each temporal one with its state and its lag."""
        upsampling = 1
        for module in layers:
            if isinstance(module, DecoderBlock):
                upsampling *= module.block[1].stride[0]
        self._rate = upsampling  # output samples per latent step: 512
        self.latent_dim = layers[0].in_channels
        self._lag_rates: list[tuple[int, int]] = []  # (lag at a layer's rate, output samples per sample there)
        plan: list[Step] = []
        rate, lag = 1, 0  # of the current x: samples per latent step, and how late (at its rate)

        def state(keep: int, channels: int) -> LayerState:
            s = LayerState(self._first + self.slots, keep, channels, self.device, self.dtype)
            self._states.append(s)
            return s

        def lagged(steps: int) -> None:
            nonlocal lag
            lag += steps
            self._lag_rates.append((steps, upsampling // rate))

        def mask() -> None:
            r, g = rate, lag
            plan.append(lambda s, i, x, fed, end, *_: x if s._clear else x * s._inside(fed, end, x.shape[1], r, g))

        for module in layers:
            if isinstance(module, nn.Conv1d) and module.kernel_size[0] == 1:
                plan.append(pointwise(module))
                mask()
            elif isinstance(module, nn.Conv1d):
                plan.append(temporal(module, state((module.kernel_size[0] - 1) * module.dilation[0],
                                                    module.in_channels)))
                lagged((module.kernel_size[0] - 1) * module.dilation[0] // 2)
            elif isinstance(module, Snake1d):
                plan.append(snake(module))
            elif isinstance(module, nn.Tanh):
                plan.append(lambda s, i, x, *_: torch.tanh(x))
            elif isinstance(module, DecoderBlock):
                activation, up, noise, *units = module.block
                plan.append(snake(activation))
                stride = up.stride[0]
                if up.kernel_size[0] != 2 * stride or up.output_padding[0] != stride % 2:
                    raise ValueError(f"unexpected transposed convolution in SNAC's decoder: {up}")
                plan.append(transposed(up, state(1, stride * up.out_channels)))
                rate, lag = rate * stride, lag * stride
                lagged(up.padding[0])
                mask()
                assert isinstance(noise, SeededNoiseBlock)
                plan.append(seeded_noise(noise, rate, lag))
                for unit in units:
                    assert isinstance(unit, ResidualUnit)
                    conv = unit.block[1]
                    d = conv.dilation[0]
                    plan.append(residual(unit, state(6 * d, conv.in_channels), state(3 * d, conv.in_channels)))
                    lagged(3 * d)
                    mask()
            else:
                raise ValueError(f"unexpected layer in SNAC's decoder: {type(module).__name__}")
        return plan
