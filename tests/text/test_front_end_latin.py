"""German, French, Spanish and Italian through the front end: written -> spoken cases, the command, random text."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lyre.cli import main
from lyre.text import de, es, fr, it
from lyre.text.front_end import TextFront, rules_for
from lyre.tts.text import clean, normalize

GERMAN = [
    ("Am 3. Mai 2024 kostet es 5,20 € und 1.000 Leute kommen um 14:30 Uhr.",
     ("Am dritten Mai zweitausendvierundzwanzig kostet es fünf Euro zwanzig und eintausend Leute kommen um "
      "vierzehn Uhr dreißig.")),
    ("Der 3. Mai ist ein Freitag.", "Der dritte Mai ist ein Freitag."),
    ("3. Mai 2024", "dritter Mai zweitausendvierundzwanzig"),
    ("Seit dem 1. Januar gilt das.", "Seit dem ersten Januar gilt das."),
    ("zum 3. Mal", "zum dritten Mal"),
    ("Er ist 3. Dann geht er.", "Er ist drei. Dann geht er."),
    ("Am 03.05.2024 ist Markt.", "Am dritten Mai zweitausendvierundzwanzig ist Markt."),
    ("Es ist der 21. Juni 1999.", "Es ist der einundzwanzigste Juni neunzehnhundertneunundneunzig."),
    ("1999 wurde er geboren.", "neunzehnhundertneunundneunzig wurde er geboren."),
    ("1500 Leute kamen.", "eintausendfünfhundert Leute kamen."),
    ("Im Jahr 1500 war das anders.", "Im Jahr fünfzehnhundert war das anders."),
    ("Es hat -5 Grad.", "Es hat minus fünf Grad."),
    ("Die Zinsen liegen bei 5 %.", "Die Zinsen liegen bei fünf Prozent."),
    ("Die Zinsen liegen bei 3,5%.", "Die Zinsen liegen bei drei Komma fünf Prozent."),
    ("Pi ist etwa 3,14.", "Pi ist etwa drei Komma eins vier."),
    ("Das sind 0,5 Liter.", "Das sind null Komma fünf Liter."),
    ("Das sind 1000 Stück.", "Das sind eintausend Stück."),
    ("Das kostet 0,99 €.", "Das kostet neunundneunzig Cent."),
    ("Das kostet €5.", "Das kostet fünf Euro."),
    ("Das kostet 1 €.", "Das kostet ein Euro."),
    ("Das kostet 1,50 $.", "Das kostet ein Dollar fünfzig."),
    ("Das kostet £ 2,50.", "Das kostet zwei Pfund fünfzig."),
    ("Eine Million: 1.000.000 €.", "Eine Million: eine Million Euro."),
    ("Die Dosis: 1.000,50 € inkl. Steuer.", "Die Dosis: eintausend Euro fünfzig inklusive Steuer."),
    ("Es sind 1 km bis dort.", "Es sind ein Kilometer bis dort."),
    ("Es sind 5 km bis dort.", "Es sind fünf Kilometer bis dort."),
    ("Er fährt 100 km/h.", "Er fährt einhundert Kilometer pro Stunde."),
    ("Das wiegt 5kg.", "Das wiegt fünf Kilogramm."),
    ("Draußen sind 20 °C.", "Draußen sind zwanzig Grad Celsius."),
    ("Wir brauchen 2 l Milch und 500 ml Sahne.", "Wir brauchen zwei Liter Milch und fünfhundert Milliliter Sahne."),
    ("Das dauert 1 h und 3 min.", "Das dauert eine Stunde und drei Minuten."),
    ("Er kommt um 1:05 Uhr.", "Er kommt um ein Uhr fünf."),
    ("Er kommt um 14.30 Uhr.", "Er kommt um vierzehn Uhr dreißig."),
    ("Er kommt um 14:00 Uhr.", "Er kommt um vierzehn Uhr."),
    ("Obst, z. B. Äpfel, Birnen usw.", "Obst, zum Beispiel Äpfel, Birnen und so weiter."),
    ("Das ist z.B. gut.", "Das ist zum Beispiel gut."),
    ("Das ist bzw. war so.", "Das ist beziehungsweise war so."),
    ("Das ist Nr. 5.", "Das ist Nummer fünf."),
    ("Dr. Müller wohnt in der Hauptstr. 5.", "Doktor Müller wohnt in der Hauptstraße fünf."),
    ("Wir kamen ca. 20 Minuten später.", "Wir kamen circa zwanzig Minuten später."),
    ("Der Code ist 007.", "Der Code ist null null sieben."),
]
FRENCH = [
    ("Le 3 mai 2024, cela coûte 5,20 € pour 1 000 personnes.",
     "Le trois mai deux mille vingt-quatre, cela coûte cinq euros vingt pour mille personnes."),
    ("Le 1er mai est férié.", "Le premier mai est férié."),
    ("C'est la 1re fois.", "C'est la première fois."),
    ("Le 2e jour, le 21e siècle.", "Le deuxième jour, le vingt et unième siècle."),
    ("Il arrive le 2nd.", "Il arrive le second."),
    ("Le 1 mai, on ne travaille pas.", "Le premier mai, on ne travaille pas."),
    ("Rendez-vous le 01/05/2024.", "Rendez-vous le premier mai deux mille vingt-quatre."),
    ("Rendez-vous le 03/05/2024 à 14h30.",
     "Rendez-vous le trois mai deux mille vingt-quatre à quatorze heures trente."),
    ("Il part à 14h.", "Il part à quatorze heures."),
    ("Il part à 14:30.", "Il part à quatorze heures trente."),
    ("Il part à 1h.", "Il part à une heure."),
    ("Il part à 21 h.", "Il part à vingt et une heures."),
    ("Cela coûte 1 000 000 €.", "Cela coûte un million d'euros."),
    ("Cela coûte 1\u00a0000,50 €.", "Cela coûte mille euros cinquante."),
    ("Un prix de 1\u202f234\u202f567 €.",
     "Un prix de un million deux cent trente-quatre mille cinq cent soixante-sept euros."),
    ("Il y a 1000 personnes.", "Il y a mille personnes."),
    ("Il fait -5 degrés.", "Il fait moins cinq degrés."),
    ("Le taux est de 5 %.", "Le taux est de cinq pour cent."),
    ("Le taux est de 5%.", "Le taux est de cinq pour cent."),
    ("Pi vaut 3,14.", "Pi vaut trois virgule quatorze."),
    ("Un kilo coûte 0,99 €.", "Un kilo coûte quatre-vingt-dix-neuf centimes."),
    ("Cela coûte 1 €.", "Cela coûte un euro."),
    ("Cela coûte 2 $.", "Cela coûte deux dollars."),
    ("Cela coûte £1.", "Cela coûte une livre."),
    ("Il reste 1 km.", "Il reste un kilomètre."),
    ("Il reste 5 km.", "Il reste cinq kilomètres."),
    ("La voiture roule à 100 km/h.", "La voiture roule à cent kilomètres par heure."),
    ("Il fait 20 °C.", "Il fait vingt degrés Celsius."),
    ("Il faut 2 l d'eau et 500 ml de lait.", "Il faut deux litres d'eau et cinq cents millilitres de lait."),
    ("Cela prend 3 min.", "Cela prend trois minutes."),
    ("Le paquet pèse 5 kg.", "Le paquet pèse cinq kilogrammes."),
    ("M. Dupont et Mme Durand sont là.", "Monsieur Dupont et Madame Durand sont là."),
    ("Le Dr Martin arrive.", "Le Docteur Martin arrive."),
    ("Des pommes, des poires, etc.", "Des pommes, des poires, et cetera."),
    ("Elle habite au n° 5.", "Elle habite au numéro cinq."),
    ("Il est né en 1999.", "Il est né en mille neuf cent quatre-vingt-dix-neuf."),
]
SPANISH = [
    ("El 3 de mayo de 2024 cuesta 5,20 € para 1.000 personas.",
     "El tres de mayo de dos mil veinticuatro cuesta cinco euros con veinte céntimos para mil personas."),
    ("El 1 de mayo es fiesta.", "El uno de mayo es fiesta."),
    ("Vivo en el 1.º piso.", "Vivo en el primer piso."),
    ("Es la 2.ª vez.", "Es la segunda vez."),
    ("Es el 1º y la 2ª.", "Es el primero y la segunda."),
    ("Vive en el 1.er piso.", "Vive en el primer piso."),
    ("El 3.er día llegó.", "El tercer día llegó."),
    ("Llega el 03/05/2024.", "Llega el tres de mayo de dos mil veinticuatro."),
    ("Llega a las 14:30.", "Llega a las catorce y treinta."),
    ("Llega a las 14:00.", "Llega a las catorce horas."),
    ("Llega a la 1:00.", "Llega a la una."),
    ("Hay 1.000.000 de personas.", "Hay un millón de personas."),
    ("Cuesta 1.000.000 €.", "Cuesta un millón de euros."),
    ("Cuesta 1.000,50 €.", "Cuesta mil euros con cincuenta céntimos."),
    ("Hay 1000 personas.", "Hay mil personas."),
    ("Hace -5 grados.", "Hace menos cinco grados."),
    ("La tasa es del 5 %.", "La tasa es del cinco por ciento."),
    ("La tasa es del 5%.", "La tasa es del cinco por ciento."),
    ("Pi es 3,14.", "Pi es tres coma catorce."),
    ("Cuesta 0,99 €.", "Cuesta noventa y nueve céntimos."),
    ("Cuesta 1 €.", "Cuesta un euro."),
    ("Cuesta $5.", "Cuesta cinco dólares."),
    ("Cuesta £1.", "Cuesta una libra."),
    ("Cuesta 200 £.", "Cuesta doscientas libras."),
    ("Faltan 21 km.", "Faltan veintiún kilómetros."),
    ("Va a 100 km/h.", "Va a cien kilómetros por hora."),
    ("Hace 20 °C.", "Hace veinte grados Celsius."),
    ("Necesito 2 l de agua y 500 ml de leche.", "Necesito dos litros de agua y quinientos mililitros de leche."),
    ("Tarda 1 h y 3 min.", "Tarda una hora y tres minutos."),
    ("Pesa 5 kg.", "Pesa cinco kilogramos."),
    ("El Sr. García y la Sra. López llegan.", "El señor García y la señora López llegan."),
    ("La Dra. Pérez atiende.", "La doctora Pérez atiende."),
    ("Manzanas, peras, etc.", "Manzanas, peras, etcétera."),
    ("Nació en 1999.", "Nació en mil novecientos noventa y nueve."),
]
ITALIAN = [
    ("Il 3 maggio 2024 costa 5,20 € per 1.000 persone.",
     "Il tre maggio duemilaventiquattro costa cinque euro e venti centesimi per mille persone."),
    ("Il 1 maggio è festa.", "Il primo maggio è festa."),
    ("È il 1º piano.", "È il primo piano."),
    ("È la 2ª volta.", "È la seconda volta."),
    ("Arriva il 03/05/2024.", "Arriva il tre maggio duemilaventiquattro."),
    ("Arriva alle 14:30.", "Arriva alle quattordici e trenta."),
    ("Arriva alle 14:00.", "Arriva alle quattordici."),
    ("Ci sono 1.000.000 di persone.", "Ci sono un milione di persone."),
    ("Costa 1.000.000 €.", "Costa un milione di euro."),
    ("Costa 1.000,50 €.", "Costa mille euro e cinquanta centesimi."),
    ("Ci sono 1000 persone.", "Ci sono mille persone."),
    ("Fa -5 gradi.", "Fa meno cinque gradi."),
    ("Il tasso è del 5 %.", "Il tasso è del cinque per cento."),
    ("Il tasso è del 5%.", "Il tasso è del cinque per cento."),
    ("Pi vale 3,14.", "Pi vale tre virgola quattordici."),
    ("Costa 0,99 €.", "Costa novantanove centesimi."),
    ("Costa 1 €.", "Costa un euro."),
    ("Costa $5.", "Costa cinque dollari."),
    ("Costa £1.", "Costa una sterlina."),
    ("Manca 1 km.", "Manca un chilometro."),
    ("Mancano 5 km.", "Mancano cinque chilometri."),
    ("Va a 100 km/h.", "Va a cento chilometri orari."),
    ("Fa 20 °C.", "Fa venti gradi Celsius."),
    ("Servono 2 l di acqua e 500 ml di latte.", "Servono due litri di acqua e cinquecento millilitri di latte."),
    ("Ci vuole 1 h e 3 min.", "Ci vuole un'ora e tre minuti."),
    ("Pesa 5 kg.", "Pesa cinque chilogrammi."),
    ("Il Sig. Rossi e la Dott.ssa Bianchi arrivano.", "Il signor Rossi e la dottoressa Bianchi arrivano."),
    ("Il Dott. Verdi è qui.", "Il dottor Verdi è qui."),
    ("Mele, pere, ecc.", "Mele, pere, eccetera."),
    ("È nato nel 1999.", "È nato nel millenovecentonovantanove."),
    ("Ci sono 21 persone.", "Ci sono ventuno persone."),
    ("Abito al n. 5.", "Abito al numero cinque."),
]
CASES = {"de": GERMAN, "fr": FRENCH, "es": SPANISH, "it": ITALIAN}
PACKAGES = {"de": de, "fr": fr, "es": es, "it": it}


def test_each_language_has_its_cases_and_no_repeats() -> None:
    for cases in CASES.values():
        assert len(cases) >= 30
        assert len({written for written, _ in cases}) == len(cases)


@pytest.mark.parametrize(("language", "written", "spoken"),
                         [(language, w, s) for language, cases in CASES.items() for w, s in cases])
def test_written_text_is_said_as_people_say_it(language: str, written: str, spoken: str) -> None:
    front = TextFront()
    assert front.read(normalize(written), language).spoken == spoken
    assert front.fallbacks == 0


@pytest.mark.parametrize(("language", "text", "spoken"), [
    ("de", "Am 3. Mai 2024 kostet es 5,20 €.", "Am dritten Mai zweitausendvierundzwanzig kostet es fünf Euro zwanzig."),
    ("fr-FR", "Le 3 mai 2024, cela coûte 5,20 € pour 1 000 personnes.",
     "Le trois mai deux mille vingt-quatre, cela coûte cinq euros vingt pour mille personnes."),
    ("es-ES", "Cuesta 5,20 €.", "Cuesta cinco euros con veinte céntimos."),
    ("it", "Alle 14:30.", "Alle quattordici e trenta."),
])
def test_lyre_normalize_reads_each_language(language: str, text: str, spoken: str,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["normalize", "--language", language, text]) == 0
    assert capsys.readouterr().out.strip() == spoken


def test_a_written_word_keeps_what_it_says_and_a_symbol_says_nothing_of_its_own() -> None:
    said = TextFront().read("kostet 5,20 € heute", "de")
    assert said.words == (("kostet", "kostet"), ("5,20", "fünf Euro zwanzig"), ("€", ""), ("heute", "heute"))
    grouped = TextFront().read("pour 1 000 personnes", "fr").words
    assert grouped == (("pour", "pour"), ("1", ""), ("000", "mille"), ("personnes", "personnes"))


@pytest.mark.parametrize(("language", "left", "right", "joined"), [
    ("de", "5", "km", True), ("de", "5,20", "€", True), ("de", "3.", "Mai", True), ("de", "z.", "B.", True),
    ("de", "Mai", "2024", True), ("de", "kostet", "es", False), ("fr", "1", "000", True),
    ("fr", "mille", "personnes", False), ("es", "5", "%", True), ("it", "€", "5", True),
])
def test_words_read_together_are_known_to_the_segmenter(language: str, left: str, right: str, joined: bool) -> None:
    assert TextFront.joins(left, right, language) is joined


def test_a_last_word_that_may_join_what_comes_next_is_known() -> None:
    assert TextFront.may_continue("5", "de") and TextFront.may_continue("z.", "de")
    assert TextFront.may_continue("€", "fr") and TextFront.may_continue("mai", "fr")
    assert not TextFront.may_continue("Haus", "de") and not TextFront.may_continue("casa", "es")


@pytest.mark.parametrize(("language", "kind", "text", "spoken"), [
    ("de", "cardinal", "1.000", "eintausend"), ("de", "ordinal", "3.", "dritter"),
    ("fr", "date", "03/05/2024", "trois mai deux mille vingt-quatre"), ("es", "time", "14:30", "catorce y treinta"),
    ("it", "digits", "123", "uno due tre"), ("de", "characters", "AB1", "A B eins"), ("fr", "date", "x", None),
])
def test_say_as_reads_the_kind_it_names(language: str, kind: str, text: str, spoken: str | None) -> None:
    rules = rules_for(language)
    assert rules is not None and rules.say_as(kind, text) == spoken


_PLAIN = st.text(alphabet="abcdefghijklmnopqrstuvwxyzäöüßéèàçñíóúìò", min_size=1, max_size=9)
_PIECES = st.one_of(
    _PLAIN, st.text(max_size=8),
    st.sampled_from(["5", "1.000", "3.", "5,20", "€", "$", "%", "km", "Uhr", "14:30", "1er", "1.º", "2ª", "1", "000",
                     "-", "z.", "B.", "03.05.2024", "99999999999999999999", "0,", ",5", "1.", "Mai", "mayo", "de",
                     "14h30", "°C", "-€5", "€-5", "1.000.000,999", "12:99", "31.13.2024", "0.", "Nr.", "n°"]))


@pytest.mark.parametrize("language", list(CASES))
@settings(max_examples=120, deadline=None)
@given(pieces=st.lists(_PIECES, max_size=12))
def test_any_text_is_read_without_raising_and_keeps_its_plain_words(language: str, pieces: list[str]) -> None:
    words = clean(" ".join(pieces)).split()
    package = PACKAGES[language]
    spoken = package.read_words(words)
    assert len(spoken) == len(words)
    for i, (word, said) in enumerate(zip(words, spoken)):
        before = words[i - 1] if i else ""
        if word.isalpha() and word.islower() and word not in package.ABBREVIATIONS and not any(
                ch.isdigit() or ch in "€$£" for ch in before):
            assert said == word
