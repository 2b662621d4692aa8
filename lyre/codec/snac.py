"""Load the SNAC 24 kHz codec from a hub-style folder and decode codes to PCM."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from snac import SNAC
from torch.nn.utils import parametrize

from lyre.model_folder import ModelFolderError, load_config, resolve

__all__ = ["SnacDecoder", "load_snac"]

_REQUIRED = ("config.json", "pytorch_model.bin")


def load_snac(name: str | Path, device: str = "cpu") -> SNAC:
    """SNAC from a folder (or hub id) holding config.json + pytorch_model.bin.

    Weight-norm parametrisations are folded into plain weights: the output is
    identical and every decode skips recomputing them.
    """
    folder = resolve(name, required=_REQUIRED)
    model = SNAC(**load_config(folder))
    state = torch.load(folder / "pytorch_model.bin", map_location="cpu", weights_only=True)
    try:
        model.load_state_dict(state)
    except RuntimeError as exc:
        raise ModelFolderError(f"{folder}: pytorch_model.bin does not fit config.json: {exc}") from exc
    for module in model.modules():
        if parametrize.is_parametrized(module, "weight"):
            parametrize.remove_parametrizations(module, "weight", leave_parametrized=True)
    return model.to(device).eval()


class SnacDecoder:
    """Decodes SNAC code levels to 24 kHz float PCM.

    The decoder injects random noise (``noise: true``); ``seed`` fixes it per
    call so equal codes give equal audio.
    """

    def __init__(self, model: SNAC) -> None:
        self.model = model
        self.device = next(model.parameters()).device

    @torch.inference_mode()
    def decode(self, levels: tuple[list[int], list[int], list[int]], seed: int | None = 0) -> np.ndarray:
        """Codes of n frames (n, 2n, 4n) -> float32 samples (2048 n,)."""
        codes = [torch.tensor(level, dtype=torch.long, device=self.device)[None] for level in levels]
        with torch.random.fork_rng(devices=[self.device] if self.device.type == "cuda" else []):
            if seed is not None:
                torch.manual_seed(seed)
            audio = self.model.decode(codes)  # (1, 1, samples)
        return audio[0, 0].float().cpu().numpy()
