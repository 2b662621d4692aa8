"""How written words are said, for the aligner: numbers, money, ordinals, abbreviations, punctuation."""

from __future__ import annotations

import pytest

from lyre.text.verbalize import readings


@pytest.mark.parametrize(("word", "first"), [
    ("42", ("forty", "two")),
    ("120", ("one", "hundred", "twenty")),  # American: no "and"
    ("1,000", ("one", "thousand")),
    ("3rd", ("third",)),
    ("10%", ("ten", "percent")),
    ("2.5", ("two", "point", "five")),
    ("-5", ("minus", "five")),
    ("$1", ("one", "dollar")),
    ("$4.50", ("four", "dollars", "and", "fifty", "cents")),
    ("Dr.", ("doctor",)),
    ("(Dr.),", ("doctor",)),
    ("hello,", ("hello",)),
    ('"Quoted"', ("quoted",)),
    ("don't", ("don't",)),
    ("well-known", ("well", "known")),
    ("covid-19", ("covid", "nineteen")),
    ("<b>", ("b",)),
])
def test_a_word_is_said_first_as_people_most_often_say_it(word: str, first: tuple[str, ...]) -> None:
    assert readings(word)[0] == first


def test_where_it_may_be_said_two_ways_both_are_given() -> None:
    assert readings("1999")[:2] == [("nineteen", "ninety", "nine"), ("one", "thousand", "nine", "hundred", "ninety",
                                                                       "nine")]
    assert ("drive",) in readings("Dr.")
    assert ("four", "fifty") in readings("$4.50")
    assert readings("007")[0] == ("oh", "oh", "seven")


def test_punctuation_alone_says_nothing() -> None:
    assert readings("...") == [] and readings("-") == []
