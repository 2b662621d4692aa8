"""espeak-ng through its library, with the synthesiser's own timing: where each word and phoneme starts.

    spoken = synthesize("Please cancel my appointment.", voice="en-us", wpm=150)
    spoken.audio                 # int16 at spoken.rate (22050 Hz)
    spoken.words                 # [(first char, chars, sample)] for each word event, in order
    spoken.phonemes              # [(sample, phoneme mnemonic)] for each phoneme event; pauses start with "_"

What the positions mean, checked against the audio's energy (10 ms frames): a word event's sample is
where the word's first phoneme begins, a stop consonant's closure included (the phoneme event of a stop
comes later, at its burst), and after a pause it is where the pause ends; a pause phoneme's event is
where the sound before it stops. The silence espeak-ng writes is digital zero.

The library keeps one global state: calls are serialised here.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import threading
from dataclasses import dataclass

import numpy as np

__all__ = ["ESPEAK_RATE", "Spoken", "synthesize"]

ESPEAK_RATE = 22_050

# espeak_ng's C API (speak_lib.h)
_SYNCHRONOUS = 2  # AUDIO_OUTPUT_SYNCHRONOUS: the callback gets every buffer before espeak_Synth returns
_PHONEME_EVENTS = 0x0001  # espeakINITIALIZE_PHONEME_EVENTS
_UTF8 = 1  # espeakCHARS_UTF8
_RATE = 1  # espeakRATE
_LIST_TERMINATED, _WORD, _PHONEME = 0, 1, 7


class _EventId(ctypes.Union):
    _fields_ = [("number", ctypes.c_int), ("name", ctypes.c_char_p), ("string", ctypes.c_char * 8)]


class _Event(ctypes.Structure):
    _fields_ = [("type", ctypes.c_int), ("unique_identifier", ctypes.c_uint), ("text_position", ctypes.c_int),
                ("length", ctypes.c_int), ("audio_position", ctypes.c_int), ("sample", ctypes.c_int),
                ("user_data", ctypes.c_void_p), ("id", _EventId)]


_Callback = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(ctypes.c_short), ctypes.c_int, ctypes.POINTER(_Event))


@dataclass(frozen=True)
class Spoken:
    text: str
    audio: np.ndarray  # int16, (samples,)
    words: list[tuple[int, int, int]]  # (first char, 0-based; chars; sample)
    phonemes: list[tuple[int, str]]  # (sample, mnemonic)
    rate: int = ESPEAK_RATE


class _Espeak:
    def __init__(self) -> None:
        name = ctypes.util.find_library("espeak-ng") or "libespeak-ng.so.1"
        try:
            self.lib = ctypes.CDLL(name)
        except OSError as exc:
            raise RuntimeError("the alignment tests need libespeak-ng (Debian: apt-get install espeak-ng)") from exc
        rate = self.lib.espeak_Initialize(_SYNCHRONOUS, 0, None, _PHONEME_EVENTS)
        if rate != ESPEAK_RATE:
            raise RuntimeError(f"libespeak-ng writes {rate} Hz; expected {ESPEAK_RATE}")
        self.lock = threading.Lock()
        self._chunks: list[np.ndarray] = []
        self._events: list[tuple[int, int, int, int, str]] = []
        self._callback = _Callback(self._receive)  # kept: the library holds only the pointer
        self.lib.espeak_SetSynthCallback(self._callback)

    def _receive(self, wav: ctypes._Pointer, count: int, events: ctypes._Pointer) -> int:
        i = 0
        while events[i].type != _LIST_TERMINATED:
            e = events[i]
            name = e.id.string.decode() if e.type == _PHONEME else ""
            self._events.append((e.type, e.text_position, e.length, e.sample, name))
            i += 1
        if count > 0:
            self._chunks.append(np.ctypeslib.as_array(wav, (count,)).copy())
        return 0

    def synthesize(self, text: str, voice: str, wpm: int) -> Spoken:
        with self.lock:
            self._chunks, self._events = [], []
            if self.lib.espeak_SetVoiceByName(voice.encode()) != 0:
                raise ValueError(f"espeak-ng has no voice {voice!r}")
            self.lib.espeak_SetParameter(_RATE, wpm, 0)
            data = text.encode()
            self.lib.espeak_Synth(data, len(data) + 1, 0, 1, 0, _UTF8, None, None)
            self.lib.espeak_Synchronize()
            audio = np.concatenate(self._chunks) if self._chunks else np.zeros(0, np.int16)
            # text_position counts characters from 1 (of the UTF-8 text as characters)
            words = [(pos - 1, length, sample) for kind, pos, length, sample, _ in self._events if kind == _WORD]
            phonemes = [(sample, name) for kind, _, _, sample, name in self._events if kind == _PHONEME]
        return Spoken(text, audio, words, phonemes)


@functools.cache
def _engine() -> _Espeak:
    return _Espeak()


def synthesize(text: str, voice: str = "en-us", wpm: int = 150) -> Spoken:
    """``text`` spoken by libespeak-ng in one go (``voice`` as ``espeak-ng --voices`` names it, variants
    with ``+``), with its word and phoneme events."""
    return _engine().synthesize(text, voice, wpm)
