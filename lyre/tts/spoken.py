"""What a speech stream has said: each segment's text and the output samples that speak it, told to whoever
times its words as soon as a segment's audio is all out."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from lyre.text.said import Said

__all__ = ["SpokenSegment", "SpokenSegments"]


@dataclass(frozen=True)
class SpokenSegment:
    """One segment once all its audio is out: output samples [start, end) of the stream speak ``text``
    (the segment's text as the pipeline cleaned it, as written); ``said``: what its words say, as the model was
    given them (None: said as written); ``whole``: False for the one still coming out (``end``: so far)."""

    text: str
    start: int
    end: int
    said: Said | None = None
    whole: bool = True


class SpokenSegments:
    """One stream's segments by their output samples: each started one's text, the one whose audio is coming
    out now, and those whose audio is all out (``spoken``, in order)."""

    def __init__(self) -> None:
        self.spoken: list[SpokenSegment] = []
        self._texts: list[Said] = []  # each started segment's text
        self._speaking: tuple[int, int] | None = None  # (index, first sample) of the segment coming out now
        self._on_spoken: list[Callable[[SpokenSegment], None]] = []

    def started(self, said: Said) -> None:
        """The next segment, ``said``, has been submitted."""
        self._texts.append(said)

    def speaking(self, index: int, first: int) -> None:
        """Segment ``index``'s audio comes out from output sample ``first`` on."""
        self._speaking = (index, first)

    def ended(self, samples: int) -> None:
        """The segment coming out is all out at ``samples``: it is spoken, and the callbacks hear of it."""
        assert self._speaking is not None
        index, first = self._speaking
        self.spoken.append(ended := self._segment(index, first, samples))
        self._speaking = None
        for callback in self._on_spoken:
            callback(ended)

    def on_spoken(self, callback: Callable[[SpokenSegment], None]) -> None:
        """Call ``callback`` with each segment as `ended` says it is spoken."""
        self._on_spoken.append(callback)

    def so_far(self, samples: int) -> list[SpokenSegment]:
        """`spoken`, then the segment coming out, if any of it is out by ``samples`` (its ``end``: ``samples``)."""
        if self._speaking is None or samples <= self._speaking[1]:
            return list(self.spoken)
        index, first = self._speaking
        return [*self.spoken, self._segment(index, first, samples, whole=False)]

    def _segment(self, index: int, first: int, end: int, whole: bool = True) -> SpokenSegment:
        said = self._texts[index]
        return SpokenSegment(said.written, first, end, said if said.changed else None, whole)
