"""Mandarin (zh, zh-CN, zh-Hans, cmn): numbers in Chinese text read as Chinese numerals.

    read_words(["2024年5月3日14:30，1000人花了5.20元。"])
    # ["二零二四年五月三日十四点三十分，一千人花了五元二角。"]

All hand-written: num2words has no Chinese. A count in 万 and 亿 ("15000": "一万五千", "10010": "一万零一十",
"10" at the start "十"); a year before 年 digit by digit ("二零二四年"); a decimal digit by digit after 点
("3.14": "三点一四"); a percentage 百分之 first ("5%": "百分之五"); "14:30" "十四点三十分"; money in 元, 角
and 分 ("5.20元", "¥5.20": "五元二角"), "$" 美元, "€" 欧元, "£" 英镑; a minus sign 负; "1-5" "一到五";
"2" before a measure word 两 ("2个": "两个"); eleven digits or more in one run (a phone number), and a number
with leading zeros, digit by digit. Units after a number: km 公里, m 米, cm 厘米, kg 公斤, g 克, °C 摄氏度,
km/h 公里每小时, l 升, ml 毫升, h 小时, min 分钟. Simplified characters are written for zh-Hant too.
"""

from __future__ import annotations

import re

from lyre.text.inline import InlineReader, read_number

__all__ = ["joins", "may_continue", "read_words", "say_as"]

_DIGIT = "零一二三四五六七八九"
_SECTIONS = ("", "万", "亿", "万亿")
_UNITS = {"km/h": "公里每小时", "km": "公里", "cm": "厘米", "mm": "毫米", "kg": "公斤", "ml": "毫升", "°C": "摄氏度",
          "min": "分钟", "m": "米", "g": "克", "l": "升", "L": "升", "h": "小时", "°": "度"}
_CURRENCY = {"$": "美元", "€": "欧元", "£": "英镑", "₩": "韩元", "₹": "卢比"}
_MEASURE_WORDS = frozenset("个位只本张次件条种人天岁辆台家块")
_NUM = r"[0-9]+(?:,[0-9]{3})*(?:\.[0-9]+)?"
_FORM = re.compile(
    rf"(?P<time>(?P<h>[0-9]{{1,2}}):(?P<mi>[0-9]{{2}})(?::(?P<s>[0-9]{{2}}))?)"
    rf"|(?P<range>(?<=[0-9])-(?=[0-9]))"
    rf"|(?P<neg>(?<![0-9A-Za-z])-)?(?P<cur>[¥$€£₹₩])?(?P<n>{_NUM})"
    rf"(?P<pct>%)?(?P<unit>(?:{'|'.join(re.escape(u) for u in _UNITS)})(?![A-Za-z]))?(?P<yuan>元|块)?")


def cardinal(value: int) -> str:
    """A count: "一千", "一万零一十", "十五"; past 10**16, digit by digit."""
    if value >= 10**16:
        return digits(str(value))
    if value == 0:
        return "零"
    sections, out, gap = [], "", False
    while value:
        value, section = divmod(value, 10000)
        sections.append(section)
    for i in reversed(range(len(sections))):
        if sections[i] == 0:
            gap = bool(out)
            continue
        if out and (gap or sections[i] < 1000):
            out += "零"
        out += _section(sections[i]) + _SECTIONS[i]
        gap = False
    return out[1:] if out.startswith("一十") else out


def _section(value: int) -> str:
    """0 < value < 10000: "一千零五"."""
    out, zero = "", False
    for unit, place in (("千", 1000), ("百", 100), ("十", 10), ("", 1)):
        digit = value // place % 10
        if digit:
            out += ("零" if zero else "") + _DIGIT[digit] + unit
            zero = False
        elif out:
            zero = True
    return out


def digits(text: str) -> str:
    return "".join(_DIGIT[int(d)] for d in text if "0" <= d <= "9")


def number(written: str) -> str:
    """"1,000": "一千", "3.14": "三点一四", "007": "零零七"."""
    return read_number(written, cardinal, digits, "点", longest=11)


class Mandarin(InlineReader):
    form = _FORM
    followers = frozenset(_UNITS) | frozenset({"元", "块"})

    def digits(self, text: str) -> str:
        return digits(text)

    def cardinal(self, value: int) -> str:
        return cardinal(value)

    def say(self, match: re.Match[str], before: str, after: str) -> str:
        if match["range"]:
            return "到"
        if match["time"]:
            h, m = int(match["h"]), int(match["mi"])
            if h > 24 or m > 59:
                return match[0]
            said = f"{cardinal(h)}点" + (f"{'零' if m < 10 else ''}{cardinal(m)}分" if m else "")
            return said + (f"{cardinal(int(match['s']))}秒" if match["s"] and int(match["s"]) else "")
        written, rest = match["n"], match.string[match.end():]
        sign = "负" if match["neg"] else ""
        if match["pct"]:
            return f"百分之{sign}{number(written)}" + (_UNITS[match["unit"]] if match["unit"] else "") + \
                (match["yuan"] or "")
        if match["cur"] or match["yuan"]:
            return sign + self._money(written, match["cur"] or "¥") + (_UNITS.get(match["unit"] or "", ""))
        if match["unit"]:
            return sign + number(written) + _UNITS[match["unit"]]
        if re.fullmatch(r"[0-9]{4}", written) and rest.startswith("年"):
            return sign + digits(written)
        if written == "2" and rest[:1] in _MEASURE_WORDS:
            return sign + "两"
        return sign + number(written)

    def _money(self, written: str, symbol: str) -> str:
        whole, _, frac = written.replace(",", "").partition(".")
        if symbol != "¥":
            return number(written) + _CURRENCY[symbol]
        if len(frac) > 2 or len(whole) > 15:
            return number(written) + "元"
        jiao, fen = int((frac + "00")[0]), int((frac + "00")[1])
        said = (cardinal(int(whole)) + "元") if int(whole) or not (jiao or fen) else ""
        if jiao:
            said += _DIGIT[jiao] + "角"
        if fen:
            said += ("零" if said and not jiao else "") + _DIGIT[fen] + "分"
        return said


_READER = Mandarin()
read_words, joins, may_continue, say_as = _READER.read_words, _READER.joins, _READER.may_continue, _READER.say_as
