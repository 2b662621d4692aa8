"""Segments that ended on their token budget instead of end-of-speech: words may be missing, and nobody is left
to guess. Each is kept on its stream (for the transport to tell its client), counted by the pipeline (for
``lyre_segments_cut_total{reason}``) and logged with its request id."""

from __future__ import annotations

import logging
from dataclasses import dataclass

from lyre.tts.budget import speech_tokens

__all__ = ["REASONS", "WARM_UP", "CutCounts", "SegmentBudgets", "SegmentCut"]

log = logging.getLogger("lyre.tts")

# budget: lyre's own, from the segment's words (lyre.tts.budget); max_tokens: the client's cap per segment.
REASONS = ("budget", "max_tokens")
# The request id of a server's own warm-up: a few tokens on purpose, its cut neither counted nor logged.
WARM_UP = "warm-up"


@dataclass(frozen=True)
class SegmentCut:
    """One segment that ran to its token budget: its index in the stream, why, the tokens it had, its text."""

    segment: int
    reason: str
    max_tokens: int
    text: str

    def event(self) -> dict[str, object]:
        """What a client is told (the fields every transport sends)."""
        return {"segment": self.segment, "reason": self.reason, "max_tokens": self.max_tokens, "text": self.text}


class CutCounts:
    """A pipeline's cuts since it started, by reason."""

    def __init__(self) -> None:
        self._counts = dict.fromkeys(REASONS, 0)

    def add(self, cut: SegmentCut, request_id: str) -> None:
        if request_id == WARM_UP:
            return
        self._counts[cut.reason] += 1
        log.warning("request %s: segment %d ended on its %s of %d tokens before end-of-speech; its last words may "
                    "be missing: %r", request_id, cut.segment, "max_tokens" if cut.reason == "max_tokens"
                    else "budget", cut.max_tokens, cut.text[:80])

    def counts(self) -> dict[str, int]:
        return dict(self._counts)


class SegmentBudgets:
    """One stream's segments: the max_tokens each started with, and those that ran out of them (each counted in
    ``counts`` and logged as it happens)."""

    def __init__(self, limit: int, capped: bool, counts: CutCounts, request_id: str,
                 language: str | None = None) -> None:
        """``limit``: the stream's max_tokens; ``capped``: the client set it, as a cap on every segment;
        ``language``: the text's (a BCP-47 tag), whose speaking rate sets each segment's budget."""
        self.limit = limit
        self.capped = capped
        self.language = language
        self.segments: list[tuple[str, int]] = []  # each segment's written text and max_tokens, as started
        self.cuts: list[SegmentCut] = []
        self._counts = counts
        self._request_id = request_id

    def tokens(self, spoken: str, positions: int) -> int:
        """A segment's max_tokens: the client's cap, else what its ``spoken`` words need, within the
        ``positions`` its request has left after its prompt (and the stream's limit), at its language's rate."""
        return self.limit if self.capped else speech_tokens(spoken, min(self.limit, positions), self.language)

    def started(self, written: str, tokens: int) -> None:
        self.segments.append((written, tokens))

    def ran_out(self, index: int) -> None:
        """Segment ``index`` ended on its max_tokens, not end-of-speech."""
        text, tokens = self.segments[index]
        cut = SegmentCut(index, "max_tokens" if self.capped else "budget", tokens, text)
        self.cuts.append(cut)
        self._counts.add(cut, self._request_id)
