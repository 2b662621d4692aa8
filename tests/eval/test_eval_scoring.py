"""The gate's arithmetic by hand: Whisper's normaliser, WER per utterance and corpus, the paired bootstrap."""

from __future__ import annotations

import pytest

from lyre.eval import normalise, score, similarity_difference, summarise, wer_difference


def test_text_is_compared_as_whisper_s_english_normaliser_writes_it() -> None:
    assert normalise("Your table for four is booked for 7:30, Mr. Smith!") == \
        "your table for 4 is booked for 7 30 mister smith"
    assert normalise("I've got the colour.") == "i have got the color"
    # numbers and spellings that differ only in writing are no errors
    assert score("The train leaves in eleven minutes.", "the train leaves in 11 minutes").errors == 0


def test_an_utterance_s_errors_are_substitutions_deletions_and_insertions_over_its_words() -> None:
    words = score("turn off the lights", "turn of the light please")
    assert (words.errors, words.words) == (3, 4) and words.wer == 0.75  # of->off, light->lights, +please
    assert score("turn off the lights", "").wer == 1.0  # nothing heard: every word deleted
    with pytest.raises(ValueError, match="no words"):
        score("?!", "anything")


def test_the_corpus_wer_weighs_long_utterances_more_and_the_ones_over_half_are_counted_apart() -> None:
    eight = "please book a quiet table by the window"
    scored = [score(eight, eight),
              score("turn on the lights", "turn on the light"),  # 1 of 4
              score("hello there", "")]  # 2 of 2: over 50%
    summary = summarise(scored)
    assert summary.corpus_wer == pytest.approx(3 / 14)
    assert summary.wer_excluding_over_50 == pytest.approx(1 / 12) and summary.over_50 == 1
    assert summary.utterances == 3
    assert summarise([score("hello there", "")]).wer_excluding_over_50 is None


def test_the_paired_wer_difference_is_b_minus_a_with_a_seeded_interval_around_it() -> None:
    words = [10] * 20
    a = [1] * 20
    b = [3] * 10 + [1] * 10  # B makes 2 more errors in half the utterances: +0.1
    diff = wer_difference(a, b, words, resamples=2000, seed=3)
    assert diff.difference == pytest.approx(0.1) and diff.pairs == 20 and diff.resamples == 2000
    assert 0 < diff.low < 0.1 < diff.high < 0.2  # the interval holds the truth and excludes no difference
    assert wer_difference(a, b, words, resamples=2000, seed=3) == diff  # the same seed, the same interval
    same = wer_difference(a, a, words, resamples=500)
    assert (same.difference, same.low, same.high) == (0.0, 0.0, 0.0)
    with pytest.raises(ValueError, match="differ in length"):
        wer_difference(a, b[:-1], words)


def test_the_paired_similarity_difference_is_the_mean_of_per_utterance_differences() -> None:
    a = [0.80, 0.82, 0.78, 0.81, 0.79, 0.80]
    b = [x - 0.05 for x in a]
    diff = similarity_difference(a, b, resamples=1000)
    assert diff.difference == pytest.approx(-0.05) and diff.low == pytest.approx(-0.05)
    assert diff.high == pytest.approx(-0.05)  # every pair moved alike: no spread to resample
    noisy = similarity_difference(a, [0.9, 0.7, 0.85, 0.75, 0.8, 0.82], resamples=1000)
    assert noisy.low < noisy.difference < noisy.high
    assert noisy.as_json()["ci95"] == [noisy.low, noisy.high] and noisy.as_json()["resamples"] == 1000
