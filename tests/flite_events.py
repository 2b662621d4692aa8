"""CMU Flite through its library, with the synthesiser's own timing: a second, independent source of truth.

    spoken = synthesize("Please cancel my appointment.", voice="slt")
    spoken.audio, spoken.rate     # int16 at 16 kHz
    spoken.tokens                 # [(token as Flite read it, start s, end s, after a pause)] for each spoken token

Flite's statistical voices (slt, rms, awb: clustergen) make their waveform from
the segment durations they predict, so each segment's ``end`` is where its
sound ends; checked against the audio's energy (5 ms frames): a word after a
pause rises within 5 ms of its first segment's start, and the last segment
before a pause falls within 10 ms of its end. A word's start is the end of the
segment before its first; where that segment is a pause and the word opens
with a stop, the closure is silence: the word starts where its sound does (the
first 10 ms frame within 45 dB of the loudest).

Optional: the benchmarks use it where Debian's flite is installed (libflite1);
the tests use espeak-ng.
"""

from __future__ import annotations

import ctypes
import functools
from dataclasses import dataclass

import numpy as np

__all__ = ["FLITE_VOICES", "FliteSpoken", "available", "synthesize"]

FLITE_VOICES = ("slt", "rms", "awb")
_P = ctypes.c_void_p
_SOUND_BELOW_PEAK_DB = 45.0


class _Wave(ctypes.Structure):
    _fields_ = [("type", ctypes.c_char_p), ("sample_rate", ctypes.c_int), ("num_samples", ctypes.c_int),
                ("num_channels", ctypes.c_int), ("samples", ctypes.POINTER(ctypes.c_short))]


@dataclass(frozen=True)
class FliteSpoken:
    audio: np.ndarray  # int16, (samples,)
    rate: int
    tokens: list[tuple[str, float, float, bool]]


def _declare(lib: ctypes.CDLL, name: str, restype: object, *argtypes: object) -> None:
    function = getattr(lib, name)
    function.restype, function.argtypes = restype, list(argtypes)


@functools.cache
def _flite() -> ctypes.CDLL:
    lib = ctypes.CDLL("libflite.so.1", mode=ctypes.RTLD_GLOBAL)
    for dependency in ("libflite_usenglish.so.1", "libflite_cmulex.so.1"):
        ctypes.CDLL(dependency, mode=ctypes.RTLD_GLOBAL)
    lib.flite_init()
    _declare(lib, "flite_synth_text", _P, ctypes.c_char_p, _P)
    _declare(lib, "utt_relation", _P, _P, ctypes.c_char_p)
    for name in ("relation_head", "item_next", "item_daughter", "item_last_daughter"):
        _declare(lib, name, _P, _P)
    _declare(lib, "ffeature_string", ctypes.c_char_p, _P, ctypes.c_char_p)
    _declare(lib, "ffeature_float", ctypes.c_float, _P, ctypes.c_char_p)
    _declare(lib, "utt_wave", ctypes.POINTER(_Wave), _P)
    _declare(lib, "delete_utterance", None, _P)
    return lib


@functools.cache
def _voice(name: str) -> int:
    library = ctypes.CDLL(f"libflite_cmu_us_{name}.so.1")
    register = getattr(library, f"register_cmu_us_{name}")
    register.restype, register.argtypes = _P, [ctypes.c_char_p]
    return register(None)


def available() -> bool:
    try:
        _flite()
    except OSError:
        return False
    return True


def synthesize(text: str, voice: str = "slt") -> FliteSpoken:
    """``text`` spoken by Flite's ``voice`` in one go, with each token's times."""
    lib = _flite()
    utterance = lib.flite_synth_text(text.encode(), _voice(voice))
    try:
        wave = lib.utt_wave(utterance).contents
        audio = np.ctypeslib.as_array(wave.samples, (wave.num_samples,)).copy()
        rate = wave.sample_rate
        frame = rate // 100
        n = audio.size // frame
        level = 10 * np.log10(np.mean(audio[: n * frame].astype(np.float64).reshape(n, frame) ** 2, axis=1) + 1e-9)
        sound = level > level.max() - _SOUND_BELOW_PEAK_DB
        tokens = []
        token = lib.relation_head(lib.utt_relation(utterance, b"Token"))
        while token:
            first, last = lib.item_daughter(token), lib.item_last_daughter(token)
            if first:  # a token that says nothing (a lone dash) has no words
                start = lib.ffeature_float(first, b"R:SylStructure.daughter1.daughter1.R:Segment.p.end")
                end = lib.ffeature_float(last, b"R:SylStructure.daughtern.daughtern.R:Segment.end")
                before = lib.ffeature_string(first, b"R:SylStructure.daughter1.daughter1.R:Segment.p.name")
                after_pause = before in (b"pau", b"0")
                if after_pause:
                    heard = np.flatnonzero(sound[int(start * 100):int(end * 100)])
                    start = max(start, float(int(start * 100) + heard[0]) / 100) if heard.size else start
                name = lib.ffeature_string(token, b"name").decode()
                tokens.append((name, float(start), float(end), after_pause))
            token = lib.item_next(token)
    finally:
        lib.delete_utterance(utterance)
    return FliteSpoken(audio, rate, tokens)
