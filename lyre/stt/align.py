"""Forced alignment: when each word of a known text is spoken in audio that speaks it.

Cheaper than transcribing: one encoder pass over the audio (a window fitted to
it, not Whisper's 30 s) and one decoder pass over the given text's tokens, the
word times read from the alignment heads' cross-attention by CTranslate2's
``align`` (dynamic time warping, as faster-whisper's word timestamps do). That
raw alignment gives pauses no time (each word starts where the one before
ended, the first at 0), so a boundary near a pause is moved onto it and each
word's span is then shrunk to the voiced 10 ms frames inside it. On continuous
speech (tests/align_truth.py, benchmarks/align.py) that snapping still helps
(median boundary error 44 ms against 62 ms raw), but it leaves this aligner far
behind the phone aligner (lyre.stt.phone_align), which English uses; this one
serves the other languages Whisper speaks.

Where the heads lose the audio altogether (speech they cannot follow, noise such
as the demo TTS model's), the warping path stays on one word and piles the rest
at the end, 10 ms each: such a stretch is spread over its time by the words'
lengths (`spread_piled`) rather than told as one word lasting the whole audio
(what a Mandarin text over the demo TTS model's noise got).

Words come back as `lyre.stt.words.written_words` gives them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from typing import TYPE_CHECKING

import numpy as np

from lyre.stt.audio import SAMPLE_RATE
from lyre.stt.window import FULL_WINDOW_FRAMES, SAMPLES_PER_FRAME
from lyre.stt.words import UNSPACED_LANGUAGES

if TYPE_CHECKING:
    from faster_whisper import WhisperModel

__all__ = ["AlignedWord", "Alignment", "TextTooLongToAlign", "align_passes", "snap_to_voice", "spread_piled"]

_ENCODER_FRAMES_PER_S = 50  # one encoder frame per 20 ms
_PAD_FRAMES = 100  # feature frames (10 ms) of silence after the audio in the encoded window
_MEDIAN_FILTER = 7  # over the attention weights, as faster-whisper's word timestamps use
# Whisper's decoder holds 448 positions (every size): the prompt, the text's tokens and the end.
_DECODER_POSITIONS = 448


class TextTooLongToAlign(ValueError):
    """More text than Whisper's decoder holds at once: the caller's input, not the model's failure."""
_VOICE_FRAME = SAMPLE_RATE // 100  # 10 ms
_VOICE_BELOW_PEAK_DB = 35.0  # a 10 ms frame is voiced within this many dB of the loudest
_VOICE_FLOOR_DBFS = -55.0  # and above this, whatever the peak
# An unvoiced run of 80 ms or more is a pause: a stop consonant's closure inside a word is shorter (at 50 ms,
# closures were taken for pauses and boundaries moved into words).
_MIN_PAUSE_FRAMES = 8
_MIN_WORD_S = 0.01  # every word keeps at least one frame
_PAUSE_REACH_S = 0.3  # how far from the alignment heads' boundary a pause may be and still be it
# A word longer than 1 s, and than 0.3 s a letter (Mandarin's slowest syllable, held at a sentence's end, is
# about half that), next to words of under 30 ms (none is said so fast): the heads lost the audio there.
_STRETCHED_S, _STRETCHED_PER_LETTER_S, _PILED_S = 1.0, 0.3, 0.03


@dataclass(frozen=True)
class AlignedWord:
    text: str  # as written in the input, punctuation attached
    start: float  # seconds from the start of the audio
    end: float


@dataclass(frozen=True)
class Alignment:
    words: tuple[AlignedWord, ...]
    duration: float  # of the audio, in seconds


def encoded_frames(samples: int) -> int:
    """Feature frames (10 ms) encoded to align ``samples`` of audio: the audio and 1 s of silence,
    rounded up to an even count, at most Whisper's 30 s."""
    frames = math.ceil(samples / SAMPLES_PER_FRAME) + _PAD_FRAMES
    return min(FULL_WINDOW_FRAMES, frames + frames % 2)


def align_passes(model: WhisperModel, audios: list[np.ndarray], texts: list[list[str]],
                 language: str = "en", snap: bool = True) -> list[Alignment | TextTooLongToAlign]:
    """Align each audio (float32, 16 kHz, at most 30 s) with its words, all in one encoder batch.

    Raw times from the alignment heads, then `snap_to_voice` (``snap`` False: only made ordered, each word
    a positive length, as benchmarks/align.py compares); an empty word list aligns to nothing; words of more
    tokens than Whisper's decoder holds get `TextTooLongToAlign` (the other rows align).
    """
    from faster_whisper.audio import pad_or_trim
    from faster_whisper.tokenizer import Tokenizer

    tokenizer = Tokenizer(model.hf_tokenizer, model.model.is_multilingual, task="transcribe", language=language)
    # The warping path starts at the window's first frame: leading silence would go to the first word and
    # push every later word early. Each audio is aligned from just before its voice starts.
    offsets = [_voice_start(a) for a in audios]
    full, audios = audios, [a[o:] for a, o in zip(audios, offsets)]
    frames = encoded_frames(max(a.size for a in audios))
    features = np.stack([pad_or_trim(model.feature_extractor(a)[..., :-1], frames) for a in audios])
    encoded = model.encode(features)
    # Whisper writes a space before each word of a spaced language, and none between Chinese or Japanese words:
    # their tokens as it writes them.
    space = "" if language in UNSPACED_LANGUAGES else " "
    per_word = [[tokenizer.encode(space + word) for word in words] for words in texts]
    tokens = [[t for word in words for t in word] for words in per_word]
    room = _DECODER_POSITIONS - len(tokenizer.sot_sequence) - 1
    results: dict[int, object] = {i: TextTooLongToAlign(
        f"text: {len(t)} tokens; Whisper's aligner takes at most {room} at once (about {room * 3 // 4} English "
        f"words)") for i, t in enumerate(tokens) if len(t) > room}
    wanted = [i for i, t in enumerate(tokens) if t and i not in results]
    if wanted:
        import ctranslate2

        # CTranslate2 aligns a batch whose rows share the encoder output's batch: align the rows with words.
        rows = encoded if len(wanted) == len(audios) else ctranslate2.StorageView.from_array(
            np.asarray(encoded)[wanted])
        found = model.model.align(rows, tokenizer.sot_sequence, [tokens[i] for i in wanted],
                                  [math.ceil(audios[i].size / SAMPLES_PER_FRAME) for i in wanted],
                                  median_filter_width=_MEDIAN_FILTER)
        results.update(zip(wanted, found))
    out: list[Alignment | TextTooLongToAlign] = []
    for i, (audio, words) in enumerate(zip(full, texts)):
        duration = audio.size / SAMPLE_RATE
        if i not in results:
            out.append(Alignment((), duration))
            continue
        if isinstance(result := results[i], TextTooLongToAlign):
            out.append(result)
            continue
        starts, ends = _word_times(result.alignments, [len(t) for t in per_word[i]])  # type: ignore[attr-defined]
        shift = offsets[i] / SAMPLE_RATE
        starts, ends = np.clip(starts + shift, 0, duration), np.clip(ends + shift, 0, duration)
        spans = snap_to_voice(audio, starts, ends) if snap else _ordered(list(starts), list(ends), duration)
        spans = spread_piled(words, spans)
        out.append(Alignment(tuple(AlignedWord(w, round(s, 3), round(e, 3)) for w, (s, e) in zip(words, spans)),
                             duration))
    return out


def _word_times(alignments: list[tuple[int, int]], counts: list[int]) -> tuple[np.ndarray, np.ndarray]:
    """Each word's start and end in seconds from the warping path of (text token, time frame) pairs:
    a word starts where the path first reaches its first token, and ends where it reaches the next word's
    (the last word: the end-of-text token's)."""
    text_index = np.array([pair[0] for pair in alignments])
    time_index = np.array([pair[1] for pair in alignments])
    jumps = np.pad(np.diff(text_index), (1, 0), constant_values=1).astype(bool)
    jump_times = time_index[jumps] / _ENCODER_FRAMES_PER_S  # one per text token, then the end of text
    bounds = np.concatenate(([0], np.cumsum(counts)))
    bounds = np.minimum(bounds, len(jump_times) - 1)
    return jump_times[bounds[:-1]], jump_times[bounds[1:]]


def _voiced_frames(audio: np.ndarray) -> np.ndarray:
    """Whether each 10 ms frame of ``audio`` is voiced: within 35 dB of the loudest, above -55 dBFS."""
    n = audio.size // _VOICE_FRAME
    if n == 0:
        return np.zeros(0, bool)
    blocks = audio[: n * _VOICE_FRAME].astype(np.float64).reshape(n, _VOICE_FRAME)
    level = 10 * np.log10(np.mean(blocks**2, axis=1) + 1e-12)
    return level > max(_VOICE_FLOOR_DBFS, float(level.max()) - _VOICE_BELOW_PEAK_DB)


def _voice_start(audio: np.ndarray) -> int:
    """The sample 100 ms before the first voiced frame (0 when there is none)."""
    voiced = np.flatnonzero(_voiced_frames(audio))
    return 0 if not voiced.size else max(0, int(voiced[0]) - 10) * _VOICE_FRAME


def _pauses(voiced: np.ndarray) -> list[tuple[int, int]]:
    """The unvoiced runs between voiced frames, at least `_MIN_PAUSE_FRAMES` long: (first, past last) frame."""
    edges = np.flatnonzero(np.diff(np.concatenate(([1], voiced.astype(np.int8), [1]))))
    runs = list(zip(edges[::2], edges[1::2]))  # unvoiced runs, including any at either end
    return [(int(a), int(b)) for a, b in runs if b - a >= _MIN_PAUSE_FRAMES and a > 0 and b < voiced.size]


def snap_to_voice(audio: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> list[tuple[float, float]]:
    """Word spans moved onto the audio's pauses, then made ordered and not overlapping.

    The alignment heads place a boundary between two words within a couple of hundred milliseconds;
    where a pause lies that close, the boundary is the pause (the word before ends where it starts, the
    word after starts where it ends), each pause used once, in order. The first word starts no earlier
    than the voice does and the last ends no later, and every span shrinks to the voiced frames inside it
    (a span with none keeps its place). Every word keeps a positive length.
    """
    voiced = _voiced_frames(audio)
    n = voiced.size
    if n == 0 or not voiced.any():
        return _ordered([float(x) for x in starts], [float(x) for x in ends], audio.size / SAMPLE_RATE)
    frame_s = _VOICE_FRAME / SAMPLE_RATE
    starts, ends = [float(x) for x in starts], [float(x) for x in ends]
    heard = np.flatnonzero(voiced)
    starts[0] = max(starts[0], heard[0] * frame_s)
    ends[-1] = min(ends[-1], (heard[-1] + 1) * frame_s)
    pauses = [(a * frame_s, b * frame_s) for a, b in _pauses(voiced)]
    next_pause = 0
    for k in range(len(starts) - 1):
        boundary = (ends[k] + starts[k + 1]) / 2
        best, best_distance = None, _PAUSE_REACH_S
        for i in range(next_pause, len(pauses)):
            a, b = pauses[i]
            if a <= starts[k]:
                continue  # the word before would end before it starts
            distance = max(a - boundary, boundary - b, 0.0)
            if distance <= best_distance:
                best, best_distance = i, distance
            if a - boundary > _PAUSE_REACH_S:
                break
        if best is not None:
            ends[k], starts[k + 1] = pauses[best]
            next_pause = best + 1
    spans = []
    for start, end in zip(starts, ends):  # each span tight on the voice inside it
        first, last = int(start / frame_s), min(n, math.ceil(end / frame_s))
        inside = np.flatnonzero(voiced[first:last])
        if inside.size:
            start, end = (first + inside[0]) * frame_s, (first + inside[-1] + 1) * frame_s
        spans.append((start, end))
    return _ordered([a for a, _ in spans], [b for _, b in spans], audio.size / SAMPLE_RATE)


def spread_piled(words: list[str], spans: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """``spans``, or where the alignment lost the audio, its words spread evenly by letters (letters and
    digits, at least one a word) over the time of the stretch it lost: from the first to the last of its
    words that are far too long for their letters (see `_STRETCHED_S`) or under 30 ms. Lost means both kinds
    are there: words under 30 ms alone are the end of a segment cut before its text (its words not said), a
    long word alone a held syllable or a pause no snapping found."""
    letters = [max(1, sum(ch.isalnum() for ch in word)) for word in words]
    lengths = [end - start for start, end in spans]
    stretched = [i for i, n in enumerate(lengths) if n > max(_STRETCHED_S, _STRETCHED_PER_LETTER_S * letters[i])]
    piled = [i for i, n in enumerate(lengths) if n < _PILED_S]
    if not stretched or not piled:
        return list(spans)
    first, last = min(stretched + piled), max(stretched + piled)
    a, b = spans[first][0], spans[last][1]
    edges = a + (b - a) * np.cumsum([0, *letters[first:last + 1]]) / sum(letters[first:last + 1])
    return [*spans[:first], *((float(x), float(y)) for x, y in zip(edges[:-1], edges[1:])), *spans[last + 1:]]


def _ordered(starts: list[float], ends: list[float], duration: float) -> list[tuple[float, float]]:
    """Each word starting no earlier than the one before ends, and ending at least `_MIN_WORD_S` after it
    starts, the last no later than ``duration`` (words the heads piled up at the end make room backwards)."""
    spans = []
    previous_end = 0.0
    for start, end in zip(starts, ends):
        start = max(float(start), previous_end)
        end = max(float(end), start + _MIN_WORD_S)
        spans.append((start, end))
        previous_end = end
    limit = max(duration, _MIN_WORD_S * len(spans))
    for i in range(len(spans) - 1, -1, -1):
        end = min(spans[i][1], limit)
        start = min(spans[i][0], end - _MIN_WORD_S)
        spans[i] = (start, end)
        limit = start
    return spans
