"""A live session's appended audio, resampled to 16 kHz and scored by the VAD, off the event loop when large.

    audio_in = AudioIn(rate=24_000, vad=StreamingVAD(VADConfig()))
    audio, events = await audio_in.push(pcm)     # float32 at 16 kHz, and the VAD's events over it
    audio, events = audio_in.flush()             # the resampler's tail, at the end of a stream

Resampling and Silero over a maximal append (about 20 s of audio) take tens of
milliseconds: on the event loop that stalls every other socket of the process,
TTS streams included. Appends over ``INLINE_BYTES`` are worked out on a worker
thread; small ones (a microphone's 20-100 ms) cost less than the hop. The
resampler and the VAD are touched only by one append at a time: the session
awaits each before it reads the next client event.
"""

from __future__ import annotations

import asyncio

import numpy as np

from lyre.stt.audio import PcmResampler
from lyre.stt.vad import SpeechEvent, StreamingVAD

__all__ = ["INLINE_BYTES", "AudioIn"]

INLINE_BYTES = 16_384  # about 0.34 s of 24 kHz pcm16: under a millisecond of work


class AudioIn:
    """Client pcm16 at ``rate`` to Whisper's 16 kHz float32, with ``vad``'s events (None: no detection)."""

    def __init__(self, rate: int, vad: StreamingVAD | None = None) -> None:
        self.vad = vad
        self._resampler = PcmResampler(rate)

    @property
    def rate(self) -> int:
        return self._resampler.rate

    async def push(self, pcm: bytes) -> tuple[np.ndarray, list[SpeechEvent]]:
        """The next append's audio and events (AudioError for pcm16 that is not whole samples)."""
        if len(pcm) <= INLINE_BYTES:
            return self._score(self._resampler.push(pcm))
        return await asyncio.to_thread(lambda: self._score(self._resampler.push(pcm)))

    def flush(self) -> tuple[np.ndarray, list[SpeechEvent]]:
        """What the resampler still holds; it then starts afresh at the same rate."""
        audio = self._score(self._resampler.flush())
        self.restart(self.rate)
        return audio

    def close(self) -> None:
        """Free the resampler's filter now (it holds FFmpeg threads until freed)."""
        self._resampler.close()

    def restart(self, rate: int) -> None:
        """Drop the resampler's tail and go on at ``rate``."""
        self._resampler = PcmResampler(rate)

    def _score(self, audio: np.ndarray) -> tuple[np.ndarray, list[SpeechEvent]]:
        events = self.vad.push(audio) if self.vad is not None and audio.size else []
        return audio, events
