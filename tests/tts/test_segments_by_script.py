"""Segmenting text of other scripts: full-width punctuation kept, sentence and clause ends of CJK, Hangul and
Devanagari text with or without a space, no number or word split, streamed pieces cut the same as the whole."""

from __future__ import annotations

import re

import pytest

from lyre.text.front_end import TextFront
from lyre.tts.budget import chars_for_script
from lyre.tts.reading import TextOptions, ssml_items
from lyre.tts.segments import IncrementalSplitter, split_segments
from lyre.tts.text import clean, normalize

MANDARIN = ("今天早上我六点就起床了。外面下着小雨，空气很清新。我先喝了一杯热茶，然后给妈妈打了个电话！她说周末想来看看我们。"
            "我们打算一起去公园散步，如果天气不好，就在家里包饺子。你们想来吗？门票是1.000元，不过孩子只要3,5元。")
HINDI = ("आज सुबह मैं छह बजे उठा।बाहर हल्की बारिश हो रही थी। मैंने पहले एक कप चाय पी, फिर माँ को फ़ोन किया। "
         "उन्होंने कहा कि वे सप्ताहांत में आएँगी॥ क्या आप भी आएँगे?हाँ, ज़रूर। टिकट 1.000 रुपये का है।")
GERMAN = ("Das Brot kostet 3,5 Euro. Der Zug fährt um 5.20 Uhr ab, und die Strecke ist 1.000 Kilometer lang. "
          "Ich komme gern mit, wenn du mich rechtzeitig abholst; sonst nehme ich den Bus um halb sieben.")
# A number, a Latin word, a Devanagari or Hangul word (its vowel signs too): what no cut may fall inside.
_WORD = re.compile(r"[0-9]+(?:[.,:][0-9]+)*|[A-Za-zÀ-ÿ\u0900-\u0963\u0966-\u097f\uac00-\ud7af]+")


def _words(texts: list[str]) -> list[str]:
    return sorted(w for text in texts for w in _WORD.findall(text))


@pytest.mark.parametrize(("raw", "expected"), [
    ("你好，世界！你呢？（真的）：是；好、「对」『嗯』《书》。", "你好，世界！你呢？（真的）：是；好、「对」『嗯』《书》。"),
    ("我想想……好吧。", "我想想……好吧。"),
    ("यह ठीक है। वह भी॥", "यह ठीक है। वह भी॥"),
    ("정말요？네！", "정말요？네！"),
    ("Ｈｉ！ ３，５ ｆｉｎｅ", "Hi! 3,5 fine"),  # full-width letters and digits fold to ASCII, and a mark after them
    ("wait… what", "wait... what"),
])
def test_full_width_and_devanagari_punctuation_survive_cleaning(raw: str, expected: str) -> None:
    assert normalize(raw) == expected
    assert clean(clean(raw)) == clean(raw)


def test_the_danda_ends_a_sentence_with_or_without_a_space() -> None:
    assert split_segments("यह ठीक है।आप कैसे हैं? मैं ठीक हूँ।", 20) == ["यह ठीक है।", "आप कैसे हैं?", "मैं ठीक हूँ।"]
    assert split_segments("वह आया॥फिर चला गया।", 20) == ["वह आया॥", "फिर चला गया।"]


def test_question_and_exclamation_marks_need_no_space_before_devanagari_or_hangul() -> None:
    assert split_segments("क्या आप आएँगे?हाँ, मैं ज़रूर आऊँगा।", 24) == ["क्या आप आएँगे?", "हाँ, मैं ज़रूर आऊँगा।"]
    assert split_segments("좋아요.다음에 또 봐요.", 24) == ["좋아요.", "다음에 또 봐요."]


def test_a_korean_word_of_one_syllable_is_not_an_initial() -> None:
    assert split_segments("네. 알겠습니다. 내일 오후에 뵙겠습니다.", 30) == ["네. 알겠습니다.", "내일 오후에 뵙겠습니다."]
    assert split_segments("J. K. Rowling wrote it. Then she wrote more of them.", 30) == [
        "J. K. Rowling wrote it.", "Then she wrote more of them."]


@pytest.mark.parametrize("max_chars", range(150, 220))
def test_a_cut_among_han_characters_never_splits_a_number_or_a_latin_word(max_chars: int) -> None:
    text = "我们明天早上" * 8 + "一共花了1.000元" + "我们明天早上" * 8 + "我用iPhone拍照" + "我们明天早上" * 8
    segments = split_segments(text, max_chars)
    assert "".join(segments) == text and len(segments) >= 3
    assert "1.000" in "\n".join(segments) and "iPhone" in "\n".join(segments)


def test_han_text_is_sized_by_its_speaking_rate() -> None:
    # 12 sentences of Mandarin in segments sized for 182 English characters: about 46 Mandarin characters each.
    limit = chars_for_script(MANDARIN, 182)
    assert 35 <= limit <= 55
    segments = split_segments(MANDARIN, 182)
    assert all(len(s) <= limit for s in segments) and "".join(segments) == MANDARIN
    assert all(s[-1] in "。！？，" for s in segments[:-1])


@pytest.mark.parametrize(("text", "max_chars"), [(MANDARIN, 182), (HINDI, 60), (GERMAN, 60)])
def test_streamed_pieces_cut_anywhere_give_the_whole_text_s_segments(text: str, max_chars: int) -> None:
    whole = split_segments(normalize(text), max_chars)
    assert len(whole) >= 3 and _words(whole) == _words([text])
    for k in range(len(text) + 1):
        splitter = IncrementalSplitter(max_chars, max_chars)
        streamed = [*splitter.push(text[:k]), *splitter.push(text[k:]), *splitter.flush()]
        assert streamed == whole, k
        # Segments as soon as each sentence ends: never a number or a word in two of them either.
        splitter = IncrementalSplitter(max_chars)
        eager = [*splitter.push(text[:k]), *splitter.push(text[k:]), *splitter.flush()]
        assert _words(eager) == _words([text]), (k, eager)


def test_ssml_blocks_of_a_slower_script_are_sized_by_its_rate() -> None:
    korean = "오늘 아침에 주문하신 상품이 발송되었습니다. 목요일 정오 전에 도착할 예정입니다. 감사합니다."
    items, _ = ssml_items(f"<speak>{korean}</speak>", TextFront(), TextOptions(language="ko", ssml=True), 60)
    limit = chars_for_script(korean, 60)
    assert limit < 30 and len(items) >= 3 and all(len(said.written) <= limit for said in items)
