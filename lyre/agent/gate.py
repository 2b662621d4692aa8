"""The sentence gate: a speculative reply's text, held from speech until its first sentences are written.

A reply started at a possible end of turn may be thrown away; until it has a
few sentences (``first_sentences``) its text costs nothing to drop, so it goes
to speech only then, or when the reply ends or is released.
"""

from __future__ import annotations

import re

__all__ = ["SentenceGate"]

_SENTENCE_END = re.compile(r"[.!?\u3002\uff01\uff1f]+[\"')\]]*\s")  # a mark, closers, then a space


class SentenceGate:
    """Holds a reply's text until ``first`` sentences are written (or it ends); then lets everything through."""

    def __init__(self, first: int) -> None:
        self._first = first
        self._held = ""

    def push(self, text: str) -> str:
        """The next text written; what of it may go to speech now (nothing while the gate is shut)."""
        if self._first <= 0:
            return text
        self._held += text
        if len(_SENTENCE_END.findall(self._held)) < self._first:
            return ""
        self._first = 0
        out, self._held = self._held, ""
        return out

    def open(self) -> str:
        """Let everything through from now on: the text held so far."""
        self._first = 0
        out, self._held = self._held, ""
        return out
