"""Who is speaking: speaker embeddings of 16 kHz audio, compared by cosine similarity.

Two embeddings, measured against each other on espeak-ng's voices (docs/benchmarks.md, "Quality gate"):

- ``resemblyzer`` (the default): Resemblyzer's d-vector, a 3-layer LSTM trained with the GE2E loss on
  thousands of speakers (VoxCeleb, LibriSpeech); its weights ship inside its wheel (Apache-2.0), so it runs
  offline. Audio is prepared as Resemblyzer prepares it (volume normalised, long silences cut).
- ``mfcc``: the classic baseline, no training: the mean and standard deviation over the voiced frames (within
  40 dB of the loudest) of 19 MFCCs, the energy coefficient dropped.

Resemblyzer separated same-voice from different-voice pairs far better (its margin is in
docs/benchmarks.md), so it is the default; ``mfcc`` stays as the cross-check a reader can reason about.
Both need the ``eval`` extra: ``pip install 'lyre[eval]'`` and ``pip install --no-deps resemblyzer==0.1.4``
(its own metadata pins a webrtcvad that no longer imports on current setuptools; the extra brings
webrtcvad-wheels in its place).
"""

from __future__ import annotations

import warnings
from abc import ABC, abstractmethod

import numpy as np

__all__ = ["EMBEDDINGS", "Embedding", "MIN_SPEECH_S", "cosine", "make_embedding"]

EMBEDDINGS = ("resemblyzer", "mfcc")
SAMPLE_RATE = 16_000
MIN_SPEECH_S = 0.3  # less audio than this (after silence is cut) is no evidence of who is speaking
_SILENT = 10 ** (-60 / 20)  # audio never reaching -60 dBFS holds no voice (and Resemblyzer's volume step divides by it)
_INSTALL = ("speaker similarity needs the eval extra: pip install 'lyre[eval]' and "
            "pip install --no-deps resemblyzer==0.1.4")


def _too_little(audio: np.ndarray) -> bool:
    return audio.size < MIN_SPEECH_S * SAMPLE_RATE or not np.any(np.abs(audio) >= _SILENT)


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    """The cosine of the angle between two embeddings: 1 the same direction, 0 unrelated."""
    return float(np.dot(a, b) / (np.linalg.norm(a) * np.linalg.norm(b)))


class Embedding(ABC):
    """Turns one speaker's audio into a vector; similar voices point the same way."""

    name: str

    @abstractmethod
    def embed(self, audio: np.ndarray) -> np.ndarray | None:
        """The embedding of ``audio`` (float32, 16 kHz mono), or None when it holds too little speech."""


class _Resemblyzer(Embedding):
    name = "resemblyzer"

    def __init__(self) -> None:
        try:
            with warnings.catch_warnings():
                # resemblyzer 0.1.4 imports binary_dilation from a scipy namespace deprecated since 1.8.
                warnings.filterwarnings("ignore", "Please import `binary_dilation`", DeprecationWarning)
                from resemblyzer import VoiceEncoder, preprocess_wav
        except ImportError as exc:
            raise ValueError(f"{_INSTALL} ({exc})") from None
        self._prepare = preprocess_wav
        self._encoder = VoiceEncoder("cpu", verbose=False)

    def embed(self, audio: np.ndarray) -> np.ndarray | None:
        audio = np.asarray(audio, dtype=np.float32)
        if _too_little(audio):
            return None
        prepared = self._prepare(audio)  # already at its 16 kHz: no resampling
        if prepared.size < MIN_SPEECH_S * SAMPLE_RATE:
            return None
        return self._encoder.embed_utterance(prepared)


_MFCCS = 19
_FRAME_DB_FLOOR = 40.0  # frames this far below the loudest are silence, left out


class _Mfcc(Embedding):
    name = "mfcc"

    def __init__(self) -> None:
        try:
            import librosa
        except ImportError as exc:
            raise ValueError(f"{_INSTALL} ({exc})") from None
        self._librosa = librosa

    def embed(self, audio: np.ndarray) -> np.ndarray | None:
        audio = np.asarray(audio, dtype=np.float32)
        if _too_little(audio):
            return None
        librosa = self._librosa
        mel_db = librosa.power_to_db(librosa.feature.melspectrogram(y=audio, sr=SAMPLE_RATE))  # (128, frames)
        mfcc = librosa.feature.mfcc(S=mel_db, n_mfcc=_MFCCS + 1)[1:]  # (19, frames)
        loudest = mel_db.max(axis=0)  # (frames,)
        voiced = mfcc[:, loudest >= loudest.max() - _FRAME_DB_FLOOR]  # (19, voiced frames)
        if voiced.shape[1] < 2:
            return None
        return np.concatenate([voiced.mean(axis=1), voiced.std(axis=1)])  # (38,)


def make_embedding(name: str) -> Embedding:
    """The embedding called ``name`` (one of `EMBEDDINGS`), loaded."""
    if name == "resemblyzer":
        return _Resemblyzer()
    if name == "mfcc":
        return _Mfcc()
    raise ValueError(f"--embedding must be one of {', '.join(EMBEDDINGS)}, got {name!r}")
