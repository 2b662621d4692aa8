"""Word spans from a phone alignment: where each word of pocketsphinx's decoding starts and ends, to the 10 ms frame.

A word starts where its first phone starts and ends where its last phone ends;
silence the decoder found between words (a filler) is a gap, never part of a
word. Where a word meets a pause (a filler, either end of the audio, or 80 ms
or more of silence at the word's own edge, longer than a stop's closure), that
edge is brought in to the first (last) frame of sound inside its edge phone:
the model lends a phone some of the silence beside it (on continuous speech
this took the median boundary error from 12 to 9 ms). Then each boundary is
moved onto a pause that lies across it, which the decoder may have given to
either word's edge phone (`_at_pauses`). Every word keeps at least one frame.
"""

from __future__ import annotations

import numpy as np

from lyre.stt.audio import SAMPLE_RATE

__all__ = ["Phones", "frame_levels", "loud_after", "word_spans"]

_FRAME = SAMPLE_RATE // 100  # the decoder's 10 ms frame
_SOUND_OVER_FLOOR_DB = 15.0  # a frame has sound this far above the audio's quiet frames (its 10th percentile)
_SOUND_BELOW_PEAK_DB = 60.0  # or at least this close to its loudest
_LOUD_BELOW_PEAK_DB = 30.0  # loud: this close to the loudest frame (where a word's end may pass into a filler)
_PAUSE_FRAMES = 8  # silence this long at a word's edge is a pause (a stop's closure is shorter)

Phones = list[tuple[int, int]]  # a word's phones: (first frame, frames) each


def frame_levels(audio: np.ndarray) -> np.ndarray:
    """Each 10 ms frame's level in dB."""
    n = audio.size // _FRAME
    return 10 * np.log10(np.mean(audio[: n * _FRAME].astype(np.float64).reshape(n, _FRAME) ** 2, axis=1) + 1e-12)


def _sound(level: np.ndarray) -> np.ndarray:
    """Whether each frame (of these ``level``s) has sound: well above the quiet frames, or near the loudest."""
    if level.size == 0:
        return np.zeros(0, bool)
    return level > max(float(np.percentile(level, 10)) + _SOUND_OVER_FLOOR_DB, float(level.max()) - _SOUND_BELOW_PEAK_DB)


def loud_after(level: np.ndarray, frame: int) -> int:
    """How many frames from ``frame`` on are loud (`_loud`): speech, where it goes on, or steady noise."""
    return int(np.count_nonzero(_loud(level)[frame:]))


def _loud(level: np.ndarray) -> np.ndarray:
    """Whether each frame is within `_LOUD_BELOW_PEAK_DB` of the loudest."""
    return level > (float(level.max()) if level.size else 0.0) - _LOUD_BELOW_PEAK_DB


def _filler(name: str) -> bool:
    return name.startswith(("<", "["))


def word_spans(segments: list[tuple[str, Phones]], level: np.ndarray) -> list[tuple[int, int]]:
    """Each word's (first frame, past last frame): its first phone's start to its last phone's end, an edge
    brought in to the sound inside its edge phone where it meets a pause: a filler, either end of the
    audio, or silence of its own as long as a pause; then each boundary moved onto a pause across it
    (`_at_pauses`)."""
    sound = _sound(level)
    spans: list[tuple[int, int]] = []
    words: list[Phones] = []
    for k, (name, phones) in enumerate(segments):
        if _filler(name) or not phones:
            continue
        (first, first_length), (last, last_length) = phones[0], phones[-1]
        start, end = first, last + last_length
        heard = np.flatnonzero(sound[start:first + first_length - 1])
        quiet = int(heard[0]) if heard.size else first_length - 1  # silent frames the word opens with
        if quiet >= _PAUSE_FRAMES or k == 0 or _filler(segments[k - 1][0]):
            start += quiet
        heard = np.flatnonzero(sound[last + 1:end])
        quiet = end - (last + 1 + int(heard[-1]) + 1) if heard.size else last_length - 1  # and closes with
        if quiet >= _PAUSE_FRAMES or k + 1 == len(segments) or _filler(segments[k + 1][0]):
            end -= quiet
        spans.append((start, max(end, start + 1)))
        words.append(phones)
    return _at_pauses(spans, words, sound, _loud(level))


def _silences(sound: np.ndarray) -> list[tuple[int, int]]:
    """The runs of silent frames at least as long as a pause: (first, past last) frame."""
    edges = np.flatnonzero(np.diff(np.concatenate(([1], sound.astype(np.int8), [1]))))
    return [(int(a), int(b)) for a, b in zip(edges[::2], edges[1::2]) if b - a >= _PAUSE_FRAMES]


def _at_pauses(spans: list[tuple[int, int]], words: list[Phones],
               sound: np.ndarray, loud: np.ndarray) -> list[tuple[int, int]]:
    """``spans`` with each boundary between two words moved onto a pause across it: the word before ends where
    its sound stops, the word after starts where its sound starts. ``words``: each word's phones.

    The decoder often gives a pause to an edge phone that also holds some sound of the other word (the tail
    of "of" and the silence after it went to the "th" of "three"), so that phone is neither silent at its
    own edge nor beside a filler and the rules above leave it: on held-out words spoken apart, the ends before
    a pause had a p95 error of 70 ms, 14 ms once moved (docs/benchmarks.md). A pause here is the longest silence of a
    pause's length that touches the boundary (from the first frame of the earlier word's last phone to the
    end of the later word's first phone) and has sound of each word on its side. Where a filler lies between
    the words, a word's end passes into it only over ``loud`` frames: there the decoder kept a loud tail out
    (espeak-ng's "a" said alone), but also a faint decay that is no longer the word (Flite's voices, about
    40 dB under the peak). Every word keeps a frame, and the words stay in order.
    """
    silences = _silences(sound)
    out = list(spans)
    for i in range(len(out) - 1):
        (last, last_length), (first, first_length) = words[i][-1], words[i + 1][0]
        (start, end_before), (_, end) = out[i], out[i + 1]
        between = [(b - a, a, b) for a, b in silences if start < a < first + first_length and last < b < end]
        if not between:
            continue
        _, a, b = max(between)
        if last + last_length < first and a > end_before:  # a filler between them: only its loud frames
            heard = np.flatnonzero(loud[end_before:a])
            a = end_before + int(heard[-1]) + 1 if heard.size else end_before
        out[i], out[i + 1] = (start, a), (b, end)
    for i in range(1, len(out)):
        start = max(out[i][0], out[i - 1][1])
        out[i] = (start, max(out[i][1], start + 1))
    return out
