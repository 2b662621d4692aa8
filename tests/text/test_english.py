"""The English front end against its table of written -> spoken cases, and the seam around it."""

from __future__ import annotations

import pytest

from lyre.text.front_end import TextFront, rules_for
from lyre.text.said import Said
from lyre.tts.text import normalize
from english_cases import CASES


def test_the_table_is_large_and_has_no_repeats() -> None:
    assert len(CASES) >= 150
    assert len({written for written, _ in CASES}) == len(CASES)


@pytest.mark.parametrize(("written", "spoken"), CASES)
def test_written_english_is_said_as_people_say_it(written: str, spoken: str) -> None:
    assert TextFront().read(normalize(written), "en").spoken == spoken


def test_each_written_word_keeps_what_it_says() -> None:
    said = TextFront().read("It costs $5.20 today.", "en-US")
    assert said.words[2] == ("$5.20", "five dollars and twenty cents")
    assert said.written == "It costs $5.20 today."
    assert said.timed()[2] == ("$5.20", ("five", "dollars", "and", "twenty", "cents"))


def test_a_word_that_says_nothing_of_its_own_is_timed_with_the_next() -> None:
    said = TextFront().read("pay USD 5 & go", "en")
    assert said.timed() == [("pay", ("pay",)), ("USD 5 &", ("five", "US", "dollars", "and")), ("go", ("go",))]


def test_off_or_another_language_says_it_as_written() -> None:
    front = TextFront()
    assert front.read("$5 now", "en", normalize=False).spoken == "$5 now"
    assert front.read("custa 5 €", "pt").spoken == "custa 5 €"  # Portuguese: no rules here
    assert not front.read("custa 5", "pt").changed
    assert TextFront(normalize=False).read("$5", "en").spoken == "$5"
    assert rules_for("en-GB") is rules_for("en") is not None


def test_a_malformed_language_is_refused_naming_it() -> None:
    with pytest.raises(ValueError, match="not a language tag"):
        rules_for("english!")


def test_a_reading_that_fails_is_said_as_written_and_counted(monkeypatch: pytest.MonkeyPatch) -> None:
    front = TextFront()
    rules = rules_for("en")

    def broken(words: list[str], fixed: object = None) -> list[str]:
        raise RuntimeError("a bug in a rule")

    monkeypatch.setattr(rules, "read_words", broken)
    said = front.read("It costs $5.", "en")
    assert said == Said.as_written("It costs $5.")
    assert front.fallbacks == 1


@pytest.mark.parametrize(("left", "right", "joined"), [
    ("5", "km", True), ("10:30", "am", True), ("$5", "million", True), ("Dr.", "Smith", True), ("May", "5,", True),
    ("USD", "5", True), ("(415)", "555-0100", True), ("5", "people", False), ("Hello", "world", False),
    ("costs", "$5", False),
])
def test_words_read_together_are_known_to_the_segmenter(left: str, right: str, joined: bool) -> None:
    assert TextFront.joins(left, right) is joined


@pytest.mark.parametrize(("last", "open_"), [("$", False), ("$3", True), ("5", True), ("Dr.", True), ("May", True),
                                             ("hello", False), ("10:30", True), ("USD", True)])
def test_a_last_word_that_may_join_what_comes_next_is_known(last: str, open_: bool) -> None:
    assert TextFront.may_continue(last) is open_
