"""SNAC decodes replayed from CUDA graphs: the streaming decoder's calls, one graph per (latent steps a row,
batch bucket), and whole windows', one per (frames per window, batch bucket).

A streaming call's rows are padded up to the next bucket with rows of the
decoder's scratch slot (`StreamingSnac.fixed_shape`), its inputs copied into
the graph's static ones, and the graph replayed; the state it moves on lives
in the decoder's slots, which the graph reads and writes where they are. A
batch of windows is padded up to the next bucket with copies of its first
row (noise off, output dropped), its codes and noise keys copied into the
graph's static inputs, and the graph replayed.

Every shape is captured at start-up, when the decoder is built, never while
serving. A capture made lazily on the codec thread would run while the
engine's, the chat model's and Whisper's threads keep launching work, and in
CUDA's default ("global") capture mode any other thread's allocation or
synchronising call during a capture is an error ("operation not permitted
when stream is capturing") that also spoils the capture. Thread-local mode
would silence that, but it would still leave each new shape's first batch
waiting tens of milliseconds for its capture in the middle of someone's
stream, and it trusts torch's allocator with other threads' allocations
during a capture. At start-up nothing else runs, so the strict global mode
costs nothing and turns any mistake into a loud start-up error. The shapes
are few: windows hold 1 to ``max_frames`` frames (`MAX_GRAPH_FRAMES` for
windows of 8 with their context) and batches pad to 7 buckets. A window
wider than ``max_frames`` decodes eagerly.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import torch
from snac import SNAC

from lyre.common.batching import bucket_for
from lyre.codec.noise import NoiseControl

__all__ = ["CODEC_BUCKETS", "MAX_GRAPH_FRAMES", "SnacGraphs", "StreamGraphs", "graph_shapes"]

CODEC_BUCKETS = (1, 2, 4, 8, 16, 32, 64)
# The widest window captured by default: 8 frames with 1 of context before them and 2 after, as the windowed
# decoders lyre is measured against cut them (lyre.baseline, benchmarks/gpu_levers.py).
MAX_GRAPH_FRAMES = 11
_WARM_UP_PASSES = 2  # before a capture: cuDNN picks its algorithms, workspaces are allocated outside the graph


def graph_shapes(max_frames: int, buckets: tuple[int, ...] = CODEC_BUCKETS) -> list[tuple[int, int]]:
    """Every (frames, bucket) captured for windows of 1 to ``max_frames`` frames, largest first (the
    smaller captures then fit in the memory pool of the first)."""
    if max_frames < 1:
        raise ValueError(f"max_frames must be >= 1, got {max_frames}")
    shapes = [(n, bucket) for n in range(1, max_frames + 1) for bucket in buckets]
    return sorted(shapes, key=lambda shape: (shape[0] * shape[1], shape), reverse=True)


@dataclass
class _Graph:
    graph: torch.cuda.CUDAGraph
    codes: list[torch.Tensor]  # (B, n), (B, 2n), (B, 4n) int64
    seeds: torch.Tensor  # (B,) int64
    starts: torch.Tensor  # (B,) int64
    enabled: torch.Tensor  # (B,) bool
    audio: torch.Tensor  # (B, 1, 2048 n)


class SnacGraphs:
    """``model.decode`` captured for every shape of `graph_shapes` when built, replayed by `decode`;
    callers of `decode` hold the noise control's lock."""

    def __init__(self, model: SNAC, noise: NoiseControl, device: torch.device,
                 max_frames: int = MAX_GRAPH_FRAMES) -> None:
        if device.type != "cuda":
            raise ValueError(f"codec CUDA graphs need a CUDA device, got {device}")
        self.model, self.noise, self.device = model, noise, device
        self.shapes = graph_shapes(max_frames)
        self._graphs: dict[tuple[int, int], _Graph] = {}
        pool = None
        side = torch.cuda.Stream(device)
        side.wait_stream(torch.cuda.current_stream(device))
        with noise.lock, torch.inference_mode(), torch.cuda.stream(side):
            try:
                for n, bucket in self.shapes:
                    captured = self._capture(n, bucket, side, pool)
                    pool = pool or captured.graph.pool()
                    self._graphs[(n, bucket)] = captured
            finally:
                noise.clear()  # each capture pointed the noise blocks at its static buffers
        torch.cuda.current_stream(device).wait_stream(side)
        torch.cuda.synchronize(device)

    @property
    def captured(self) -> int:
        return len(self._graphs)

    def decode(self, codes: list[torch.Tensor], seeds: torch.Tensor, starts: torch.Tensor,
               enabled: torch.Tensor) -> torch.Tensor | None:
        """codes (B, n), (B, 2n), (B, 4n) and noise keys (B,) on the device -> audio (B, 1, 2048 n),
        or None when no graph was captured for that shape (B above every bucket, n above max_frames):
        the caller decodes eagerly. Nothing is captured here."""
        rows, n = codes[0].shape
        bucket = bucket_for(rows, CODEC_BUCKETS)  # None: more rows than any graph holds
        g = self._graphs.get((n, bucket)) if bucket is not None else None
        if g is None:
            return None
        for static, given in zip(g.codes, codes):
            static[:rows].copy_(given)
            static[rows:].copy_(given[:1].expand(bucket - rows, -1))
        g.seeds[:rows].copy_(seeds)
        g.starts[:rows].copy_(starts)
        g.enabled[:rows].copy_(enabled)
        g.enabled[rows:] = False
        g.graph.replay()
        return g.audio[:rows]

    def _capture(self, n: int, bucket: int, side: torch.cuda.Stream, pool: tuple[int, int] | None) -> _Graph:
        dev = self.device
        codes = [torch.zeros(bucket, width * n, dtype=torch.long, device=dev) for width in (1, 2, 4)]
        seeds = torch.zeros(bucket, dtype=torch.long, device=dev)
        starts = torch.zeros(bucket, dtype=torch.long, device=dev)
        enabled = torch.zeros(bucket, dtype=torch.bool, device=dev)
        self.noise.set(seeds, starts, enabled, n)  # the noise blocks read these static buffers
        for _ in range(_WARM_UP_PASSES):
            self.model.decode(codes)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=pool, stream=side):
            audio = self.model.decode(codes)
        return _Graph(graph, codes, seeds, starts, enabled, audio)


class FixedShapeStream(Protocol):
    """What is captured: lyre.codec.streaming's `StreamingSnac` with ``fixed_shape``."""

    device: torch.device
    dtype: torch.dtype
    latent_dim: int
    scratch: int | None

    def forward(self, index: torch.Tensor, z: torch.Tensor, fed: torch.Tensor, end: torch.Tensor,
                seeds: torch.Tensor, noisy: torch.Tensor | None) -> torch.Tensor: ...


@dataclass
class _StreamGraph:
    graph: torch.cuda.CUDAGraph
    inputs: tuple[torch.Tensor, ...]  # index, z, fed, end, seeds, noisy: the call's, padded to the bucket
    audio: torch.Tensor  # (bucket, 512 steps)


class StreamGraphs:
    """A fixed-shape streaming decoder's calls (`StreamingSnac.forward`) captured for every (latent steps,
    bucket) when built, replayed by `replay`. Built before serving, like `SnacGraphs`."""

    def __init__(self, stream: FixedShapeStream, steps: Sequence[int], buckets: tuple[int, ...] = CODEC_BUCKETS) -> None:
        if stream.device.type != "cuda":
            raise ValueError(f"codec CUDA graphs need a CUDA device, got {stream.device}")
        self.stream = stream
        self.shapes = sorted(((t, b) for t in steps for b in buckets), key=lambda s: (s[0] * s[1], s), reverse=True)
        self._graphs: dict[tuple[int, int], _StreamGraph] = {}
        pool = None
        device = stream.device
        side = torch.cuda.Stream(device)
        side.wait_stream(torch.cuda.current_stream(device))
        with torch.inference_mode(), torch.cuda.stream(side):
            for t, bucket in self.shapes:
                captured = self._capture(t, bucket, side, pool)
                pool = pool or captured.graph.pool()
                self._graphs[(t, bucket)] = captured
        torch.cuda.current_stream(device).wait_stream(side)
        torch.cuda.synchronize(device)

    @property
    def captured(self) -> int:
        return len(self._graphs)

    def replay(self, *inputs: torch.Tensor | None) -> torch.Tensor | None:
        """The call's audio (bucket, 512 steps; the caller copies it before the next replay), or None when no
        graph holds its shape: the caller decodes eagerly."""
        z = inputs[1]
        assert z is not None
        g = self._graphs.get((z.shape[1], z.shape[0]))
        if g is None:
            return None
        for static, given in zip(g.inputs, inputs):
            assert given is not None  # a fixed-shape call always has its noise flags
            static.copy_(given)
        g.graph.replay()
        return g.audio

    def _capture(self, steps: int, bucket: int, side: torch.cuda.Stream, pool: tuple[int, int] | None) -> _StreamGraph:
        s, dev = self.stream, self.stream.device
        ints = [torch.zeros(bucket, dtype=torch.long, device=dev) for _ in range(4)]
        index, fed, end, seeds = ints
        index.fill_(s.scratch or 0)  # the warm-up and the capture move only the scratch slot's state on
        z = torch.zeros(bucket, steps, s.latent_dim, device=dev, dtype=s.dtype)
        noisy = torch.zeros(bucket, device=dev, dtype=s.dtype)
        inputs = (index, z, fed, end, seeds, noisy)
        for _ in range(_WARM_UP_PASSES):
            s.forward(*inputs)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=pool, stream=side):
            audio = s.forward(*inputs)
        return _StreamGraph(graph, inputs, audio)
