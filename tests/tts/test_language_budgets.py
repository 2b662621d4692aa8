"""Segment budgets by language: each language's measured speaking rate (lyre.tts.budget), and long Mandarin and
German text sized and budgeted by it on the demo model, so no segment's budget is held short by a rate meant for
English (the demo's random weights run a segment to whatever budget it is given)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

from lyre.models.demo import DemoPaths
from lyre.orpheus import FRAME_SECONDS, TOKENS_PER_SECOND, prompt_ids
from lyre.text.said import Said
from lyre.tts import TTS, ServingConfig, SpeechOptions
from lyre.tts.budget import (
    LANGUAGE_CHARS_PER_S,
    LEADING_S,
    SLOWEST_CHARS_PER_S,
    TAG_S,
    chars_per_second,
    chars_within,
    speech_seconds,
    speech_tokens,
)
from lyre.tts.reading import TextOptions

MANDARIN_12 = ("今天早上我六点就起床了，比平时早了一个小时。外面下着小雨，空气很清新，街上的人还不多。我先喝了一杯热茶，吃了两片面包。"
               "然后给住在老家的妈妈打了个电话。她说周末想坐火车来看我们。我们打算一起去附近的公园散步。"
               "如果天气不好，我们就在家里包饺子，孩子们都很喜欢吃饺子。晚上我还要准备明天的会议材料。"
               "会议的主题是明年的工作计划和预算。大家都希望一切顺利。我觉得应该没有什么问题。祝大家周末愉快，下周见。")
MANDARIN_400 = MANDARIN_12 + ("上个月我们搬进了新家，新家离地铁站只有五分钟。楼下有一家很大的超市，买东西特别方便。小区里有很多树，夏天很凉快。"
                              "邻居们都很友好，经常互相帮忙。我们的房子在十二楼，可以看到远处的山。客厅的窗户很大，阳光很好。"
                              "厨房虽然不大，但是很干净。孩子们最喜欢的是阳台，他们常常在那里看书和画画。周末的时候，"
                              "我们会请朋友来家里吃饭。晚上从阳台上还能看到城市的灯光，特别漂亮。大家都说这里住着很舒服，我们都很喜欢这个新家。")
GERMAN_400 = ("Am Samstag fahren wir mit dem Zug nach Hamburg. Die Fahrt dauert etwa drei Stunden, und wir haben Plätze "
              "am Fenster reserviert. Meine Schwester wohnt dort seit zwei Jahren in einer kleinen Wohnung am Hafen. "
              "Sie hat versprochen, uns am Bahnhof abzuholen. Am Nachmittag möchten wir durch die Altstadt spazieren. "
              "Wenn das Wetter gut bleibt, machen wir abends noch eine Rundfahrt. Am Sonntag fahren wir wieder heim.")


def test_the_texts_are_the_sizes_the_cases_need() -> None:
    assert MANDARIN_12.count("。") == 12 and 190 <= len(MANDARIN_12) <= 215
    assert 380 <= len(MANDARIN_400) <= 420 and 380 <= len(GERMAN_400) <= 420


def test_each_language_has_its_measured_rate_and_others_keep_english_s() -> None:
    assert chars_per_second("zh-CN") == chars_per_second("cmn") == LANGUAGE_CHARS_PER_S["zh"] == pytest.approx(2.3)
    assert chars_per_second("ko") == pytest.approx(3.9) and chars_per_second("hi-IN") == pytest.approx(8.5)
    assert [chars_per_second(tag) for tag in ("de", "fr", "es", "it")] == pytest.approx([9.8, 11.6, 9.6, 9.2])
    assert chars_per_second("en-US") == chars_per_second("sv") == chars_per_second(None) == SLOWEST_CHARS_PER_S
    # Without a tag that has a rate, the script of the letters decides; Latin letters keep English's.
    assert chars_per_second(None, "你好，世界。") == chars_per_second("sv", "你好。") == LANGUAGE_CHARS_PER_S["zh"]
    assert chars_per_second(None, "안녕하세요.") == LANGUAGE_CHARS_PER_S["ko"]
    assert chars_per_second(None, "नमस्ते, आप कैसे हैं?") == LANGUAGE_CHARS_PER_S["hi"]
    assert chars_per_second(None, "Grüß Gott, 你") == SLOWEST_CHARS_PER_S
    assert chars_per_second("de", "你好。") == LANGUAGE_CHARS_PER_S["de"]  # a tag with a rate wins


def test_budget_seconds_follow_the_language_s_rate_and_any_tag_counts_as_a_tag() -> None:
    assert speech_seconds("好" * 32, "zh") == pytest.approx(LEADING_S + 32 / 2.3)
    assert speech_seconds("a" * 98, "de") == pytest.approx(LEADING_S + 98 / 9.8)
    # Tags of the multilingual finetunes, in their own scripts, take time and no characters.
    assert speech_seconds("<resoplido> " + "a" * 96, "es") == pytest.approx(LEADING_S + 97 / 9.6 + TAG_S)
    assert speech_seconds("<한숨> 네", "ko") == pytest.approx(LEADING_S + 2 / 3.9 + TAG_S)
    assert speech_seconds("<叹气>好的", "zh") == pytest.approx(LEADING_S + 2 / 2.3 + TAG_S)
    for language in ("zh", "ko", "hi", "de", None):
        within = chars_within(1792, language)
        assert speech_seconds("a" * within, language) <= 1792 / TOKENS_PER_SECOND
        assert speech_seconds("a" * (within + 1), language) > 1792 / TOKENS_PER_SECOND
    assert speech_tokens("好" * 300, room=1792, language="zh") == 1792 - 1792 % 7


@pytest.fixture(scope="module")
def tts(demo: DemoPaths) -> Iterator[TTS]:
    tts = TTS.load(demo.model, demo.codec, ServingConfig(max_streams=4))  # 2,048 positions a request
    yield tts
    tts.close()


@pytest.mark.parametrize(("text", "language", "end"), [
    (MANDARIN_12, "zh", "。"), (MANDARIN_12, None, "。"), (MANDARIN_400, "zh", "。"), (GERMAN_400, "de", "."),
])
def test_long_text_is_split_at_sentence_ends_into_segments_its_language_s_budget_covers(
        tts: TTS, text: str, language: str | None, end: str) -> None:
    stream = tts.stream(text, "tara", SpeechOptions(seed=1), streamed=False, reading=TextOptions(language=language))
    try:
        said = [item for item in stream.intake.pending() if isinstance(item, Said)]
        assert len(said) >= 2 and "".join(s.written for s in said).replace(" ", "") == text.replace(" ", "")
        assert all(s.written.endswith(end) for s in said)  # every cut at a sentence end
        rate = chars_per_second(language, text)
        for s in said:
            prompt = len(prompt_ids(tts.context.tokenizer, s.spoken, "tara"))
            given = stream.budgets.tokens(s.spoken, tts.context.positions_after(prompt))
            # What the language's rate asks for, not held short by the positions a request has.
            assert given == speech_tokens(s.spoken, 10**6, language)
            assert (given / TOKENS_PER_SECOND - LEADING_S) * rate >= len(s.spoken)
    finally:
        asyncio.run(stream.aclose())


def test_a_short_mandarin_reply_runs_to_the_mandarin_budget_and_its_cut_says_so(tts: TTS) -> None:
    """The demo's random weights rarely say end-of-speech: the segment runs to its budget, which is Mandarin's
    (three characters at 2.3 a second after the lead-in: 28 frames), not English's (16 frames)."""
    async def speak(seed: int) -> tuple[float, object]:
        stream = tts.stream("你好。", "tara", SpeechOptions(seed=seed), streamed=False,
                            reading=TextOptions(language="zh"))
        return sum([len(chunk) async for chunk in stream]) / 24_000, stream

    runs = [asyncio.run(speak(seed)) for seed in (1, 2)]
    budget = speech_tokens("你好。", 10**6, "zh")
    assert budget == 28 * 7 and speech_tokens("你好。", 10**6, "en") == 16 * 7
    for seconds, stream in runs:
        assert [tokens for _, tokens in stream.budgets.segments] == [budget]  # type: ignore[attr-defined]
        assert seconds <= budget / TOKENS_PER_SECOND + FRAME_SECONDS
        assert all(c.reason == "budget" and c.max_tokens == budget for c in stream.cuts)  # type: ignore[attr-defined]
    assert any(stream.cuts for _, stream in runs)  # type: ignore[attr-defined]
