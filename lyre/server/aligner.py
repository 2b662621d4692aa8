"""The Whisper that times words (forced alignment): word timestamps and ``/v1/audio/alignments``.

By default it is the speech-to-text worker's own model, or, on a server without
``--stt``, Whisper base loaded on first use (a server nobody asks for word
times never loads it). ``--aligner MODEL`` names another CTranslate2 Whisper
(a folder or hub id, e.g. a tiny.en), loaded on first use; ``--aligner off``
turns word timestamps off.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from lyre.stt import AlignedWord, STTConfig, Transcriber

__all__ = ["ALIGNER_OFF", "Aligner", "AlignerUnavailable", "word_timestamps"]

ALIGNER_OFF = "off"

log = logging.getLogger("lyre.server.aligner")


class AlignerUnavailable(RuntimeError):
    """No word times on this server: turned off, or the model could not be loaded (the message says which)."""


class Aligner:
    """Hands out the aligning `Transcriber`: the STT worker's, or its own loaded once on first use."""

    def __init__(self, model: str | None, stt: Transcriber | None, device: str) -> None:
        """``model``: None (the STT worker's, or Whisper base), ``off``, or a Whisper folder or hub id."""
        self.model = model
        self._device = device
        self._shared = stt if model is None else None
        self._own: Transcriber | None = None
        self._lock = asyncio.Lock()

    @property
    def off(self) -> bool:
        return self.model == ALIGNER_OFF

    @property
    def separate(self) -> bool:
        """It is a model of its own, not the speech-to-text worker's."""
        return self._shared is None and not self.off

    @property
    def loaded(self) -> Transcriber | None:
        """The aligner if it is ready now (never loads one)."""
        return self._shared or self._own

    async def get(self) -> Transcriber:
        """The aligner, loading it on first use (AlignerUnavailable when off or it cannot load)."""
        if self.off:
            raise AlignerUnavailable("word timestamps are off on this server (started with --aligner off)")
        if (ready := self.loaded) is not None:
            return ready
        async with self._lock:
            if self._own is None:
                try:
                    self._own = await asyncio.to_thread(Transcriber.load, self.model,
                                                        STTConfig(device=self._device))
                except Exception as exc:  # a bad --aligner: this request is told, the next one tries again
                    log.error("the aligner %r could not be loaded: %s", self.model or "whisper base", exc)
                    raise AlignerUnavailable(f"the word-timestamp aligner could not be loaded: {exc}") from None
            return self._own

    async def aclose(self) -> None:
        if self._own is not None:
            await asyncio.to_thread(self._own.close)
            self._own = None


def word_timestamps(words: list[AlignedWord]) -> dict[str, list[Any]]:
    """Words and their times in Cartesia's shape: three lists of the same length, in seconds."""
    return {"words": [w.text for w in words], "start": [w.start for w in words], "end": [w.end for w in words]}
