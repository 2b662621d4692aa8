"""Word times beyond English: Mandarin's words (jieba's), Korean's and German's, placed by the server's aligner
in continuous espeak-ng speech; an alignment that loses the audio spread out, not told as one word; and the
agent's cut at a barge-in in text written without spaces."""

from __future__ import annotations

import asyncio
from collections.abc import Hashable, Iterator
from dataclasses import dataclass

import numpy as np
import pytest

from espeak_events import synthesize
from lyre.agent.heard import heard_words
from lyre.server.aligner import Aligner
from lyre.stt import AlignedWord, Alignment, Transcriber, WordTimer, written_words
from lyre.stt.words import joined, script_language
from speech import resample

RATE = 24_000  # the TTS stream's rate, as the server's word timer gets it
# Debian's espeak-ng reads most Chinese characters as pinyin spelled out in English: Mandarin is spoken from its
# pinyin by the pinyin voice (benchmarks/word_timing_languages.py does the same).
MANDARIN = (("我想预订明天晚上的两人餐桌。", "wo3 xiang3 yu4 ding4 ming2 tian1 wan3 shang4 de5 liang3 ren2 can1 zhuo1."),
            ("今天天气很好，我们一起去公园散步吧。",
             "jin1 tian1 tian1 qi4 hen3 hao3, wo3 men5 yi4 qi3 qu4 gong1 yuan2 san4 bu4 ba5."))
LONGEST_WORD_S = 3.0  # no word of these sentences is said in more than about 1 s


def test_mandarin_is_split_into_jiebas_words_and_japanese_by_character() -> None:
    assert written_words("今天天气很好，我们一起去公园散步吧。") == [
        "今天天气", "很", "好，", "我们", "一起", "去", "公园", "散步", "吧。"]
    assert written_words("今日は、晴れです。") == ["今", "日", "は、", "晴", "れ", "で", "す。"]
    assert written_words("今天", language="ja") == ["今", "天"]
    assert written_words("내일 저녁에 예약할게요.") == ["내일", "저녁에", "예약할게요."]
    assert written_words("मैं ठीक हूँ।") == ["मैं", "ठीक", "हूँ।"]
    assert [script_language(t) for t in ("今天", "今日は", "내일", "ठीक", "Heute")] == ["zh", "ja", "ko", "hi", None]


def test_words_join_back_without_spaces_where_the_script_writes_none() -> None:
    assert joined(written_words("今天天气很好，我们一起去公园散步吧。")) == "今天天气很好，我们一起去公园散步吧。"
    assert joined(["Guten", "Tag."]) == "Guten Tag."
    assert joined(["你好。", " ", "今天"]) == "你好。今天"


@pytest.fixture(scope="module")
def aligner() -> Iterator[Aligner]:
    """The server's aligner (``--aligner auto``) over the demo Whisper."""
    stt = Transcriber.load()
    yield Aligner(None, stt, "cpu")
    stt.close()


def _pcm(text: str, voice: str) -> np.ndarray:
    spoken = synthesize(text, voice, 200)
    silence = np.zeros(RATE // 4, np.int16)
    return np.concatenate([silence, (32767 * resample(spoken.audio, RATE, spoken.rate)).astype(np.int16), silence])


def _timed(aligner: Aligner, segments: list[tuple[str, np.ndarray]], language: str | None) -> tuple[
        list[list[AlignedWord]], float, WordTimer]:
    """Each segment's words as the server's word timer tells them (the language left to the text where None)."""
    async def run() -> tuple[list[list[AlignedWord]], float, WordTimer]:
        timer = WordTimer(aligner, "test", rate=RATE, language=language)
        at = 0
        for text, pcm in segments:
            timer.add(pcm)
            timer.segment(text, at, at + pcm.size)
            at += pcm.size
        return await timer.rest(), at / RATE, timer
    return asyncio.run(run())


def _check_times(words: list[AlignedWord], duration: float) -> None:
    assert words[0].start >= 0 and words[-1].end <= duration
    assert all(a.end <= b.start for a, b in zip(words, words[1:])), "not in order"
    assert all(w.end - w.start >= 0.01 - 1e-9 for w in words), "a word under 10 ms"
    assert max(w.end - w.start for w in words) <= LONGEST_WORD_S


def test_mandarin_word_times_are_jiebas_words_in_order_inside_the_audio(aligner: Aligner) -> None:
    segments = [(text, _pcm(pinyin, "cmn-latn-pinyin")) for text, pinyin in MANDARIN]
    told, duration, timer = _timed(aligner, segments, None)  # as the server's timer: the language by the script
    assert timer.failures == 0
    assert [[w.text for w in words] for words in told] == [written_words(text) for text, _ in MANDARIN]
    _check_times([w for words in told for w in words], duration)
    assert aligner.stats().alignments["whisper"] == 2  # not tried by English phones first
    assert aligner.stats().fallbacks["whisper"] == 0


def test_an_alignment_that_loses_the_audio_is_not_told_as_one_word_lasting_all_of_it(aligner: Aligner) -> None:
    """Noise (what the demo TTS model speaks) under 90 characters of Mandarin: the alignment heads follow
    nothing, and placed the first word over the whole audio and the others 10 ms each at its end."""
    text = "".join(t for t, _ in MANDARIN) * 3
    noise = (3000 * np.random.default_rng(0).standard_normal(8 * RATE)).astype(np.int16)
    told, duration, _ = _timed(aligner, [(text, noise)], "zh")
    words = told[0]
    assert len(words) == len(written_words(text))
    _check_times(words, duration)
    assert sum(w.end - w.start <= 0.011 for w in words) < len(words) // 4


@pytest.mark.parametrize(("language", "voice", "text"), [
    ("ko", "ko", "내일 저녁에 두 사람 자리를 예약하고 싶어요."),
    ("de", "de", "Ihr Paket wurde heute Morgen verschickt und kommt am Donnerstag an."),
])
def test_korean_and_german_word_times_are_in_order_inside_the_audio(aligner: Aligner, language: str, voice: str,
                                                                    text: str) -> None:
    told, duration, timer = _timed(aligner, [(text, _pcm(text, voice))], None if language == "ko" else language)
    assert timer.failures == 0 and [w.text for w in told[0]] == written_words(text)
    _check_times(told[0], duration)


@dataclass(frozen=True)
class _Segment:
    text: str
    start: int
    end: int
    whole: bool = True


class _EvenAligner:
    """Each word an equal share of the audio (or, with ``fail``, no alignment at all)."""

    def __init__(self, fail: bool = False) -> None:
        self.fail = fail

    async def align(self, audio: np.ndarray, words: list[str], language: str | None, session: Hashable,
                    partial: bool = False) -> Alignment:
        if self.fail:
            raise RuntimeError("no aligner")
        step = audio.size / 16_000 / len(words)
        return Alignment(tuple(AlignedWord(w, i * step, (i + 1) * step) for i, w in enumerate(words)),
                         audio.size / 16_000)


@pytest.mark.parametrize("fail", [False, True], ids=["aligned", "by-length"])
def test_the_barge_in_cut_of_mandarin_is_the_heard_prefix_without_spaces(fail: bool) -> None:
    first, second = "你好。", "今天天气很好，我们一起去公园散步吧。"
    segments = [_Segment(first, 0, RATE), _Segment(second, RATE, 3 * RATE)]
    pcm = [np.zeros(3 * RATE, np.int16)]
    # 1.9 s: the second segment's first 0.9 of 2 s, about half its words
    text, _ = asyncio.run(heard_words(segments, pcm, RATE, 1900, _EvenAligner(fail), "s"))
    assert " " not in text
    assert (first + second).startswith(text) and len(first) < len(text) < len(first + second)
    words = written_words(second)
    assert text[len(first):] in {joined(words[:k]) for k in range(1, len(words))}  # cut after a whole word


def test_mandarin_said_beside_a_word_read_otherwise_is_still_timed_by_its_words() -> None:
    """A segment whose text the front end changed somewhere ("$5" said "five dollars") is timed by its written
    words' readings: the Mandarin beside it is still jieba's words, not one word per run of characters."""
    from lyre.text.said import Said

    said = Said((("我想预订明天晚上的两人餐桌，", "我想预订明天晚上的两人餐桌，"), ("$5.", "five dollars.")))

    async def run() -> list[list[AlignedWord]]:
        timer = WordTimer(_EvenAligner(), "s", rate=RATE)
        timer.add(np.zeros(2 * RATE, np.int16))
        timer.segment(said.written, 0, 2 * RATE, said)
        return await timer.rest()

    told = [w.text for words in asyncio.run(run()) for w in words]
    assert told == [*written_words("我想预订明天晚上的两人餐桌，"), "$5."]
