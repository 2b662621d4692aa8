"""German: written German read aloud (numbers, ordinals, money, dates, times, units, abbreviations).

    read_words("Am 3. Mai 2024 kostet es 5,20 €".split())
    # ["Am", "dritten", "Mai", "zweitausendvierundzwanzig", "kostet", "es", "fünf Euro zwanzig", ""]

The forms are `lyre.text.latin`'s; the words are num2words' ("de") except where lyre writes its own:
- "3." is an ordinal before a month ("am 3. Mai") or between an article and a noun ("zum 3. Mal"); num2words
  gives the bare stem ("dritte"), and the ending follows the word before: "am", "im", "zum", "vom", "dem",
  "den" take "-en", "der", "die", "das" take "-e", none takes "-er" ("3. Mai 2024": "dritter Mai").
- One before a noun is "ein"/"eine" (num2words says "eins" alone): "ein Kilometer", "eine Stunde", "ein Uhr".
- A year from 1100 to 1999 is said in hundreds ("neunzehnhundertneunundneunzig"), a count not
  ("eintausendneunhundert..."). German capitalises nouns, so a four-digit number before a capitalised word is a
  count ("1500 Leute") and elsewhere a year ("1999 geboren"), as after a month or "im Jahr".
- "14:30 Uhr" and "14.30 Uhr" are "vierzehn Uhr dreißig" (the written "Uhr" then says nothing of its own);
  "5,20 €" is "fünf Euro zwanzig".
- A capitalised word ending in "str." is a street ("Hauptstr. 5": "Hauptstraße fünf").
- An abbreviation's full stop ends a sentence only at the end of the text (nouns are capitalised, so a capital
  after it says nothing).
"""

from __future__ import annotations

import re

from lyre.text.latin import Currency, Reader, Unit, words

__all__ = ["ABBREVIATIONS", "joins", "may_continue", "read_words", "say_as"]

ABBREVIATIONS = {
    "z. b.": "zum Beispiel", "z.b.": "zum Beispiel", "usw.": "und so weiter", "bzw.": "beziehungsweise",
    "nr.": "Nummer", "dr.": "Doktor", "str.": "Straße", "d. h.": "das heißt", "d.h.": "das heißt",
    "u. a.": "unter anderem", "u.a.": "unter anderem", "ca.": "circa", "evtl.": "eventuell", "inkl.": "inklusive",
    "exkl.": "exklusive", "prof.": "Professor", "hr.": "Herr", "hrn.": "Herrn", "fr.": "Frau", "vgl.": "vergleiche",
    "bzgl.": "bezüglich", "ggf.": "gegebenenfalls", "mio.": "Millionen", "mrd.": "Milliarden", "tel.": "Telefon",
    "jh.": "Jahrhundert", "u. ä.": "und Ähnliches", "o. ä.": "oder Ähnliches", "s.": "siehe", "st.": "Sankt",
    "abs.": "Absatz", "allg.": "allgemein", "geb.": "geboren", "min.": "Minuten", "std.": "Stunden",
}
_TITLES = frozenset({"dr.", "prof.", "hr.", "hrn.", "fr.", "st.", "nr."})
_MONTHS = ("Januar", "Februar", "März", "April", "Mai", "Juni", "Juli", "August", "September", "Oktober",
           "November", "Dezember")
_MONTH_WORDS = {**{m.lower(): i + 1 for i, m in enumerate(_MONTHS)}, "jan": 1, "feb": 2, "mär": 3, "apr": 4,
                "jun": 6, "jul": 7, "aug": 8, "sep": 9, "sept": 9, "okt": 10, "nov": 11, "dez": 12, "jänner": 1}
# The word before an ordinal, and the ending it gives it ("am dritten", "der dritte"); none: "-er".
_ENDINGS = {**dict.fromkeys("am im zum vom beim dem den des ab bis seit vor nach zur einem einen".split(), "n"),
            **dict.fromkeys("der die das jeder jede jedes".split(), "")}
_CLOCK = re.compile(r"(\d{1,2})[:.](\d{2})")
_YEAR_CUES = frozenset("jahr jahre jahres jahren im seit bis von ab vor nach um anno anfang ende mitte sommer "
                       "winter herbst frühjahr frühling".split())


class German(Reader):
    lang = "de"
    minus, point, percent = "minus", "Komma", "Prozent"
    digit_by_digit = True
    currencies = {"€": Currency("Euro", "Euro", "Cent", "Cent", "m"),
                  "$": Currency("Dollar", "Dollar", "Cent", "Cent", "m"),
                  "£": Currency("Pfund", "Pfund", "Penny", "Pence", "n")}
    units = {
        "km": Unit("Kilometer", "Kilometer"), "m": Unit("Meter", "Meter"), "cm": Unit("Zentimeter", "Zentimeter"),
        "mm": Unit("Millimeter", "Millimeter"), "kg": Unit("Kilogramm", "Kilogramm", "n"),
        "g": Unit("Gramm", "Gramm", "n"), "°C": Unit("Grad Celsius", "Grad Celsius", "n"),
        "°": Unit("Grad", "Grad", "n"), "km/h": Unit("Kilometer pro Stunde", "Kilometer pro Stunde"),
        "l": Unit("Liter", "Liter"), "ml": Unit("Milliliter", "Milliliter"), "h": Unit("Stunde", "Stunden", "f"),
        "min": Unit("Minute", "Minuten", "f"), "s": Unit("Sekunde", "Sekunden", "f"),
    }
    months, month_words = _MONTHS, _MONTH_WORDS
    abbreviations, titles = ABBREVIATIONS, _TITLES
    joiners = {"&": "und", "+": "plus", "=": "gleich"}

    def count(self, value: int, gender: str) -> str:
        if value == 1:
            return "eine" if gender == "f" else "ein"
        return self.cardinal(value)

    def ordinal(self, value: int, form: str = "r") -> str:
        stem = super().ordinal(value)
        return stem + form if stem.endswith("e") else stem

    def year(self, value: int) -> str:
        if 1100 <= value <= 1999:
            return words(value, "de", "year")
        return self.cardinal(value)

    def day(self, value: int, before: str) -> str:
        return self.ordinal(value, _ENDINGS.get(before.lower(), "r"))

    def time(self, hours: int, minutes: int) -> str:
        return f"{self._hours(hours)} Uhr" + (f" {self.cardinal(minutes)}" if minutes else "")

    def _hours(self, hours: int) -> str:
        return "ein" if hours == 1 else self.cardinal(hours)

    def money(self, currency: Currency, whole: int, cents: int | None) -> str:
        if whole == 0 and cents:
            return f"{self.count(cents, 'm')} {currency.small_one if cents == 1 else currency.small_many}"
        said = f"{self.count(whole, currency.gender)} {currency.one if whole == 1 else currency.many}"
        return f"{said} {self.cardinal(cents)}" if cents else said

    def is_year(self, a: str, aa: str, b: str) -> bool:
        return self.month(a) is not None or a.lower() in _YEAR_CUES or not b[:1].isupper()

    def _ends_sentence(self, more: bool, after: str) -> bool:
        return not more

    def _plain(self, word: str, core: str, a: str, b: str, more: bool) -> str:
        if core == "Uhr" and (time := _CLOCK.fullmatch(a)) and int(time[1]) <= 24 and int(time[2]) < 60:
            minutes = int(time[2])  # the hours are the time's word, "Uhr" and the minutes this one's
            return word.replace("Uhr", "Uhr" + (f" {self.cardinal(minutes)}" if minutes else ""), 1)
        lead, rest = word[:word.index(core)], word[word.index(core) + len(core):]
        if len(core) > 3 and core.endswith("str") and rest.startswith(".") and core[0].isupper():
            return lead + core[:-3] + "straße" + (rest if not more else rest[1:])  # "Hauptstr." a street
        return super()._plain(word, core, a, b, more)

    def _form(self, core: str, trail: str, a: str, aa: str, b: str, bb: str) -> tuple[str, str] | None:
        if re.fullmatch(r"\d{1,3}", core) and trail.startswith(".") and int(core) > 0:
            noun = b[:1].isupper() and a.lower() in _ENDINGS
            if self.month(b) is not None and int(core) <= 31:
                return self.day(int(core), a), trail[1:]
            if noun:
                return self.ordinal(int(core), _ENDINGS[a.lower()]), trail[1:]
        if (time := _CLOCK.fullmatch(core)) and b == "Uhr" and int(time[1]) <= 24 and int(time[2]) < 60:
            return self._hours(int(time[1])), trail
        return None


_READER = German()
read_words, joins, may_continue, say_as = _READER.read_words, _READER.joins, _READER.may_continue, _READER.say_as
