"""Hindi: numbers in Hindi text read as Hindi number words.

    read_words("3 मई 2024 को 14:30 पर ₹500 दिए".split())
    # ["तीन", "मई", "दो हज़ार चौबीस", "को", "चौदह बजकर तीस मिनट", "पर", "पाँच सौ रुपये", "दिए"]

All hand-written: num2words has no Hindi. Every number under a hundred has its own word (the table below);
larger ones are said in सौ, हज़ार, लाख and करोड़, grouped the Indian way or the Western way ("1,00,000" and
"100,000": "एक लाख"); from 1100 to 1999 in hundreds, as years and as counts ("1999": "उन्नीस सौ निन्यानवे").
Devanagari digits ("२०२४") read as digits. "14:30" is "चौदह बजकर तीस मिनट", "14:00" "चौदह बजे" (before a
written "बजे", the hour and the minutes alone: "चौदह तीस"); "₹500"
"पाँच सौ रुपये", "₹1" "एक रुपया", "₹5.50" "पाँच रुपये पचास पैसे", "$5" "पाँच डॉलर"; "5%" "पाँच प्रतिशत";
"3.5" "तीन दशमलव पाँच" (digits one by one after the point); "-5" "माइनस पाँच"; units after a number in their
Hindi names (km किलोमीटर, kg किलोग्राम, °C डिग्री सेल्सियस, ...).
"""

from __future__ import annotations

import re

from lyre.text.inline import InlineReader, read_number

__all__ = ["joins", "may_continue", "read_words", "say_as"]

_UNDER_100 = (
    "शून्य एक दो तीन चार पाँच छह सात आठ नौ दस ग्यारह बारह तेरह चौदह पंद्रह सोलह सत्रह अठारह उन्नीस बीस इक्कीस बाईस "
    "तेईस चौबीस पच्चीस छब्बीस सत्ताईस अट्ठाईस उनतीस तीस इकतीस बत्तीस तैंतीस चौंतीस पैंतीस छत्तीस सैंतीस अड़तीस उनतालीस "
    "चालीस इकतालीस बयालीस तैंतालीस चवालीस पैंतालीस छियालीस सैंतालीस अड़तालीस उनचास पचास इक्यावन बावन तिरेपन चौवन "
    "पचपन छप्पन सत्तावन अट्ठावन उनसठ साठ इकसठ बासठ तिरेसठ चौंसठ पैंसठ छियासठ सड़सठ अड़सठ उनहत्तर सत्तर इकहत्तर बहत्तर "
    "तिहत्तर चौहत्तर पचहत्तर छिहत्तर सतहत्तर अठहत्तर उन्यासी अस्सी इक्यासी बयासी तिरासी चौरासी पचासी छियासी सत्तासी "
    "अट्ठासी नवासी नब्बे इक्यानवे बानवे तिरानवे चौरानवे पचानवे छियानवे सत्तानवे अट्ठानवे निन्यानवे").split()
_SCALES = ((10**7, "करोड़"), (10**5, "लाख"), (1000, "हज़ार"), (100, "सौ"))
_UNITS = {"km/h": "किलोमीटर प्रति घंटा", "km": "किलोमीटर", "cm": "सेंटीमीटर", "mm": "मिलीमीटर", "kg": "किलोग्राम",
          "ml": "मिलीलीटर", "°C": "डिग्री सेल्सियस", "min": "मिनट", "m": "मीटर", "g": "ग्राम", "l": "लीटर",
          "L": "लीटर", "h": "घंटे", "°": "डिग्री"}
_CURRENCY = {"$": ("डॉलर", "डॉलर", "सेंट"), "€": ("यूरो", "यूरो", "सेंट"), "£": ("पाउंड", "पाउंड", "पेंस"),
             "₹": ("रुपया", "रुपये", "पैसे"), "¥": ("येन", "येन", "सेन"), "₩": ("वॉन", "वॉन", "जॉन")}
_RUPEE_WORDS = frozenset({"₹", "Rs", "Rs.", "रु", "रु."})  # before an amount, spaced: the amount says them
# Grouped the Indian way ("1,25,00,000") or the Western way ("100,000"), or not grouped.
_NUM = r"(?:[0-9]{1,3}(?:,[0-9]{2})*,[0-9]{3}|[0-9]+)(?:\.[0-9]+)?"
_FORM = re.compile(
    rf"(?P<time>(?P<h>[0-9]{{1,2}}):(?P<mi>[0-9]{{2}}))"
    rf"|(?P<neg>(?<![0-9A-Za-z])-)?(?P<cur>[¥$€£₹₩]|Rs\.?|रु\.?)?(?P<n>{_NUM})"
    rf"(?P<pct>%)?(?P<unit>(?:{'|'.join(re.escape(u) for u in _UNITS)})(?![A-Za-z]))?")


def cardinal(value: int) -> str:
    """"500": "पाँच सौ", "100000": "एक लाख", "1999": "उन्नीस सौ निन्यानवे"; past 10**15, digit by digit."""
    if value >= 10**15:
        return digits(str(value))
    if value < 100:
        return _UNDER_100[value]
    if 1100 <= value < 2000:
        return " ".join(w for w in (_UNDER_100[value // 100], "सौ", cardinal(value % 100) if value % 100 else "") if w)
    words = []
    for scale, name in _SCALES:
        if value >= scale:
            count, value = divmod(value, scale)
            words += [cardinal(count), name]
    if value:
        words.append(_UNDER_100[value])
    return " ".join(words)


def digits(text: str) -> str:
    return " ".join(_UNDER_100[int(d)] for d in text if "0" <= d <= "9")


def number(written: str) -> str:
    return read_number(written, cardinal, digits, " दशमलव ", longest=10)


class Hindi(InlineReader):
    form = _FORM
    followers = frozenset(_UNITS) | frozenset({"रुपये", "रुपया", "रुपए", "बजे", "मिनट", "प्रतिशत"})

    def digits(self, text: str) -> str:
        return digits(text)

    def cardinal(self, value: int) -> str:
        return cardinal(value)

    def word(self, word: str, before: str = "", after: str = "") -> str:
        if word in _RUPEE_WORDS and after[:1].isdigit():
            return ""
        return super().word(word, before, after)

    def say(self, match: re.Match[str], before: str, after: str) -> str:
        if match["time"]:
            h, m = int(match["h"]), int(match["mi"])
            if h > 24 or m > 59:
                return match[0]
            if after.startswith("बजे"):  # "14:30 बजे": the hour and minutes, the next word says "बजे"
                return f"{cardinal(h)} {cardinal(m)}" if m else cardinal(h)
            return f"{cardinal(h)} बजकर {cardinal(m)} मिनट" if m else f"{cardinal(h)} बजे"
        written = match["n"]
        sign = "माइनस " if match["neg"] else ""
        if match["pct"]:
            return f"{sign}{number(written)} प्रतिशत"
        if match["cur"] or before in _RUPEE_WORDS and match.start() == 0:
            symbol = (match["cur"] or "₹")[0]
            return sign + self._money(written, symbol if symbol in _CURRENCY else "₹")
        if match["unit"]:
            return f"{sign}{number(written)} {_UNITS[match['unit']]}"
        return sign + number(written)

    def _money(self, written: str, symbol: str) -> str:
        one, many, small = _CURRENCY[symbol]
        whole, _, frac = written.replace(",", "").partition(".")
        if len(frac) > 2 or len(whole) > 15:
            return f"{number(written)} {many}"
        said = f"{cardinal(int(whole))} {one if whole == '1' else many}"
        cents = int((frac + "00")[:2]) if frac else 0
        return f"{said} {cardinal(cents)} {small}" if cents else said


_READER = Hindi()
read_words, joins, may_continue, say_as = _READER.read_words, _READER.joins, _READER.may_continue, _READER.say_as
