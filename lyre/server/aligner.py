"""The one aligner behind every word time: word timestamps (WebSocket, SSE, JSON), ``/v1/audio/alignments``,
and the agent's cut at a barge-in.

``--aligner`` picks it:

- ``auto`` (the default): English by phones (`lyre.stt.phone_align`: pocketsphinx's
  en-us acoustic model, CMUdict, gruut's G2P), every other language by Whisper;
  a phone alignment that fails even with wider beams is done again by Whisper;
- ``phones``: English only, by phones, no Whisper (other languages are refused);
- ``whisper``: Whisper for every language Whisper speaks (English too);
- a CTranslate2 Whisper folder or hub id (e.g. a tiny.en): that Whisper for every language;
- ``off``: no word times (requests that ask get none; ``/v1/audio/alignments`` answers 404).

The Whisper is the speech-to-text worker's own model (``--stt``), or else Whisper
base (or the one named), loaded on first use; the phone aligner too is loaded on
first use, so a server nobody asks for word times loads neither.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from lyre.stt import (
    AlignedWord,
    Alignment,
    PhoneAligner,
    PhoneAlignmentFailed,
    STTConfig,
    Transcriber,
)
from lyre.stt.phone_align import LANGUAGES as PHONE_LANGUAGES
from lyre.stt.words import script_language

__all__ = ["ALIGNER_AUTO", "ALIGNER_CHOICES", "ALIGNER_OFF", "ALIGNER_PHONES", "ALIGNER_WHISPER", "Aligner",
           "AlignerStats", "AlignerUnavailable", "word_timestamps"]

ALIGNER_AUTO = "auto"
ALIGNER_PHONES = "phones"
ALIGNER_WHISPER = "whisper"
ALIGNER_OFF = "off"
ALIGNER_CHOICES = (ALIGNER_AUTO, ALIGNER_PHONES, ALIGNER_WHISPER, ALIGNER_OFF)  # or a Whisper model

log = logging.getLogger("lyre.server.aligner")


class AlignerUnavailable(RuntimeError):
    """No word times on this server: turned off, or the model could not be loaded (the message says which)."""


@dataclass(frozen=True)
class AlignerStats:
    pending: int  # alignments waiting: the phone aligner's, and a Whisper of its own's
    aligned_seconds: float  # audio aligned by them (the STT worker's Whisper counts in lyre_stt_*)
    alignments: dict[str, int] = field(default_factory=dict)  # by the aligner that placed the words
    fallbacks: dict[str, int] = field(default_factory=dict)  # "wide_beams", "whisper"


class Aligner:
    """See the module docstring: places words by language, loading what it needs on first use."""

    def __init__(self, choice: str | None, stt: Transcriber | None, device: str) -> None:
        """``choice``: ``--aligner`` (None: auto); ``stt``: the speech-to-text worker, if the server runs one."""
        self.choice = choice or ALIGNER_AUTO
        self._phones_on = self.choice in (ALIGNER_AUTO, ALIGNER_PHONES)
        self._whisper_on = self.choice not in (ALIGNER_PHONES, ALIGNER_OFF)
        self._whisper_model = None if self.choice in ALIGNER_CHOICES else self.choice
        self._device = device
        self._shared = stt if self._whisper_model is None else None
        self._own: Transcriber | None = None
        self._phones: PhoneAligner | None = None
        self._lock = asyncio.Lock()
        self._alignments = {"phones": 0, "whisper": 0}
        self._to_whisper = 0

    @property
    def off(self) -> bool:
        return self.choice == ALIGNER_OFF

    def _by_phones(self, language: str | None) -> bool:
        return self._phones_on and (language or "en") in PHONE_LANGUAGES

    async def check_language(self, language: str | None) -> None:
        """ValueError naming the languages this server aligns, if ``language`` is not one of them."""
        if self._by_phones(language):
            return
        if not self._whisper_on:
            raise ValueError(f"language: --aligner {self.choice} aligns {', '.join(PHONE_LANGUAGES)} only, "
                             f"not {language!r}")
        (await self.whisper()).check_language(language)

    async def align(self, audio: np.ndarray, words: list[str], language: str | None,
                    session: Hashable, partial: bool = False) -> Alignment:
        """When each of ``words`` is spoken in ``audio`` (float32, 16 kHz, at most 30 s): by phones where
        they speak the language (English, or no language, unless the words are in a script English is not
        written in), else (or where they fail, under ``auto``) by Whisper. ``partial``: the audio
        may stop before the words do (see `lyre.stt.word_timer.WordAligner`)."""
        if self.off:
            raise AlignerUnavailable("word timestamps are off on this server (started with --aligner off)")
        if language in (None, "en"):  # the default, where the words' script says otherwise (Chinese, Hindi)
            language = script_language(" ".join(words)) or language
        await self.check_language(language)
        if self._by_phones(language):
            phones = await self._phone_aligner()
            try:
                found = await phones.align(audio, words, language, session, partial=partial)
                self._alignments["phones"] += 1
                return found
            except PhoneAlignmentFailed as exc:
                if not self._whisper_on:
                    raise
                self._to_whisper += 1
                log.info("phone alignment failed (%s): Whisper aligns it", exc)
        found = await (await self.whisper()).align(audio, words, language, session=session, partial=partial)
        self._alignments["whisper"] += 1
        return found

    async def _phone_aligner(self) -> PhoneAligner:
        async with self._lock:
            if self._phones is None:
                try:
                    self._phones = await asyncio.to_thread(PhoneAligner)
                except Exception as exc:  # pocketsphinx missing or broken: said once per request, not fatal
                    log.error("the phone aligner could not be loaded: %s", exc)
                    raise AlignerUnavailable(f"the phone aligner could not be loaded: {exc}") from None
            return self._phones

    @property
    def loaded(self) -> Transcriber | None:
        """The Whisper that aligns, if it is ready now (never loads one)."""
        return self._shared or self._own

    async def whisper(self) -> Transcriber:
        """The Whisper aligner, loading it on first use (AlignerUnavailable when it cannot load)."""
        if not self._whisper_on:
            raise AlignerUnavailable(f"--aligner {self.choice} uses no Whisper")
        if (ready := self.loaded) is not None:
            return ready
        async with self._lock:
            if self._own is None:
                try:
                    self._own = await asyncio.to_thread(Transcriber.load, self._whisper_model,
                                                        STTConfig(device=self._device))
                except Exception as exc:  # a bad --aligner: this request is told, the next one tries again
                    log.error("the aligner %r could not be loaded: %s", self._whisper_model or "whisper base", exc)
                    raise AlignerUnavailable(f"the word-timestamp aligner could not be loaded: {exc}") from None
            return self._own

    def stats(self) -> AlignerStats:
        phones = self._phones.stats() if self._phones is not None else None
        own = self._own.stats() if self._own is not None else None
        return AlignerStats(
            pending=(phones.pending if phones else 0) + (own.pending if own else 0),
            aligned_seconds=(phones.aligned_seconds if phones else 0.0) + (own.aligned_seconds if own else 0.0),
            alignments=dict(self._alignments),
            fallbacks={"wide_beams": phones.wide_beam_retries if phones else 0, "whisper": self._to_whisper})

    async def aclose(self) -> None:
        if self._own is not None:
            await asyncio.to_thread(self._own.close)
            self._own = None
        if self._phones is not None:
            await asyncio.to_thread(self._phones.close)
            self._phones = None


def word_timestamps(words: list[AlignedWord]) -> dict[str, list[Any]]:
    """Words and their times in Cartesia's shape: three lists of the same length, in seconds."""
    return {"words": [w.text for w in words], "start": [w.start for w in words], "end": [w.end for w in words]}
