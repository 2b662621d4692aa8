"""SNAC decodes replayed from CUDA graphs, one per (frames per window, batch bucket).

A batch of windows is padded up to the next bucket with copies of its first
row (noise off, output dropped), its codes and noise keys copied into the
graph's static inputs, and the graph replayed. A shape is captured the first
time it is decoded (tens of milliseconds, once): windows take a handful of
frame counts in practice, so a server captures a few dozen graphs in all.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from snac import SNAC

from lyre.codec.noise import NoiseControl

__all__ = ["CODEC_BUCKETS", "SnacGraphs", "pad_to_bucket"]

CODEC_BUCKETS = (1, 2, 4, 8, 16, 32, 64)


def pad_to_bucket(rows: int, buckets: tuple[int, ...] = CODEC_BUCKETS) -> int | None:
    """The smallest bucket holding ``rows``; None when none does (decode eagerly)."""
    return next((b for b in buckets if b >= rows), None)


@dataclass
class _Graph:
    graph: torch.cuda.CUDAGraph
    codes: list[torch.Tensor]  # (B, n), (B, 2n), (B, 4n) int64
    seeds: torch.Tensor  # (B,) int64
    starts: torch.Tensor  # (B,) int64
    enabled: torch.Tensor  # (B,) bool
    audio: torch.Tensor  # (B, 1, 2048 n)


class SnacGraphs:
    """Captures and replays ``model.decode`` per shape; callers hold the noise control's lock."""

    def __init__(self, model: SNAC, noise: NoiseControl, device: torch.device) -> None:
        if device.type != "cuda":
            raise ValueError(f"codec CUDA graphs need a CUDA device, got {device}")
        self.model, self.noise, self.device = model, noise, device
        self._graphs: dict[tuple[int, int], _Graph] = {}
        self._pool = None

    @property
    def captured(self) -> int:
        return len(self._graphs)

    def decode(self, codes: list[torch.Tensor], seeds: torch.Tensor, starts: torch.Tensor,
               enabled: torch.Tensor) -> torch.Tensor | None:
        """codes (B, n), (B, 2n), (B, 4n) and noise keys (B,) on the device -> audio (B, 1, 2048 n),
        or None when B is larger than every bucket."""
        rows, n = codes[0].shape
        bucket = pad_to_bucket(rows)
        if bucket is None:
            return None
        g = self._graphs.get((n, bucket)) or self._capture(n, bucket)
        for static, given in zip(g.codes, codes):
            static[:rows].copy_(given)
            static[rows:].copy_(given[:1].expand(bucket - rows, -1))
        g.seeds[:rows].copy_(seeds)
        g.starts[:rows].copy_(starts)
        g.enabled[:rows].copy_(enabled)
        g.enabled[rows:] = False
        g.graph.replay()
        return g.audio[:rows]

    def _capture(self, n: int, bucket: int) -> _Graph:
        dev = self.device
        codes = [torch.zeros(bucket, width * n, dtype=torch.long, device=dev) for width in (1, 2, 4)]
        seeds = torch.zeros(bucket, dtype=torch.long, device=dev)
        starts = torch.zeros(bucket, dtype=torch.long, device=dev)
        enabled = torch.zeros(bucket, dtype=torch.bool, device=dev)
        self.noise.set(seeds, starts, enabled, n)  # the noise blocks read these static buffers
        side = torch.cuda.Stream(dev)
        side.wait_stream(torch.cuda.current_stream(dev))
        with torch.cuda.stream(side), torch.inference_mode():
            for _ in range(2):  # warm-up outside the capture: cuDNN picks its algorithms here
                self.model.decode(codes)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, pool=self._pool, stream=side):
                audio = self.model.decode(codes)
        torch.cuda.current_stream(dev).wait_stream(side)
        self._pool = self._pool or graph.pool()
        captured = _Graph(graph, codes, seeds, starts, enabled, audio)
        self._graphs[(n, bucket)] = captured
        return captured
