"""French: written French read aloud (numbers, ordinals, money, dates, times, units, abbreviations).

    read_words("Le 3 mai 2024, cela coûte 5,20 €".split())
    # ["Le", "trois", "mai", "deux mille vingt-quatre,", "cela", "coûte", "cinq euros vingt", ""]

The forms are `lyre.text.latin`'s; the words are num2words' ("fr", hyphens as French writes them) except where
lyre writes its own:
- Thousands are grouped by a space ("1 000", also a no-break or narrow no-break space, which split words as
  a space does): the digits after it belong to the number before.
- "un" before a feminine noun is "une" ("une heure", "vingt et une heures", "une livre"); a noun after one is
  singular below two ("1,5 kilomètre" is said "kilomètres" here: the plural is kept after any decimal).
- The first of a month is "premier" ("1er mai", "1 mai", "01/05/2024"); "1re", "1ère" are "première".
- "14h30", "14h" and "14:30" are "quatorze heures trente"; "5,20 €" is "cinq euros vingt", "1 000 000 €"
  "un million d'euros".
- Years are said as counts ("deux mille vingt-quatre", "mille neuf cent quatre-vingt-dix-neuf"), as num2words
  says them; the older "mil neuf cent" is not used.
"""

from __future__ import annotations

import re

from lyre.text.latin import Currency, Reader, Unit

__all__ = ["ABBREVIATIONS", "joins", "may_continue", "read_words", "say_as"]

ABBREVIATIONS = {
    "m.": "Monsieur", "mm.": "Messieurs", "mme": "Madame", "mmes": "Mesdames", "mlle": "Mademoiselle",
    "dr": "Docteur", "dr.": "Docteur", "pr": "Professeur", "pr.": "Professeur", "etc.": "et cetera",
    "p. ex.": "par exemple", "c.-à-d.": "c'est-à-dire", "env.": "environ", "av.": "avenue", "bd": "boulevard",
    "st": "Saint", "ste": "Sainte", "n°": "numéro", "tél.": "téléphone", "cf.": "confer", "apr.": "après",
    "av. j.-c.": "avant Jésus-Christ", "apr. j.-c.": "après Jésus-Christ", "vol.": "volume", "éd.": "édition",
}
_TITLES = frozenset({"m.", "mm.", "dr.", "pr.", "av.", "apr."})
_MONTHS = ("janvier", "février", "mars", "avril", "mai", "juin", "juillet", "août", "septembre", "octobre",
           "novembre", "décembre")
_MONTH_WORDS = {**{m: i + 1 for i, m in enumerate(_MONTHS)}, "janv": 1, "févr": 2, "avr": 4, "juil": 7,
                "sept": 9, "oct": 10, "nov": 11, "déc": 12}
_SCALE = re.compile(r"(millions?|milliards?)$")


class French(Reader):
    lang = "fr"
    minus, point, percent = "moins", "virgule", "pour cent"
    space_groups = True
    currencies = {"€": Currency("euro", "euros", "centime", "centimes"),
                  "$": Currency("dollar", "dollars", "cent", "cents"),
                  "£": Currency("livre", "livres", "penny", "pence", "f")}
    units = {
        "km": Unit("kilomètre", "kilomètres"), "m": Unit("mètre", "mètres"), "cm": Unit("centimètre", "centimètres"),
        "mm": Unit("millimètre", "millimètres"), "kg": Unit("kilogramme", "kilogrammes"),
        "g": Unit("gramme", "grammes"), "°C": Unit("degré Celsius", "degrés Celsius"), "°": Unit("degré", "degrés"),
        "km/h": Unit("kilomètre par heure", "kilomètres par heure"), "l": Unit("litre", "litres"),
        "ml": Unit("millilitre", "millilitres"), "h": Unit("heure", "heures", "f"),
        "min": Unit("minute", "minutes", "f"), "s": Unit("seconde", "secondes", "f"),
    }
    months, month_words = _MONTHS, _MONTH_WORDS
    abbreviations, titles = ABBREVIATIONS, _TITLES
    ordinal_form = re.compile(r"(?P<n>\d+)(?P<suffix>er|re|ère|e|ème|nd|nde)")
    joiners = {"&": "et", "+": "plus", "=": "égale"}

    def count(self, value: int, gender: str) -> str:
        said = self.cardinal(value)
        return said[:-2] + "une" if gender == "f" and said.endswith("un") else said

    def ordinal(self, value: int, form: str = "m") -> str:
        said = super().ordinal(value)
        return "première" if value == 1 and form == "f" else said

    def said_ordinal(self, value: int, suffix: str) -> str:
        if suffix in ("nd", "nde") and value == 2:
            return "second" if suffix == "nd" else "seconde"
        return self.ordinal(value, "f" if suffix in ("re", "ère") else "m")

    def day(self, value: int, before: str) -> str:
        return "premier" if value == 1 else self.cardinal(value)

    def time(self, hours: int, minutes: int) -> str:
        said = f"{self.count(hours, 'f')} {'heure' if hours < 2 else 'heures'}"
        return f"{said} {self.cardinal(minutes)}" if minutes else said

    def money(self, currency: Currency, whole: int, cents: int | None) -> str:
        if whole == 0 and cents:
            return f"{self.count(cents, 'm')} {currency.small_one if cents == 1 else currency.small_many}"
        said = self.count(whole, currency.gender)
        name = currency.one if whole < 2 else currency.many
        said += f" d'{name}" if _SCALE.search(said) and name[0] in "aeiou" else \
            f" de {name}" if _SCALE.search(said) else f" {name}"
        return f"{said} {self.cardinal(cents)}" if cents else said

    def _form(self, core: str, trail: str, a: str, aa: str, b: str, bb: str) -> tuple[str, str] | None:
        if (time := re.fullmatch(r"(\d{1,2})h(\d{2})?", core)) and int(time[1]) <= 24 \
                and int(time[2] or 0) < 60:
            return self.time(int(time[1]), int(time[2] or 0)), trail
        return None


_READER = French()
read_words, joins, may_continue, say_as = _READER.read_words, _READER.joins, _READER.may_continue, _READER.say_as
