"""`WordTimer`'s word times as told, whatever the aligner places: inside each segment's audio, in order, a frame
long at least; a cut segment's words never spoken left out; a word cut between segments told once. An aligner
that places words as a script says stands in for the real ones (tests/stt/test_align.py aligns real speech;
tests/server/test_segment_budgets.py runs a real server)."""

from __future__ import annotations

import asyncio
from collections.abc import Hashable

import numpy as np

from lyre.stt import AlignedWord, Alignment, WordTimer, written_words

RATE = 24_000


class _Scripted:
    """Places the words it is given at the spans a script gives (seconds from the segment's start), one script
    per call; records whether each call was ``partial``."""

    def __init__(self, *scripts: list[tuple[float, float]]) -> None:
        self._scripts = list(scripts)
        self.partial: list[bool] = []

    async def align(self, audio: np.ndarray, words: list[str], language: str | None, session: Hashable,
                    **partial: bool) -> Alignment:
        self.partial.append(partial.get("partial", False))
        spans = self._scripts.pop(0)
        return Alignment(tuple(AlignedWord(w, s, e) for w, (s, e) in zip(words, spans)), audio.size / 16_000)


def _told(aligner: _Scripted, segments: list[tuple[str, float, bool]], text: str | None = None
          ) -> list[list[AlignedWord]]:
    """Each segment (text, seconds of audio, cut) one after another in one stream, as its words are told."""
    async def run() -> list[list[AlignedWord]]:
        timer = WordTimer(aligner, "s", rate=RATE)
        if text is not None:
            timer.expect(text)
        at = 0
        for words, seconds, cut in segments:
            n = int(seconds * RATE)
            timer.add(np.full(n, 1000, np.int16))
            timer.segment(words, at, at + n, cut=cut)
            at += n
        return await timer.rest()
    return asyncio.run(run())


def _well_formed(told: list[list[AlignedWord]], ends_s: list[float]) -> None:
    """Every word inside its segment's audio (segments end at ``ends_s``), a frame long, none overlapping."""
    start = 0.0
    previous = 0.0
    for words, end in zip(told, ends_s):
        for w in words:
            assert start <= w.start and w.start >= previous and w.end <= end + 1e-9, (w, start, end)
            assert w.end - w.start >= 0.01 - 1e-9, w
            previous = w.end
        start = end


def test_words_placed_past_a_segments_audio_never_overlap_the_next_segments() -> None:
    """The review's case: 24 words of a segment cut after 0.17 s, each given 10 ms from its start, so they ran
    0.24 s, past the audio and over the next segment's words."""
    first, second = "When you arrive at the station, take the north exit past the flower stall and cross the " \
                    "avenue at the second set of lights.", "Walk along the canal for five minutes."
    squeezed = [[(0.01 * i, 0.01 * (i + 1)) for i in range(len(written_words(t)))] for t in (first, second)]
    told = _told(_Scripted(*squeezed), [(first, 0.171, False), (second, 0.171, False)])
    _well_formed(told, [0.171, 0.342])
    assert [w.text for w in told[0]] == written_words(first)[:17]  # what 0.17 s holds at 10 ms a word
    assert [w.text for w in told[1]] == written_words(second)


def test_a_cut_segment_is_aligned_partial_and_its_squeezed_last_words_are_left_out() -> None:
    text = "Please cancel my appointment with the dentist."
    script = [(0.3, 0.63), (0.63, 1.15), (1.15, 1.25), (1.25, 1.26), (1.26, 1.27), (1.27, 1.28), (1.28, 1.29)]
    aligner = _Scripted(script, script)
    told = _told(aligner, [(text, 1.3, True), (text, 1.3, False)])
    assert aligner.partial == [True, False]
    assert [w.text for w in told[0]] == ["Please", "cancel", "my"]  # the rest had 10 ms each: never said
    assert [w.text for w in told[1]] == written_words(text)  # not cut: every word the audio holds
    _well_formed(told, [1.3, 2.6])


def test_a_word_longer_than_a_segment_is_told_once_whole() -> None:
    long = "a" * 404
    pieces = [("Hi " + long[:185], 3.4, True), (long[185:372], 3.4, True), (long[372:] + " end.", 3.4, True)]
    aligner = _Scripted([(0.1, 0.4), (0.5, 3.3)], [(0.1, 3.3)], [(0.1, 2.0), (2.1, 2.6)])
    told = [w for words in _told(aligner, pieces, text="Hi " + long + " end.") for w in words]
    assert [w.text for w in told] == ["Hi", long, "end."]
    assert told[1].start == 0.5 and told[1].end == round(2 * 3.4 + 2.0, 3)  # its first piece's start to its last's end


def test_a_word_still_held_when_the_stream_stops_is_told_with_what_was_heard() -> None:
    long = "b" * 300
    told = _told(_Scripted([(0.1, 0.9)]), [(long[:150], 1.0, True)], text=long)
    assert [w.text for words in told for w in words] == [long[:150]]


def test_pieces_are_joined_only_where_the_text_has_no_space_between_them() -> None:
    script = [(0.1 * i, 0.1 * (i + 1)) for i in range(8)]
    for text, segments in (("今日は晴れです", ["今日は", "晴れです"]),  # a word a character: nothing to join
                           ("Hello there. Bye now.", ["Hello there.", "Bye now."]),
                           ("<speak>Hello there.</speak>", ["Hello there."])):  # read otherwise: not found
        told = _told(_Scripted(*[script] * len(segments)), [(s, 1.0, False) for s in segments], text=text)
        assert [w.text for words in told for w in words] == [w for s in segments for w in written_words(s)]
