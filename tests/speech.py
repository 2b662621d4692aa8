"""Spoken test sentences, synthesised by espeak-ng, and word error rate.

    audio = speak(SENTENCES[0])                  # float32, 16 kHz mono
    other = speak(SENTENCES[0], voice="en-gb", wpm=175)  # another speaker, faster
    pcm = speak_pcm16(SENTENCES[0])              # little-endian pcm16, 24 kHz mono
    print(wer(SENTENCES, hypotheses))            # 0.0 .. 1.0

The sentences avoid numbers ("two" comes back as "2") and words Whisper may
join or split ("sea shells" / "seashells"): plain WER would count those as
errors though the speech was heard right.
"""

from __future__ import annotations

import functools
import io
import shutil
import struct
import subprocess
import wave
from collections.abc import Sequence

import av
import jiwer
import numpy as np

__all__ = ["ESPEAK_RATE", "SENTENCES", "VOICE", "WORDS_PER_MINUTE", "normalise", "resample", "speak", "speak_pcm16", "speak_wav",
           "wav_bytes", "wer"]

VOICE = "en-us"
WORDS_PER_MINUTE = 150
ESPEAK_RATE = 22_050  # what espeak-ng writes

# What a voice agent hears: bookings, questions, commands; short and long.
SENTENCES = (
    "I would like to book a table for dinner tomorrow evening.",
    "Can you tell me what the weather will be like this weekend?",
    "Please cancel my appointment with the dentist.",
    "What time does the pharmacy close today?",
    "Turn off the lights in the kitchen.",
    "I need to change my flight to a later date because my meeting was moved.",
    "Yes, that works for me.",
    "Could you send the receipt to my email address?",
    "How long will it take for my order to arrive?",
    "Please remind me to call my mother when I get home.",
    "I am calling about a problem with my internet connection, it keeps dropping every evening.",
    "What are your opening hours on Sunday?",
    "Thank you very much for your help.",
    "Can I speak to someone in customer service please?",
)

_NORMALISE = jiwer.Compose([
    jiwer.ToLowerCase(),
    jiwer.RemovePunctuation(),
    jiwer.RemoveMultipleSpaces(),
    jiwer.Strip(),
])
_TO_WORDS = jiwer.Compose([_NORMALISE, jiwer.ReduceToListOfListOfWords()])


def normalise(text: str) -> str:
    """Lower case, no punctuation, single spaces: how transcripts are compared."""
    return _NORMALISE(text)


def wer(references: Sequence[str], hypotheses: Sequence[str]) -> float:
    """Word error rate of ``hypotheses`` against ``references``, over all words, after ``normalise``."""
    if len(references) != len(hypotheses):
        raise ValueError(f"{len(references)} references but {len(hypotheses)} hypotheses")
    return jiwer.wer(list(references), list(hypotheses),
                     reference_transform=_TO_WORDS, hypothesis_transform=_TO_WORDS)


@functools.cache
def _espeak(text: str, voice: str = VOICE, wpm: int = WORDS_PER_MINUTE) -> np.ndarray:
    """espeak-ng's int16 samples at ESPEAK_RATE, shape (samples,)."""
    if shutil.which("espeak-ng") is None:
        raise RuntimeError("the speech-to-text tests need espeak-ng on PATH (Debian: apt-get install espeak-ng)")
    out = subprocess.run(["espeak-ng", "-v", voice, "-s", str(wpm), "--stdout", text],
                         capture_output=True, check=True).stdout
    # Written to a pipe, the RIFF sizes are placeholders: read the format, then every byte after "data".
    fmt = out.index(b"fmt ") + 8
    channels, rate = struct.unpack_from("<HI", out, fmt + 2)
    if (channels, rate) != (1, ESPEAK_RATE):
        raise RuntimeError(f"espeak-ng wrote {channels} channels at {rate} Hz; expected mono at {ESPEAK_RATE} Hz")
    data = out.index(b"data") + 8
    samples = np.frombuffer(out[data:len(out) - (len(out) - data) % 2], dtype="<i2")
    samples.flags.writeable = False
    return samples


def resample(samples: np.ndarray, rate: int, from_rate: int = ESPEAK_RATE) -> np.ndarray:
    """int16 at ``from_rate`` to float32 at ``rate``, shape (samples,)."""
    if rate == from_rate:
        return samples.astype(np.float32) / 32768.0
    resampler = av.AudioResampler(format="flt", layout="mono", rate=rate)
    frame = av.AudioFrame.from_ndarray(np.ascontiguousarray(samples).reshape(1, -1), format="s16", layout="mono")
    frame.sample_rate = from_rate
    frames = resampler.resample(frame) + resampler.resample(None)
    return np.concatenate([f.to_ndarray().reshape(-1) for f in frames]).astype(np.float32, copy=False)


@functools.cache
def speak(text: str, rate: int = 16_000, voice: str = VOICE, wpm: int = WORDS_PER_MINUTE) -> np.ndarray:
    """``text`` spoken by espeak-ng (``voice``, as ``espeak-ng --voices`` names them, at ``wpm`` words a
    minute), float32 mono at ``rate``; read-only."""
    audio = resample(_espeak(text, voice, wpm), rate)
    audio.flags.writeable = False
    return audio


@functools.cache
def speak_pcm16(text: str, rate: int = 24_000) -> bytes:
    """``text`` spoken, as little-endian pcm16 mono at ``rate`` (what a realtime client streams)."""
    return (np.clip(speak(text, rate), -1.0, 1.0) * 32767).astype("<i2").tobytes()


@functools.cache
def speak_wav(text: str) -> bytes:
    """``text`` spoken, as a 16-bit mono wav file at espeak-ng's own rate (22050 Hz)."""
    return wav_bytes(_espeak(text), ESPEAK_RATE)


def wav_bytes(pcm: np.ndarray, rate: int) -> bytes:
    """A 16-bit mono wav file of ``pcm`` (int16, or float in [-1, 1]) at ``rate``."""
    if pcm.dtype != np.int16:
        pcm = (np.clip(pcm, -1.0, 1.0) * 32767).astype("<i2")
    buffer = io.BytesIO()
    with wave.open(buffer, "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(2)
        out.setframerate(rate)
        out.writeframes(pcm.tobytes())
    return buffer.getvalue()
