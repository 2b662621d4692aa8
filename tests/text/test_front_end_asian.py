"""Mandarin, Korean and Hindi through the front end: written -> spoken cases, the command, random text."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lyre.cli import main
from lyre.text import hi, ko, zh
from lyre.text.front_end import TextFront, rules_for
from lyre.tts.text import clean, normalize

MANDARIN = [
    ("我们有1000人。", "我们有一千人"),
    ("价格是3.5元。", "价格是三元五角"),
    ("圆周率约为3.14。", "圆周率约为三点一四"),
    ("2024年5月3日是星期五。", "二零二四年五月三日是星期五"),
    ("会议在14:30开始。", "会议在十四点三十分开始"),
    ("会议在14:05开始。", "会议在十四点零五分开始"),
    ("会议在14:00开始。", "会议在十四点开始"),
    ("这本书5.20元。", "这本书五元二角"),
    ("这本书¥5.20。", "这本书五元二角"),
    ("一共¥0.05。", "一共五分"),
    ("他买了2个苹果。", "他买了两个苹果"),
    ("增长了5%。", "增长了百分之五"),
    ("气温是-5度。", "气温是负五度"),
    ("第1-5号。", "第一到五号"),
    ("电话13800138000。", "电话一三八零零一三八零零零"),
    ("距离5km。", "距离五公里"),
    ("温度20°C。", "温度二十摄氏度"),
    ("人口10010人。", "人口一万零一十人"),
    ("共110人。", "共一百一十人"),
    ("价格$5。", "价格五美元"),
    ("价格1,000元。", "价格一千元"),
    ("我们有１０００人，价格３.５元！", "我们有一千人价格三元五角"),
]
KOREAN = [
    ("2024년 5월 3일에 만나요.", "이천이십사년 오월 삼일에 만나요"),
    ("6월에 만나요.", "유월에 만나요"),
    ("10월에 만나요.", "시월에 만나요"),
    ("14시 30분에 만나요.", "열네시 삼십분에 만나요"),
    ("14:30에 만나요.", "열네시 삼십분에 만나요"),
    ("14:00에 만나요.", "열네시에 만나요"),
    ("가격은 5,000원입니다.", "가격은 오천원입니다"),
    ("가격은 ₩5000입니다.", "가격은 오천원입니다"),
    ("가격은 $5입니다.", "가격은 오달러입니다"),
    ("학생이 3명 있어요.", "학생이 세명 있어요"),
    ("사과 5개 주세요.", "사과 다섯개 주세요"),
    ("그는 20살이에요.", "그는 스무살이에요"),
    ("1번째 사람입니다.", "첫번째 사람입니다"),
    ("2시간 걸려요.", "두시간 걸려요"),
    ("5% 올랐어요.", "오퍼센트 올랐어요"),
    ("3.5 정도입니다.", "삼 점 오 정도입니다"),
    ("10000명이 왔어요.", "만명이 왔어요"),
    ("5km 걸었어요.", "오 킬로미터 걸었어요"),
    ("전화 010", "전화 영 일 영"),
]
HINDI = [
    ("3 मई 2024 को मिलते हैं।", "तीन मई दो हज़ार चौबीस को मिलते हैं।"),
    ("मैं 14:30 पर आऊँगा।", "मैं चौदह बजकर तीस मिनट पर आऊँगा।"),
    ("मैं 14:00 आऊँगा।", "मैं चौदह बजे आऊँगा।"),
    ("इसकी कीमत ₹500 है।", "इसकी कीमत पाँच सौ रुपये है।"),
    ("इसकी कीमत 500 रुपये है।", "इसकी कीमत पाँच सौ रुपये है।"),
    ("इसकी कीमत ₹1 है।", "इसकी कीमत एक रुपया है।"),
    ("इसकी कीमत ₹5.50 है।", "इसकी कीमत पाँच रुपये पचास पैसे है।"),
    ("इसकी कीमत $5 है।", "इसकी कीमत पाँच डॉलर है।"),
    ("इसकी कीमत Rs. 50 है।", "इसकी कीमत पचास रुपये है।"),
    ("कीमत 5% बढ़ी।", "कीमत पाँच प्रतिशत बढ़ी।"),
    ("तापमान -5 डिग्री है।", "तापमान माइनस पाँच डिग्री है।"),
    ("यह 3.5 है।", "यह तीन दशमलव पाँच है।"),
    ("यहाँ 1,00,000 लोग हैं।", "यहाँ एक लाख लोग हैं।"),
    ("यहाँ 100000 लोग हैं।", "यहाँ एक लाख लोग हैं।"),
    ("वह 1999 में पैदा हुआ।", "वह उन्नीस सौ निन्यानवे में पैदा हुआ।"),
    ("दूरी 5km है।", "दूरी पाँच किलोमीटर है।"),
    ("तापमान 20°C है।", "तापमान बीस डिग्री सेल्सियस है।"),
    ("२०२४ में", "दो हज़ार चौबीस में"),
    ("यहाँ 1,25,00,000 लोग हैं।", "यहाँ एक करोड़ पच्चीस लाख लोग हैं।"),
    ("यहाँ 99 लोग हैं।", "यहाँ निन्यानवे लोग हैं।"),
]
CASES = {"zh": MANDARIN, "ko": KOREAN, "hi": HINDI}
PACKAGES = {"zh": zh, "ko": ko, "hi": hi}
# Full-width or ASCII, punctuation is not what these cases hold the reader to in Chinese and Korean.
_PUNCTUATION = re.compile(r"[.,!?;:，。！？；：、]")


def _words(text: str, language: str) -> str:
    return _PUNCTUATION.sub("", text) if language in ("zh", "ko") else text


def test_each_language_has_its_cases_and_no_repeats() -> None:
    for cases in CASES.values():
        assert len(cases) >= 15
        assert len({written for written, _ in cases}) == len(cases)


@pytest.mark.parametrize(("language", "written", "spoken"),
                         [(language, w, s) for language, cases in CASES.items() for w, s in cases])
def test_written_text_is_said_as_people_say_it(language: str, written: str, spoken: str) -> None:
    front = TextFront()
    assert _words(front.read(normalize(written), language).spoken, language) == spoken
    assert front.fallbacks == 0


@pytest.mark.parametrize(("written", "spoken"), [("１０００人，好！", "一千人，好！"), ("1000人,好!", "一千人,好!")])
def test_chinese_reads_numbers_whatever_width_its_punctuation_has(written: str, spoken: str) -> None:
    assert TextFront().read(written, "zh").spoken == spoken


@pytest.mark.parametrize("language", ["zh", "zh-CN", "zh-Hans", "cmn", "zh_TW"])
def test_every_tag_for_mandarin_reads_it(language: str) -> None:
    assert rules_for(language) is zh
    assert TextFront().read("2024年", language).spoken == "二零二四年"


@pytest.mark.parametrize(("language", "text", "spoken"), [
    ("zh-CN", "2024年5月3日14:30", "二零二四年五月三日十四点三十分"),
    ("ko", "2024년 5월 3일", "이천이십사년 오월 삼일"),
    ("hi", "₹500", "पाँच सौ रुपये"),
])
def test_lyre_normalize_reads_each_language(language: str, text: str, spoken: str,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["normalize", "--language", language, text]) == 0
    assert capsys.readouterr().out.strip() == spoken


@pytest.mark.parametrize(("language", "left", "right", "joined"), [
    ("ko", "5,000", "원", True), ("hi", "500", "रुपये", True), ("hi", "₹", "500", True), ("zh", "5", "km", True),
    ("ko", "가격은", "오천원", False), ("hi", "यह", "है", False),
])
def test_words_read_together_are_known_to_the_segmenter(language: str, left: str, right: str, joined: bool) -> None:
    assert TextFront.joins(left, right, language) is joined
    assert TextFront.may_continue(left, language) is joined


@pytest.mark.parametrize(("language", "kind", "text", "spoken"), [
    ("zh", "cardinal", "1,000", "一千"), ("ko", "digits", "010", "영 일 영"), ("hi", "cardinal", "21", "इक्कीस"),
    ("zh", "date", "2024-05-03", None),
])
def test_say_as_reads_the_kind_it_names(language: str, kind: str, text: str, spoken: str | None) -> None:
    rules = rules_for(language)
    assert rules is not None and rules.say_as(kind, text) == spoken


# Characters no number is read as: in Chinese and Korean each is said as often as it is written.
_KEPT = {"zh": "我们有价格是星期会议开始很好", "ko": "가나다라바하요저는학생입니", "hi": "मैं घर जा रहा हूँ कीमत लोग"}
_SPICE = ["5", "1,000", "3.5", "14:30", "2024年", "¥", "₹", "₩", "$", "%", "-", "元", "年", "월", "원", "km", "°C",
          "０", "２０２４", "१२", "99999999999999999999", "0.", ".5", "1-", "25:99", "-5%", "Rs.", "10월", "1번째"]


@pytest.mark.parametrize("language", list(CASES))
@settings(max_examples=120, deadline=None)
@given(data=st.data())
def test_any_text_is_read_without_raising_and_keeps_what_is_not_a_number(language: str, data: st.DataObject) -> None:
    letters = st.text(alphabet=_KEPT[language].replace(" ", ""), min_size=1, max_size=6)
    if language == "hi":
        letters = st.sampled_from(_KEPT["hi"].split())
    pieces = data.draw(st.lists(st.one_of(letters, st.text(max_size=6), st.sampled_from(_SPICE)), max_size=12))
    words = clean(" ".join(pieces)).split()
    spoken = PACKAGES[language].read_words(words)
    assert len(spoken) == len(words)
    for word, said in zip(words, spoken):
        if not any(ch.isdigit() for ch in word) and word not in ("₹", "Rs", "Rs.", "रु", "रु."):
            assert said == word
    if language != "hi":
        for ch in _KEPT[language]:
            assert " ".join(spoken).count(ch) == " ".join(words).count(ch), ch
