"""One piece of audio to judge, in the two forms the judges take: a file (for a server's speech to text, and
to keep) and float32 samples at 16 kHz (for a local Whisper and the speaker embeddings)."""

from __future__ import annotations

import io
import wave
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from lyre.stt.audio import SAMPLE_RATE, PcmResampler, decode_file

__all__ = ["Clip", "from_file", "from_pcm"]


@dataclass(frozen=True)
class Clip:
    name: str
    data: bytes  # an audio file any ffmpeg reads
    audio: np.ndarray  # float32, 16 kHz mono, shape (samples,)

    @property
    def seconds(self) -> float:
        return self.audio.size / SAMPLE_RATE


def _wav(pcm: bytes, rate: int) -> bytes:
    buffer = io.BytesIO()
    with wave.open(buffer, "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(2)
        out.setframerate(rate)
        out.writeframes(pcm)
    return buffer.getvalue()


def from_pcm(name: str, pcm: bytes, rate: int) -> Clip:
    """s16le mono ``pcm`` at ``rate`` (a server's ``pcm`` answer) as a clip; a wav file for its file form."""
    pcm = pcm[:len(pcm) - len(pcm) % 2]
    resampler = PcmResampler(rate)
    audio = np.concatenate([resampler.push(pcm), resampler.flush()])
    return Clip(name, _wav(pcm, rate), audio)


def from_file(path: Path, name: str | None = None) -> Clip:
    """The audio file at ``path`` as a clip; a ValueError naming it when it cannot be read or decoded."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise ValueError(f"{path}: cannot be read ({exc.strerror or exc})") from None
    return Clip(name or path.stem, data, decode_file(data, str(path)))  # AudioError names the file
