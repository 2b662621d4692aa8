"""SNAC encoding: 24 kHz PCM to frames of codes, the inverse of what `SnacDecoder` decodes."""

from __future__ import annotations

import numpy as np
import torch
from snac import SNAC

from lyre.orpheus import SAMPLE_RATE

__all__ = ["SnacEncoder"]

_LEVEL_WIDTHS = (1, 2, 4)  # codes per frame at SNAC levels 0, 1, 2
_FRAME_ORDER = ((0, 0), (1, 0), (2, 0), (2, 1), (1, 1), (2, 2), (2, 3))  # (level, index in frame) per position


class SnacEncoder:
    """Encodes float32 24 kHz mono PCM with a loaded SNAC (`load_snac`) into 7-code frames.

    A frame covers 2048 samples; the last partial frame is padded with zeros,
    as SNAC pads, so n samples give ceil(n / 2048) frames.
    """

    def __init__(self, model: SNAC) -> None:
        if model.sampling_rate != SAMPLE_RATE:
            raise ValueError(f"the codec runs at {model.sampling_rate} Hz; Orpheus's SNAC runs at {SAMPLE_RATE}")
        self.model = model
        self.device = next(model.parameters()).device
        self.dtype = next(model.parameters()).dtype

    @torch.inference_mode()
    def encode(self, pcm: np.ndarray) -> list[tuple[int, ...]]:
        """PCM (samples,) -> frames of 7 codes in frame order (as `CodecWindow.frames` holds them)."""
        pcm = np.asarray(pcm, dtype=np.float32)
        if pcm.ndim != 1 or pcm.size == 0:
            raise ValueError(f"pcm must be non-empty mono (1-D), got shape {pcm.shape}")
        audio = torch.from_numpy(pcm).to(self.device, self.dtype)[None, None]  # (1, 1, samples)
        levels = [c[0].tolist() for c in self.model.encode(audio)]  # n, 2n, 4n codes
        n = len(levels[0])
        return [tuple(levels[level][f * _LEVEL_WIDTHS[level] + i] for level, i in _FRAME_ORDER) for f in range(n)]
