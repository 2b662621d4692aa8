"""What the codec tests share: random frames, the distance of audio from a reference, and CUDA's stream calls
stubbed (no GPU here) to check when graphs are captured."""

from __future__ import annotations

import random
from contextlib import nullcontext

import numpy as np
import pytest
import torch


def random_codes(n: int, seed: int) -> list[tuple[int, ...]]:
    """``n`` frames of 7 SNAC codes, the same for the same seed."""
    rng = random.Random(seed)
    return [tuple(rng.randrange(4096) for _ in range(7)) for _ in range(n)]


def snr_db(reference: np.ndarray, audio: np.ndarray) -> float:
    """How far ``audio`` is from ``reference`` (inf: equal)."""
    assert audio.shape == reference.shape
    error = float(np.sum((audio.astype(np.float64) - reference) ** 2))
    return float("inf") if error == 0 else 10 * np.log10(float(np.sum(reference.astype(np.float64) ** 2)) / error)


class StubStream:
    """Stands in for ``torch.cuda.Stream``."""

    def __init__(self, device: torch.device | None = None) -> None: ...

    def wait_stream(self, other: StubStream) -> None: ...


def stub_cuda_streams(monkeypatch: pytest.MonkeyPatch) -> None:
    """CUDA's stream calls made no-ops, so a graph class's capture loop runs here (its ``_capture`` stubbed)."""
    monkeypatch.setattr(torch.cuda, "Stream", StubStream)
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: StubStream())
    monkeypatch.setattr(torch.cuda, "stream", lambda s: nullcontext())
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: None)
