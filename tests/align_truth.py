"""Utterances whose word boundaries are known, for forced alignment.

Continuous speech (the case that matters): whole sentences spoken in one go by
libespeak-ng, words running together, each word's start read from the
synthesiser's own word event (tests/espeak_events.py says what its position
means). A word ends where the next begins, or where a pause after it begins
(espeak-ng's pause phonemes). Where a word follows silence and starts with a
stop, its closure is silence too and no aligner can see it: its start is the
first sample of sound.

    utterance = continuous_utterance("Your order of 3 items comes to 42 dollars.", voice="en-us+f3", wpm=170)
    utterance = flite_utterance("Your order comes to 42 dollars.", voice="rms")  # CMU Flite, where installed
    utterance = paused_utterance("I paid 40 dollars <laugh> for it.", seed=1)   # words spoken one by one
    utterance.audio, utterance.text, utterance.words  # [(word as written, start s, end s)]

Both add a faint seeded noise floor (-70 dBFS), as real recordings and TTS
output have, so no aligner is handed digital silence. Emotion tags are not
spoken: a tag stands for 250 ms of that floor.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

import flite_events
from espeak_events import Spoken, synthesize
from speech import VOICE, WORDS_PER_MINUTE, resample, speak

__all__ = ["ALIGN_SENTENCES", "VOICES", "KnownUtterance", "continuous_utterance", "flite_utterance",
           "paused_utterance", "truth_set"]

RATE = 16_000
EDGE_S = 0.25  # silence before the first word and after the last
TAG_S = 0.25
NOISE_DBFS = -70.0
_TAG = re.compile(r"<[A-Za-z_]+>")

# What the aligner meets: plain words, numbers, an abbreviation, punctuation, an emotion tag, pauses at commas.
ALIGN_SENTENCES = (
    "I would like to book a table for dinner tomorrow evening.",
    "Please cancel my appointment with the dentist.",
    "Your order of 3 items comes to 42 dollars.",
    "Dr. Smith will see you at 10 tomorrow <laugh> if that suits you.",
    "Thank you very much for your help!",
    "Could you send the receipt to my email address?",
    "The meeting moved to Friday, so I need a later flight.",
    "Sure, I can help with that. Your package shipped this morning and should arrive on Thursday.",
    "The pharmacy on Main Street closes at nine tonight, but the one by the station is open late.",
    "Let me check. You have two meetings tomorrow, one at ten and one just after lunch.",
)

# Speakers and rates: espeak-ng's American and British ("en") voices, male and female variants, slow to fast.
VOICES = (("en-us", 150), ("en-us+f3", 175), ("en", 135), ("en-us+m3", 195))


@dataclass(frozen=True)
class KnownUtterance:
    text: str
    audio: np.ndarray  # float32, 16 kHz mono
    # each word as written, its true start and end in seconds (None where the synthesiser said it together
    # with its neighbour: espeak-ng joins some function words, "with the", into one word event)
    words: list[tuple[str, float | None, float | None]]

    def boundaries(self) -> list[tuple[int, str, float]]:
        """Every known boundary: (word index, "start" or "end", true time in seconds)."""
        return [(i, side, t) for i, (_, start, end) in enumerate(self.words)
                for side, t in (("start", start), ("end", end)) if t is not None]


def _written(text: str) -> list[tuple[str, int, int]]:
    """``text``'s words as lyre writes them back (punctuation pieces joined to a neighbour), each with its
    span of characters [first, past last); tags left out."""
    words: list[tuple[str, int, int]] = []
    leading: tuple[str, int] | None = None
    for match in re.finditer(r"\S+", text):
        piece, a, b = match.group(), match.start(), match.end()
        if _TAG.fullmatch(piece):
            continue
        if any(ch.isalnum() for ch in piece):
            if leading is not None:
                piece, a = leading[0] + " " + piece, leading[1]
                leading = None
            words.append((piece, a, b))
        elif words:
            words[-1] = (f"{words[-1][0]} {piece}", words[-1][1], b)
        else:
            leading = (piece, a)
    return words


def _word_times(spoken: Spoken) -> list[tuple[int, int, int]]:
    """Each word event's (first char, start sample, end sample) at espeak-ng's rate; see the module docstring."""
    sound = np.abs(spoken.audio.astype(np.int32)) > 16  # above -66 dBFS: the clean audio's silence is zero
    out = []
    after_pause = True
    for i, (char, _, sample) in enumerate(spoken.words):
        following = spoken.words[i + 1][2] if i + 1 < len(spoken.words) else spoken.audio.size
        phones = [(at, name) for at, name in spoken.phonemes if sample <= at < following]
        end = following
        while len(phones) > 1 and phones[-1][1].startswith("_"):  # pauses after the word's last phoneme
            end = phones.pop()[0]
        start = sample
        if after_pause:  # a stop's closure after silence is silence: the word starts with its sound
            heard = np.flatnonzero(sound[sample:end])
            start = sample + int(heard[0]) if heard.size else sample
        out.append((char, start, end))
        after_pause = end < following
    return out


def _noise(samples: int, rng: np.random.Generator) -> np.ndarray:
    return (rng.standard_normal(samples) * 10 ** (NOISE_DBFS / 20)).astype(np.float32)


def continuous_utterance(text: str, voice: str = "en-us", wpm: int = 150, seed: int = 0) -> KnownUtterance:
    """``text`` spoken in one go per stretch between tags; see the module docstring."""
    rng = np.random.default_rng(seed)
    pieces = [np.zeros(int(EDGE_S * RATE), np.float32)]
    at = EDGE_S
    times: dict[int, tuple[float, float]] = {}  # first char of a word event in ``text`` -> (start s, end s)
    bounds = [0, *(x for tag in _TAG.finditer(text) for x in (tag.start(), tag.end())), len(text)]
    for k in range(0, len(bounds), 2):
        if k:  # a tag stood before this part
            pieces.append(np.zeros(int(TAG_S * RATE), np.float32))
            at += TAG_S
        part = text[bounds[k]:bounds[k + 1]]
        if not part.strip():
            continue
        spoken = synthesize(part, voice, wpm)
        for char, start, end in _word_times(spoken):
            times[bounds[k] + char] = (at + start / spoken.rate, at + end / spoken.rate)
        audio = resample(spoken.audio, RATE, spoken.rate)
        pieces.append(audio)
        at += audio.size / RATE
    pieces.append(np.zeros(int(EDGE_S * RATE), np.float32))
    audio = np.concatenate(pieces)
    words: list[tuple[str, float | None, float | None]] = []
    for word, a, b in _written(text):
        inside = sorted(c for c in times if a <= c < b)
        if inside:  # a word espeak-ng says as several (a number, an abbreviation) has several events
            words.append((word, times[inside[0]][0], times[inside[-1]][1]))
        else:  # said within the word before: neither its start nor that word's end is known
            words[-1] = (words[-1][0], words[-1][1], None)
            words.append((word, None, None))
    return KnownUtterance(text, (audio + _noise(audio.size, rng)).astype(np.float32), words)


def flite_utterance(text: str, voice: str = "slt", seed: int = 0) -> KnownUtterance:
    """``text`` spoken in one go per stretch between tags by CMU Flite (tests/flite_events.py says how its
    times are read): a synthesiser with nothing in common with espeak-ng."""
    rng = np.random.default_rng(seed)
    pieces = [np.zeros(int(EDGE_S * RATE), np.float32)]
    at = EDGE_S
    words: list[tuple[str, float | None, float | None]] = []
    for k, part in enumerate(_TAG.split(text)):
        if k:
            pieces.append(np.zeros(int(TAG_S * RATE), np.float32))
            at += TAG_S
        written = _written(part)
        if not written:
            continue
        spoken = flite_events.synthesize(part, voice)
        if len(spoken.tokens) != len(written):
            raise ValueError(f"Flite read {len(spoken.tokens)} tokens in {part!r}, lyre writes {len(written)} words")
        words += [(word, at + start, at + end) for (word, _, _), (_, start, end, _) in zip(written, spoken.tokens)]
        audio = resample(spoken.audio, RATE, spoken.rate)
        pieces.append(audio)
        at += audio.size / RATE
    pieces.append(np.zeros(int(EDGE_S * RATE), np.float32))
    audio = np.concatenate(pieces)
    return KnownUtterance(text, (audio + _noise(audio.size, rng)).astype(np.float32), words)


def _voiced(audio: np.ndarray) -> np.ndarray:
    """``audio`` cut to its 10 ms blocks within 40 dB of its loudest."""
    block = RATE // 100
    n = audio.size // block
    level = 10 * np.log10(np.mean(audio[: n * block].reshape(n, block) ** 2, axis=1) + 1e-12)
    loud = np.flatnonzero(level > level.max() - 40)
    return audio[loud[0] * block : (loud[-1] + 1) * block]


def paused_utterance(text: str, seed: int = 0, voice: str = VOICE, wpm: int = WORDS_PER_MINUTE) -> KnownUtterance:
    """Each word spoken alone (by ``voice`` at ``wpm``), cut to its voiced part, the words joined by seeded
    70-300 ms gaps: every boundary is a pause (the easy case)."""
    rng = np.random.default_rng(seed)
    pieces = [np.zeros(int(EDGE_S * RATE), np.float32)]
    words = []
    at = EDGE_S
    for word in text.split():
        if _TAG.fullmatch(word):
            pieces.append(np.zeros(int(TAG_S * RATE), np.float32))
            at += TAG_S
            continue
        voiced = _voiced(speak(word.strip(".,!?"), voice=voice, wpm=wpm))
        words.append((word, at, at + voiced.size / RATE))
        gap = np.zeros(int(rng.uniform(0.07, 0.3) * RATE), np.float32)
        pieces += [voiced, gap]
        at += (voiced.size + gap.size) / RATE
    pieces.append(np.zeros(int(EDGE_S * RATE), np.float32))
    audio = np.concatenate(pieces)
    return KnownUtterance(text, (audio + _noise(audio.size, rng)).astype(np.float32), words)


def truth_set(voices: tuple[tuple[str, int], ...] = VOICES,
              sentences: tuple[str, ...] = ALIGN_SENTENCES) -> list[KnownUtterance]:
    """Every sentence in every voice, continuous."""
    return [continuous_utterance(text, voice, wpm, seed=i)
            for v, (voice, wpm) in enumerate(voices) for i, text in enumerate(sentences, start=100 * v)]
