"""Dataset folders for the voice-training tests: espeak-ng speech and plain tones, in the layouts train-voice reads."""

from __future__ import annotations

import wave
from pathlib import Path

import av
import numpy as np

from speech import ESPEAK_RATE, _espeak

LEADING_SILENCE_S = 0.6  # what Orpheus's base model opens with, prepended to every spoken clip


def write_wav(path: Path, samples: np.ndarray, rate: int) -> Path:
    """int16 mono ``samples`` as a wav file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with wave.open(str(path), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(np.asarray(samples, dtype="<i2").tobytes())
    return path


def write_flac_stereo(path: Path, samples: np.ndarray, rate: int) -> Path:
    """int16 mono ``samples`` written as a two-channel FLAC file at ``rate``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    stereo = np.ascontiguousarray(np.stack([samples, samples]).T.reshape(1, -1).astype(np.int16))  # interleaved
    with av.open(str(path), "w", format="flac") as out:
        stream = out.add_stream("flac", rate=rate, layout="stereo")
        frame = av.AudioFrame.from_ndarray(stereo, format="s16", layout="stereo")
        frame.sample_rate = rate
        for packet in stream.encode(frame):
            out.mux(packet)
        for packet in stream.encode(None):
            out.mux(packet)
    return path


def spoken(text: str) -> np.ndarray:
    """espeak-ng's ``text`` at its own rate, int16, after LEADING_SILENCE_S of digital silence."""
    return np.concatenate([np.zeros(round(LEADING_SILENCE_S * ESPEAK_RATE), np.int16), _espeak(text)])


def tone(seconds: float, rate: int = 16_000, amplitude: float = 0.3) -> np.ndarray:
    """A 220 Hz tone as int16 (amplitude above 1 is clipped at full scale)."""
    t = np.arange(round(seconds * rate)) / rate
    return (np.clip(amplitude * np.sin(2 * np.pi * 220 * t), -1, 1) * 32767).astype(np.int16)


def spoken_dataset(root: Path, sentences: list[str]) -> Path:
    """An LJSpeech folder of ``sentences``: the first clip a stereo 44.1 kHz FLAC, the rest 22.05 kHz wavs."""
    lines = []
    for i, text in enumerate(sentences):
        clip = f"clip{i}"
        if i == 0:
            resampled = av.AudioResampler(format="s16", layout="mono", rate=44_100)
            frame = av.AudioFrame.from_ndarray(spoken(text).reshape(1, -1), format="s16", layout="mono")
            frame.sample_rate = ESPEAK_RATE
            pcm = np.concatenate([f.to_ndarray().reshape(-1) for f in resampled.resample(frame) + resampled.resample(None)])
            write_flac_stereo(root / "wavs" / f"{clip}.flac", pcm, 44_100)
            lines.append(f"{clip}|{text.upper()}|{text}")  # the normalised third column is the one read
        else:
            write_wav(root / "wavs" / f"{clip}.wav", spoken(text), ESPEAK_RATE)
            lines.append(f"{clip}|{text}")
    (root / "metadata.csv").write_text("\n".join(lines) + "\n")
    return root
