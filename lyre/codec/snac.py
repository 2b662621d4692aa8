"""Load the SNAC 24 kHz codec from a hub-style folder and decode codes to PCM."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from snac import SNAC
from torch.nn.utils import parametrize

from lyre.codec.graphs import MAX_GRAPH_FRAMES, SnacGraphs
from lyre.codec.noise import NoiseControl, install_seeded_noise
from lyre.models.folder import ModelFolderError, load_config, resolve
from lyre.orpheus import CODEBOOK_SIZE, FRAME_TOKENS, SAMPLES_PER_FRAME, codes_to_snac_levels

__all__ = ["CodecWindow", "SnacDecoder", "check_frames", "check_seed", "load_snac", "prepare_snac"]

_REQUIRED = ("config.json", "pytorch_model.bin")
# Seeds are stored in int64 tensors.
_SEED_LIMIT = 2**63
_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}
# Codes per frame at SNAC levels 0, 1, 2 (coarse to fine).
_LEVEL_WIDTHS = (1, 2, 4)

Levels = tuple[list[int], list[int], list[int]]


def load_snac(name: str | Path, device: str = "cpu", compile: bool = False, dtype: str = "float32") -> SNAC:
    """SNAC from a folder (or hub id) holding config.json + pytorch_model.bin.

    Weight-norm parametrisations are folded into plain weights: the output is
    identical and every decode skips recomputing them. ``compile=True``
    wraps the decoder in ``torch.compile``; it is for CUDA only (on CPU the
    compile time outweighs what it saves), and a ValueError elsewhere.
    ``dtype`` ("float32" or "bfloat16") is what the weights run in.
    """
    folder = resolve(name, required=_REQUIRED)
    model = SNAC(**load_config(folder))
    state = torch.load(folder / "pytorch_model.bin", map_location="cpu", weights_only=True)
    try:
        model.load_state_dict(state)
    except RuntimeError as exc:
        raise ModelFolderError(f"{folder}: pytorch_model.bin does not fit config.json: {exc}") from exc
    return prepare_snac(model, device, compile, dtype)


def prepare_snac(model: SNAC, device: str = "cpu", compile: bool = False, dtype: str = "float32") -> SNAC:
    """Ready a SNAC for decoding as `load_snac` does: weight norm folded, on ``device`` in ``dtype``."""
    if dtype not in _DTYPES:
        raise ValueError(f"codec dtype must be one of {', '.join(_DTYPES)}, got {dtype!r}")
    if compile and torch.device(device).type != "cuda":
        raise ValueError(f"compile=True is for CUDA devices, got device {device!r}")
    for module in model.modules():
        if parametrize.is_parametrized(module, "weight"):
            parametrize.remove_parametrizations(module, "weight", leave_parametrized=True)
    model = model.to(device=device, dtype=_DTYPES[dtype]).eval()
    if compile:
        # In place: the module tree and state-dict keys stay as they are.
        model.decoder.compile()
    return model


def check_seed(seed: int | None) -> None:
    """ValueError unless ``seed`` is None or fits the noise's int64 keys."""
    if seed is not None and not 0 <= seed < _SEED_LIMIT:
        raise ValueError(f"seed must be None or in [0, 2**63), got {seed}")


def check_frames(frames: Sequence[Sequence[int]]) -> tuple[tuple[int, ...], ...]:
    """``frames`` as tuples, each checked to hold 7 codes in [0, 4096): ValueError naming the first that does
    not."""
    checked = tuple(tuple(frame) for frame in frames)
    for i, frame in enumerate(checked):
        if len(frame) != FRAME_TOKENS:
            raise ValueError(f"frame {i} has {len(frame)} codes, expected {FRAME_TOKENS}")
        if not all(0 <= code < CODEBOOK_SIZE for code in frame):
            raise ValueError(f"frame {i} has a code outside [0, {CODEBOOK_SIZE}): {frame}")
    return checked


@dataclass(frozen=True)
class CodecWindow:
    """A run of consecutive frames of one utterance to decode together.

    The frames around ``keep`` give SNAC's convolutions context; only the
    samples of frames ``keep[0]`` to ``keep[1]`` (exclusive) come back.
    """

    frames: tuple[tuple[int, ...], ...]  # n frames, 7 SNAC codes each (as FrameAssembler.push returns)
    start_frame: int  # utterance index of frames[0]: keys the noise
    keep: tuple[int, int]  # frames [a, b) of the window whose samples are returned
    seed: int | None = 0  # noise seed; None = noise off

    def __post_init__(self) -> None:
        frames = check_frames(self.frames)
        object.__setattr__(self, "frames", frames)
        object.__setattr__(self, "keep", tuple(self.keep))
        if not frames:
            raise ValueError("a codec window needs at least one frame")
        if self.start_frame < 0:
            raise ValueError(f"start_frame must be >= 0, got {self.start_frame}")
        a, b = self.keep
        if not 0 <= a < b <= len(frames):
            raise ValueError(f"keep must satisfy 0 <= a < b <= {len(frames)}, got {self.keep}")
        check_seed(self.seed)

    @property
    def n_frames(self) -> int:
        """Frames in the window, context included."""
        return len(self.frames)

    @property
    def kept_frames(self) -> int:
        """Frames whose samples the decode returns."""
        return self.keep[1] - self.keep[0]


class SnacDecoder:
    """Decodes SNAC codes to 24 kHz float32 PCM with seeded, position-keyed noise.

    The decoder's noise for a frame depends only on the window's seed and the
    frame's place in the utterance (see `lyre.codec.noise`), so equal codes
    give equal audio alone or in any batch. Decodes of one model are serialised
    (the noise settings live on the model for the length of one forward).
    """

    def __init__(self, model: SNAC, cuda_graphs: bool = False, max_graph_frames: int = MAX_GRAPH_FRAMES) -> None:
        """``cuda_graphs``: replay batches from CUDA graphs (CUDA only), every shape of windows of up to
        ``max_graph_frames`` frames captured here, before serving (`lyre.codec.graphs` says why); wider
        windows decode eagerly. Pass the window policy's widest window when it is not the default's."""
        self.model = model
        self.device = next(model.parameters()).device
        self._noise: NoiseControl = install_seeded_noise(model)
        self._graphs = SnacGraphs(model, self._noise, self.device, max_graph_frames) if cuda_graphs else None

    @property
    def dtype(self) -> str:
        """What the weights run in: "float32" or "bfloat16"."""
        return str(next(self.model.parameters()).dtype).removeprefix("torch.")

    @property
    def cuda_graphs(self) -> bool:
        """Whether batches replay from CUDA graphs."""
        return self._graphs is not None

    def decode(self, levels: Levels, seed: int | None = 0) -> np.ndarray:
        """Codes of n frames (levels of n, 2n, 4n codes) -> float32 samples (2048 n,).

        The frames are taken to start the utterance (noise keyed from frame 0).
        """
        n = len(levels[0])
        if n == 0 or any(len(level) != width * n for level, width in zip(levels, _LEVEL_WIDTHS)):
            raise ValueError(f"levels must hold n, 2n, 4n codes with n >= 1, got {[len(x) for x in levels]}")
        if not all(0 <= code < CODEBOOK_SIZE for level in levels for code in level):
            raise ValueError(f"SNAC codes must be in [0, {CODEBOOK_SIZE})")
        check_seed(seed)
        codes = [torch.tensor(level, dtype=torch.long)[None] for level in levels]  # (1, n), (1, 2n), (1, 4n)
        audio = self._decode_codes(codes, [seed], [0])  # (1, 2048 n)
        return audio[0]

    def decode_windows(self, windows: Sequence[CodecWindow]) -> list[np.ndarray]:
        """Decode windows of equal frame count in one batched SNAC call.

        Returns, per window, float32 samples ``[a * 2048, b * 2048)`` of its
        decoded audio, ``(a, b) = window.keep``. Windows of different frame
        counts raise ValueError: group them first.
        """
        if not windows:
            return []
        n = windows[0].n_frames
        if any(w.n_frames != n for w in windows):
            raise ValueError(f"windows in one batch must have equal frame counts, got {[w.n_frames for w in windows]}")
        levels = [codes_to_snac_levels(w.frames) for w in windows]
        codes = [torch.tensor([lv[i] for lv in levels], dtype=torch.long) for i in range(3)]  # (B, n), (B, 2n), (B, 4n)
        audio = self._decode_codes(codes, [w.seed for w in windows], [w.start_frame for w in windows])  # (B, 2048 n)
        return [
            audio[row, w.keep[0] * SAMPLES_PER_FRAME : w.keep[1] * SAMPLES_PER_FRAME].copy()
            for row, w in enumerate(windows)
        ]

    @torch.inference_mode()
    def _decode_codes(
        self, codes: list[torch.Tensor], seeds: Sequence[int | None], start_frames: Sequence[int]
    ) -> np.ndarray:
        """codes (B, n), (B, 2n), (B, 4n) on CPU -> float32 audio (B, 2048 n)."""
        n = codes[0].shape[1]
        dev = self.device
        noise_seeds = torch.tensor([s or 0 for s in seeds], dtype=torch.long, device=dev)  # (B,)
        enabled = torch.tensor([s is not None for s in seeds], device=dev)  # (B,)
        starts = torch.tensor(start_frames, dtype=torch.long, device=dev)  # (B,)
        codes = [c.to(dev) for c in codes]
        with self._noise.lock:
            if self._graphs is not None:
                replayed = self._graphs.decode(codes, noise_seeds, starts, enabled)
                if replayed is not None:
                    return replayed[:, 0].float().cpu().numpy()
            if any(s is not None for s in seeds):
                self._noise.set(noise_seeds, starts, enabled, n)
            try:
                audio = self.model.decode(codes)  # (B, 1, 2048 n)
            finally:
                self._noise.clear()
        return audio[:, 0].float().cpu().numpy()
