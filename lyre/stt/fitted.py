"""faster-whisper's model with a chosen first window: a final pass may encode the audio and a short
pad, as partial passes do, instead of 30 s whatever the audio.

Imported when a model is loaded (it imports faster-whisper, and with it CTranslate2).
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
from faster_whisper import WhisperModel
from faster_whisper.audio import pad_or_trim

from lyre.stt.window import FULL_WINDOW, FULL_WINDOW_FRAMES, SAMPLES_PER_FRAME, FinalWindow

__all__ = ["FittedWhisperModel"]


class FittedWhisperModel(WhisperModel):
    """A ``WhisperModel`` whose ``transcribe`` encodes its first window as `first_window` says.

    faster-whisper's own extension point does it: ``generate_segments`` takes
    the first window's encoder output when given one. Later windows (audio
    over about 28 s) are encoded at 30 s as before. Everything else (beam
    search, the temperature fallback, timestamps, word alignment) is the
    library's own code, on an encoder output of fewer frames: timestamps stay
    in the audio's seconds, since each encoder frame is still 20 ms. Outside
    `first_window`, the first window is the library's 30 s.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # Per thread: transcribers sharing one model (tests, benchmarks) each run passes on their own worker.
        self._window = threading.local()

    @contextmanager
    def first_window(self, window: FinalWindow) -> Iterator[None]:
        """``transcribe`` calls on this thread, within the block, encode their first window as ``window``."""
        self._window.current = window
        try:
            yield
        finally:
            del self._window.current

    def generate_segments(self, features: np.ndarray, tokenizer: Any, options: Any, log_progress: bool,
                          encoder_output: Any = None) -> Iterable[Any]:
        window: FinalWindow = getattr(self._window, "current", FULL_WINDOW)
        content = features.shape[-1] - 1  # the extractor adds one frame past the audio, as the library counts
        frames = window.frames(content * SAMPLES_PER_FRAME)
        if encoder_output is None and frames < FULL_WINDOW_FRAMES:
            encoder_output = self.encode(pad_or_trim(features[:, :content], frames))  # (1, frames / 2, d_model)
        return super().generate_segments(features, tokenizer, options, log_progress, encoder_output)
