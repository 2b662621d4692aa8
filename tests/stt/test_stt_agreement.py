"""LocalAgreement-2: commit what two successive hypotheses agree on, never retract."""

from __future__ import annotations

import itertools

from hypothesis import given
from hypothesis import strategies as st

from lyre.stt import LocalAgreement


def _run(*hypotheses: str) -> tuple[LocalAgreement, list[list[str]]]:
    agreement = LocalAgreement()
    return agreement, [agreement.update(h) for h in hypotheses]


def test_the_first_hypothesis_commits_nothing() -> None:
    agreement, deltas = _run("I would like")
    assert deltas == [[]]
    assert agreement.committed == []


def test_commits_the_agreed_prefix_only() -> None:
    agreement, deltas = _run("I would like", "I would love to", "I would love to book a", "I would love to book the")
    assert deltas == [[], ["I", "would"], ["love", "to"], ["book"]]
    assert agreement.committed == ["I", "would", "love", "to", "book"]


def test_a_disagreement_early_blocks_everything_after_it() -> None:
    _, deltas = _run("Can you tell me", "Could you tell me")
    assert deltas == [[], []]


def test_never_retracts_when_a_later_hypothesis_changes_its_mind() -> None:
    agreement, deltas = _run("Please cancel my", "Please cancel my appointment",
                             "Please council mine", "Please council mine")
    assert deltas == [[], ["Please", "cancel", "my"], [], []]
    assert agreement.committed == ["Please", "cancel", "my"]
    # Once hypotheses return to the committed words, agreement resumes after them.
    assert agreement.update("Please cancel my appointment with") == []
    assert agreement.update("Please cancel my appointment with the dentist") == ["appointment", "with"]


def test_a_shorter_hypothesis_commits_nothing_and_keeps_the_committed() -> None:
    agreement, deltas = _run("Turn off the lights", "Turn off the lights in", "Turn off")
    assert deltas == [[], ["Turn", "off", "the", "lights"], []]
    assert agreement.committed == ["Turn", "off", "the", "lights"]


def test_matching_ignores_case_and_punctuation() -> None:
    agreement, deltas = _run("Yes, that works", "yes that works.", "YES! That works for me")
    # The words are committed as the later hypothesis writes them.
    assert deltas == [[], ["yes", "that", "works."], []]
    assert agreement.committed == ["yes", "that", "works."]


def test_apostrophes_count() -> None:
    _, deltas = _run("I'm calling", "Im calling")
    assert deltas == [[], []]


def test_remainder_is_what_the_final_adds() -> None:
    agreement, _ = _run("I would like", "I would like to")
    assert agreement.remainder("I would like to book a table.") == "to book a table."
    assert agreement.remainder("I would like") == ""


def test_remainder_never_retracts_a_disagreeing_final() -> None:
    agreement, _ = _run("Please cancel my", "Please cancel my")
    assert agreement.remainder("Please council my appointment.") == "appointment."


def test_remainder_lines_a_disagreeing_final_up_with_the_committed_words() -> None:
    agreement, _ = _run("a router problem with my connection,", "A router problem with my connection")
    assert agreement.committed == ["A", "router", "problem", "with", "my", "connection"]
    # Neither repeated ("... my connection, my connection, it") nor skipped ("... keeps").
    assert agreement.remainder("him out a problem with my connection, it keeps") == "it keeps"
    assert agreement.remainder("Oh, a router problem with my connection, it keeps") == "it keeps"


def test_remainder_before_any_commit_is_the_whole_final() -> None:
    assert LocalAgreement().remainder(" Thank you very much. ") == "Thank you very much."


# Few distinct words, so that hypotheses often agree, in several spellings.
_WORDS = st.sampled_from(["book", "Book", "book,", "a", "A.", "table", "for", "four", "dinner", "dinner?"])
_HYPOTHESES = st.lists(st.lists(_WORDS, max_size=8).map(" ".join), max_size=12)


def _fold(word: str) -> str:
    return word.strip(",.?").lower()


@given(_HYPOTHESES)
def test_committed_words_only_grow(hypotheses: list[str]) -> None:
    agreement = LocalAgreement()
    history: list[list[str]] = []
    for hypothesis in hypotheses:
        new = agreement.update(hypothesis)
        assert agreement.committed == [w for step in [*history, new] for w in step][:len(agreement.committed)]
        history.append(new)
    # Every earlier state of the committed words is a prefix of every later one.
    states = [[w for step in history[:i] for w in step] for i in range(len(history) + 1)]
    for earlier, later in itertools.pairwise(states):
        assert later[:len(earlier)] == earlier
    assert states[-1] == agreement.committed


@given(_HYPOTHESES)
def test_each_committed_word_was_in_two_successive_hypotheses(hypotheses: list[str]) -> None:
    agreement = LocalAgreement()
    previous: list[str] = []
    for hypothesis in hypotheses:
        current = hypothesis.split()
        start = len(agreement.committed)
        new = agreement.update(hypothesis)
        if new:
            # The hypothesis opens with everything committed, and the new words sit where both had them.
            assert [_fold(w) for w in current[:start]] == [_fold(w) for w in agreement.committed[:start]]
            assert new == current[start:start + len(new)]
            assert [_fold(w) for w in new] == [_fold(w) for w in previous[start:start + len(new)]]
        previous = current


@given(_HYPOTHESES, st.lists(_WORDS, max_size=10).map(" ".join))
def test_remainder_is_the_end_of_the_final(hypotheses: list[str], final: str) -> None:
    agreement = LocalAgreement()
    for hypothesis in hypotheses:
        agreement.update(hypothesis)
    said, rest = final.split(), agreement.remainder(final).split()
    assert rest == said[len(said) - len(rest):]
    n = len(agreement.committed)
    if [_fold(w) for w in said[:n]] == [_fold(w) for w in agreement.committed]:
        assert rest == said[n:]  # a final that agrees adds exactly what follows the committed words


def test_a_word_needs_both_hypotheses_to_open_with_what_was_committed() -> None:
    agreement, _ = _run("Please cancel my", "Please cancel my")
    # The previous pass heard "council": its "appointment with" does not count as agreement.
    assert agreement.update("Please council my appointment with") == []
    assert agreement.update("Please cancel my appointment with the") == []
    assert agreement.update("Please cancel my appointment with the doctor") == ["appointment", "with", "the"]
