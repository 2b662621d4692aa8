"""Korean: numbers in Korean text read as Korean numerals, Sino-Korean or native by what they count.

    read_words(["2024년", "5월", "3일", "14:30에", "5,000원"])
    # ["이천이십사년", "오월", "삼일", "열네시 삼십분에", "오천원"]

Sino-Korean numbers are num2words' ("ko": "이천이십사", "만 오천"). Hand-written here, as num2words has none
of it or gets it wrong (its ordinals fail past 999):
- Native numbers before the counters that take them, up to 99: hours (시), 개, 명, 살, 마리, 권, 잔, 번, 시간,
  달, 사람 ("3명": "세명", "14시": "열네시", "20살": "스무살"); an ordinal with 번째 ("1번째": "첫번째").
- The months 6 and 10 are "유월" and "시월".
- "14:30" is "열네시 삼십분"; "5,000원" and "₩5000" "오천원"; "$5" "오달러"; "5%" "오퍼센트"; "-5" "마이너스 오";
  "3.5" "삼 점 오" (digits one by one after the point); leading zeros or ten digits and more, digit by digit.
- Units after a number: km 킬로미터, m 미터, cm 센티미터, kg 킬로그램, g 그램, °C 도, km/h 킬로미터 매시, l 리터,
  ml 밀리리터, h 시간, min 분.
A number is written joined to its counter, as the text wrote it.
"""

from __future__ import annotations

import re

from lyre.text.inline import InlineReader, read_number

__all__ = ["joins", "may_continue", "read_words", "say_as"]

_SINO_DIGITS = ("영", "일", "이", "삼", "사", "오", "육", "칠", "팔", "구")
_NATIVE_ONES = ("", "한", "두", "세", "네", "다섯", "여섯", "일곱", "여덟", "아홉")
_NATIVE_TENS = ("", "열", "스물", "서른", "마흔", "쉰", "예순", "일흔", "여든", "아흔")
_NATIVE_COUNTERS = ("시간", "시", "개", "명", "살", "마리", "권", "잔", "번째", "번", "달", "사람", "송이", "병")
_UNITS = {"km/h": "킬로미터 매시", "km": "킬로미터", "cm": "센티미터", "mm": "밀리미터", "kg": "킬로그램",
          "ml": "밀리리터", "°C": "도", "min": "분", "m": "미터", "g": "그램", "l": "리터", "L": "리터", "h": "시간",
          "°": "도"}
_CURRENCY = {"₩": "원", "$": "달러", "€": "유로", "£": "파운드", "¥": "엔", "₹": "루피"}
_NUM = r"[0-9]+(?:,[0-9]{3})*(?:\.[0-9]+)?"
_FORM = re.compile(
    rf"(?P<time>(?P<h>[0-9]{{1,2}}):(?P<mi>[0-9]{{2}}))"
    rf"|(?P<neg>(?<![0-9A-Za-z])-)?(?P<cur>[¥$€£₹₩])?(?P<n>{_NUM})"
    rf"(?P<pct>%)?(?P<unit>(?:{'|'.join(re.escape(u) for u in _UNITS)})(?![A-Za-z]))?")


def cardinal(value: int) -> str:
    """A Sino-Korean count: "이천이십사"; past 10**15, digit by digit."""
    if value >= 10**15:
        return digits(str(value))
    from num2words import num2words  # imported on first use

    return num2words(value, lang="ko")


def native(value: int) -> str:
    """A native count before its counter, 1 to 99: "한", "열네", "스무"; any other, Sino-Korean."""
    if not 1 <= value <= 99:
        return cardinal(value)
    return "스무" if value == 20 else _NATIVE_TENS[value // 10] + _NATIVE_ONES[value % 10]


def digits(text: str) -> str:
    return " ".join(_SINO_DIGITS[int(d)] for d in text if "0" <= d <= "9")


def number(written: str) -> str:
    return read_number(written, cardinal, digits, " 점 ", longest=10)


class Korean(InlineReader):
    form = _FORM
    followers = frozenset(_UNITS) | frozenset(_CURRENCY.values()) | frozenset(_NATIVE_COUNTERS)

    def digits(self, text: str) -> str:
        return digits(text)

    def cardinal(self, value: int) -> str:
        return cardinal(value)

    def say(self, match: re.Match[str], before: str, after: str) -> str:
        if match["time"]:
            h, m = int(match["h"]), int(match["mi"])
            if h > 24 or m > 59:
                return match[0]
            return f"{native(h) if h else '영'}시" + (f" {cardinal(m)}분" if m else "")
        written, rest = match["n"], match.string[match.end():]
        sign = "마이너스 " if match["neg"] else ""
        said = number(written)
        if match["pct"]:
            return f"{sign}{said}퍼센트"
        if match["cur"]:
            return f"{sign}{said}{_CURRENCY[match['cur']]}"
        if match["unit"]:
            return f"{sign}{said} {_UNITS[match['unit']]}"
        plain = written.isdigit() and len(written) <= 15
        if plain and rest.startswith("월") and written in ("6", "06", "10"):
            return "유" if written != "10" else "시"
        if plain and rest.startswith("번째"):
            return sign + ("첫" if written == "1" else native(int(written)))
        if plain and rest.startswith(_NATIVE_COUNTERS):
            return sign + native(int(written))
        return sign + said


_READER = Korean()
read_words, joins, may_continue, say_as = _READER.read_words, _READER.joins, _READER.may_continue, _READER.say_as
