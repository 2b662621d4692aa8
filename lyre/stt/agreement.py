"""LocalAgreement-2: partial transcripts that are never retracted.

Each partial pass re-transcribes the utterance so far. A word is committed
(sent as a delta) only once two successive hypotheses agree on it and on every
word before it; committed words are never taken back, even if a later pass
changes its mind. The final pass of the utterance then supplies the rest.
"""

from __future__ import annotations

import re
from difflib import SequenceMatcher

__all__ = ["LocalAgreement", "fold", "words"]

_FOLD = re.compile(r"[^\w']+")


def words(text: str) -> list[str]:
    """``text`` split into words, each keeping its punctuation (as Whisper writes it)."""
    return text.split()


def fold(word: str) -> str:
    """A word as agreement compares it: lower case, without punctuation."""
    return _FOLD.sub("", word).lower()


def _same(a: str, b: str) -> bool:
    """Words agree when they match ignoring case and punctuation ("Hello," and "hello")."""
    return fold(a) == fold(b)


class LocalAgreement:
    """Commits the longest prefix two successive hypotheses share, beyond what is committed."""

    def __init__(self) -> None:
        self.committed: list[str] = []
        self._previous: list[str] = []

    def update(self, hypothesis: str) -> list[str]:
        """Take the next partial hypothesis; return the words newly committed (often none)."""
        current = words(hypothesis)
        n = len(self.committed)
        # Both hypotheses must still start with what was committed, or they say nothing new.
        if not (self._extends_committed(current) and self._extends_committed(self._previous)):
            self._previous = current
            return []
        agreed = n
        while (agreed < len(current) and agreed < len(self._previous)
               and _same(current[agreed], self._previous[agreed])):
            agreed += 1
        new = current[n:agreed]
        self.committed.extend(new)
        self._previous = current
        return new

    def _extends_committed(self, hypothesis: list[str]) -> bool:
        n = len(self.committed)
        return len(hypothesis) >= n and all(_same(a, b) for a, b in zip(self.committed, hypothesis))

    def remainder(self, final: str) -> str:
        """What the final text adds after the committed words, for the last delta.

        Committed words are never retracted. If the final pass disagrees with
        them, it is lined up against them word by word (ignoring case and
        punctuation) and the remainder starts after the final's counterpart of
        the last committed word, so a word is neither repeated nor skipped where
        the two still agree ("... a router problem with my connection," then a
        final "... him out a problem with my connection, it keeps" adds "it keeps").
        """
        rest = words(final)
        if not self.committed:
            return " ".join(rest)
        committed = [fold(w) for w in self.committed]
        matcher = SequenceMatcher(None, committed, [fold(w) for w in rest], autojunk=False)
        blocks = [b for b in matcher.get_matching_blocks() if b.size]
        if not blocks:
            start = len(self.committed)
        else:  # after the last agreeing run, skip as many words as committed words follow it
            last = blocks[-1]
            start = last.b + last.size + (len(committed) - last.a - last.size)
        return " ".join(rest[start:])
