"""Spanish: written Spanish read aloud (numbers, ordinals, money, dates, times, units, abbreviations).

    read_words("El 3 de mayo de 2024 cuesta 5,20 €".split())
    # ["El", "tres", "de", "mayo", "de", "dos mil veinticuatro", "cuesta", "cinco euros con veinte céntimos", ""]

The forms are `lyre.text.latin`'s; the words are num2words' ("es") except where lyre writes its own:
- The decimal mark is said "coma" ("5,2": "cinco coma dos"); num2words says "punto". Thousands are grouped by
  a full stop ("1.000"), as in Spain; "1,000" is read as a decimal.
- A count before a noun agrees with it: "uno" is "un" before a masculine noun ("un kilómetro", "veintiún
  euros") and "una" before a feminine one ("una hora", "veintiuna libras", "doscientas libras").
- Ordinals: "1.º", "1º" (and "1.o", "1o", what NFKC makes of them) masculine, "2.ª", "2ª" feminine
  ("segunda"): num2words gives only the masculine. "1.er", "3.er", and "1.º" before a word, are "primer",
  "tercer" ("el 1.º piso": "el primer piso").
- The day of a date is a cardinal ("el uno de mayo"), as the RAE has it.
- "14:30" is "catorce y treinta", "14:00" "catorce horas"; "5,20 €" is "cinco euros con veinte céntimos".
"""

from __future__ import annotations

import re

from lyre.text.latin import Currency, Reader, Unit

__all__ = ["ABBREVIATIONS", "joins", "may_continue", "read_words", "say_as"]

ABBREVIATIONS = {
    "sr.": "señor", "sra.": "señora", "srta.": "señorita", "sres.": "señores", "dr.": "doctor", "dra.": "doctora",
    "etc.": "etcétera", "ud.": "usted", "uds.": "ustedes", "pág.": "página", "núm.": "número", "n.º": "número",
    "n.o": "número", "nº": "número", "aprox.": "aproximadamente", "p. ej.": "por ejemplo", "avda.": "avenida",
    "av.": "avenida", "ee. uu.": "Estados Unidos", "ee.uu.": "Estados Unidos", "d.": "don", "dña.": "doña",
    "tel.": "teléfono", "prof.": "profesor", "c/": "calle", "depto.": "departamento", "admón.": "administración",
}
_TITLES = frozenset({"sr.", "sra.", "srta.", "sres.", "dr.", "dra.", "d.", "dña.", "prof.", "n.º", "n.o", "núm."})
_MONTHS = ("enero", "febrero", "marzo", "abril", "mayo", "junio", "julio", "agosto", "septiembre", "octubre",
           "noviembre", "diciembre")
_MONTH_WORDS = {**{m: i + 1 for i, m in enumerate(_MONTHS)}, "setiembre": 9, "ene": 1, "feb": 2, "mar": 3,
                "abr": 4, "jun": 6, "jul": 7, "ago": 8, "sept": 9, "oct": 10, "nov": 11, "dic": 12}
_FUNCTION_WORDS = frozenset("y e o u de del a al en con por para que se es".split())
_SCALE = re.compile(r"(millón|millones)$")


class Spanish(Reader):
    lang = "es"
    minus, point, percent = "menos", "coma", "por ciento"
    currencies = {"€": Currency("euro", "euros", "céntimo", "céntimos"),
                  "$": Currency("dólar", "dólares", "centavo", "centavos"),
                  "£": Currency("libra", "libras", "penique", "peniques", "f")}
    units = {
        "km": Unit("kilómetro", "kilómetros"), "m": Unit("metro", "metros"), "cm": Unit("centímetro", "centímetros"),
        "mm": Unit("milímetro", "milímetros"), "kg": Unit("kilogramo", "kilogramos"), "g": Unit("gramo", "gramos"),
        "°C": Unit("grado Celsius", "grados Celsius"), "°": Unit("grado", "grados"),
        "km/h": Unit("kilómetro por hora", "kilómetros por hora"), "l": Unit("litro", "litros"),
        "ml": Unit("mililitro", "mililitros"), "h": Unit("hora", "horas", "f"), "min": Unit("minuto", "minutos"),
        "s": Unit("segundo", "segundos"),
    }
    months, month_words = _MONTHS, _MONTH_WORDS
    abbreviations, titles = ABBREVIATIONS, _TITLES
    ordinal_form = re.compile(r"(?P<n>\d+)(?P<suffix>\.?[ºªoa]|\.er)")
    joiners = {"&": "y", "+": "más", "=": "igual a"}

    def count(self, value: int, gender: str) -> str:
        said = self.cardinal(value)
        if gender == "f":
            said = re.sub(r"uno$", "una", said)
            return re.sub(r"ientos\b", "ientas", said) if value < 10**6 else said
        return re.sub(r"veintiuno$", "veintiún", re.sub(r"(?<!veinti)uno$", "un", said))

    def ordinal(self, value: int, form: str = "m") -> str:
        said = super().ordinal(value)
        if form == "f":
            return " ".join(w[:-1] + "a" if w.endswith("o") else w for w in said.split())
        if form == "apocope":
            return re.sub(r"(primero|tercero)$", lambda m: m[1][:-1], said)
        return said

    def said_ordinal(self, value: int, suffix: str) -> str:
        form = "f" if suffix[-1] in "ªa" else "apocope" if suffix == ".er" else "m"
        return self.ordinal(value, form)

    def _form(self, core: str, trail: str, a: str, aa: str, b: str, bb: str) -> tuple[str, str] | None:
        ordinal = self.ordinal_form.fullmatch(core)
        if ordinal and ordinal["suffix"][-1] in "ºo" and not trail and b.isalpha() and b.islower() \
                and b not in _FUNCTION_WORDS \
                and len(ordinal["n"]) <= 15:
            return self.ordinal(int(ordinal["n"]), "apocope"), trail  # "1.º piso": "primer piso"
        return None

    def date(self, day: int, month: int, year: str | None, before: str) -> str:
        said = f"{self.day(day, before)} de {self.months[month - 1]}"
        return said + (f" de {self.year_of(year)}" if year else "")

    def is_year(self, a: str, aa: str, b: str) -> bool:
        return self.month(a) is not None or a == "de" and self.month(aa) is not None

    def time(self, hours: int, minutes: int) -> str:
        said = self.count(hours, "f")
        return f"{said} y {self.cardinal(minutes)}" if minutes else said + ("" if hours == 1 else " horas")

    def money(self, currency: Currency, whole: int, cents: int | None) -> str:
        return self.money_joined(currency, whole, cents, _SCALE, "de", "con")


_READER = Spanish()
read_words, joins, may_continue, say_as = _READER.read_words, _READER.joins, _READER.may_continue, _READER.say_as
