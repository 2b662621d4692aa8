"""Italian: written Italian read aloud (numbers, ordinals, money, dates, times, units, abbreviations).

    read_words("Il 3 maggio 2024 costa 5,20 €".split())
    # ["Il", "tre", "maggio", "duemilaventiquattro", "costa", "cinque euro e venti centesimi", ""]

The forms are `lyre.text.latin`'s; the words are num2words' ("it") except where lyre writes its own:
- "uno" before a noun is "un" ("un euro", "un chilometro") or "una" ("una ora", "una sterlina").
- Ordinals: "1º" (and "1o", what NFKC makes of it) masculine, "2ª" ("2a") feminine ("seconda"): num2words
  gives only the masculine.
- The first of a month is "primo" ("1 maggio": "primo maggio"), every other day a cardinal.
- "14:30" is "quattordici e trenta", "14:00" "quattordici"; "5,20 €" is "cinque euro e venti centesimi",
  "1.000.000 €" "un milione di euro".
"""

from __future__ import annotations

import re

from lyre.text.latin import Currency, Reader, Unit

__all__ = ["ABBREVIATIONS", "joins", "may_continue", "read_words", "say_as"]

ABBREVIATIONS = {
    "sig.": "signor", "sig.ra": "signora", "sig.na": "signorina", "sigg.": "signori", "dott.": "dottor",
    "dott.ssa": "dottoressa", "ecc.": "eccetera", "prof.": "professor", "prof.ssa": "professoressa",
    "ing.": "ingegner", "avv.": "avvocato", "p.es.": "per esempio", "p. es.": "per esempio", "n.": "numero",
    "pag.": "pagina", "tel.": "telefono", "sgg.": "seguenti", "cfr.": "confronta", "geom.": "geometra",
    "arch.": "architetto", "on.": "onorevole", "v.": "via", "c.a.": "corrente anno",
}
_TITLES = frozenset({"sig.", "sig.ra", "sig.na", "sigg.", "dott.", "dott.ssa", "prof.", "prof.ssa", "ing.", "avv.",
                     "n.", "on.", "v.", "geom.", "arch."})
_MONTHS = ("gennaio", "febbraio", "marzo", "aprile", "maggio", "giugno", "luglio", "agosto", "settembre",
           "ottobre", "novembre", "dicembre")
_MONTH_WORDS = {**{m: i + 1 for i, m in enumerate(_MONTHS)}, "gen": 1, "feb": 2, "mar": 3, "apr": 4, "mag": 5,
                "giu": 6, "lug": 7, "ago": 8, "set": 9, "ott": 10, "nov": 11, "dic": 12}
_SCALE = re.compile(r"(milione|milioni|miliardo|miliardi)$")


class Italian(Reader):
    lang = "it"
    minus, point, percent = "meno", "virgola", "per cento"
    currencies = {"€": Currency("euro", "euro", "centesimo", "centesimi"),
                  "$": Currency("dollaro", "dollari", "centesimo", "centesimi"),
                  "£": Currency("sterlina", "sterline", "penny", "pence", "f")}
    units = {
        "km": Unit("chilometro", "chilometri"), "m": Unit("metro", "metri"), "cm": Unit("centimetro", "centimetri"),
        "mm": Unit("millimetro", "millimetri"), "kg": Unit("chilogrammo", "chilogrammi"),
        "g": Unit("grammo", "grammi"), "°C": Unit("grado Celsius", "gradi Celsius"), "°": Unit("grado", "gradi"),
        "km/h": Unit("chilometro orario", "chilometri orari"), "l": Unit("litro", "litri"),
        "ml": Unit("millilitro", "millilitri"), "h": Unit("ora", "ore", "f"), "min": Unit("minuto", "minuti"),
        "s": Unit("secondo", "secondi"),
    }
    months, month_words = _MONTHS, _MONTH_WORDS
    abbreviations, titles = ABBREVIATIONS, _TITLES
    ordinal_form = re.compile(r"(?P<n>\d+)(?P<suffix>[ºªoa])")
    joiners = {"&": "e", "+": "più", "=": "uguale a"}

    def count(self, value: int, gender: str) -> str:
        if value == 1:
            return "una" if gender == "f" else "un"
        return self.cardinal(value)

    def measured(self, core: str, unit: Unit) -> str | None:
        said = super().measured(core, unit)
        return re.sub(r"^una (?=[aeiou])", "un'", said) if said else None  # "un'ora"

    def ordinal(self, value: int, form: str = "m") -> str:
        said = super().ordinal(value)
        return said[:-1] + "a" if form == "f" and said.endswith("o") else said

    def said_ordinal(self, value: int, suffix: str) -> str:
        return self.ordinal(value, "f" if suffix in "ªa" else "m")

    def day(self, value: int, before: str) -> str:
        return "primo" if value == 1 else self.cardinal(value)

    def time(self, hours: int, minutes: int) -> str:
        said = "una" if hours == 1 else self.cardinal(hours)
        return f"{said} e {self.cardinal(minutes)}" if minutes else said

    def money(self, currency: Currency, whole: int, cents: int | None) -> str:
        return self.money_joined(currency, whole, cents, _SCALE, "di", "e")


_READER = Italian()
read_words, joins, may_continue, say_as = _READER.read_words, _READER.joins, _READER.may_continue, _READER.say_as
