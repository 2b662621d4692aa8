"""Token ids to text as they arrive: whole characters only, cut at the first stop string."""

from __future__ import annotations

from collections.abc import Sequence

from tokenizers import Tokenizer
from tokenizers.decoders import DecodeStream

__all__ = ["StopStrings", "TextStream"]


class StopStrings:
    """Cuts text at the first stop string, also one split across pieces.

    Text that could still be the start of a stop string is held back until the
    next piece shows whether it is; everything else goes out at once.
    """

    def __init__(self, stops: Sequence[str]) -> None:
        if any(not s for s in stops):
            raise ValueError("stop strings must not be empty")
        self.stops = tuple(stops)
        self.hit = False  # a stop string was found: nothing more comes out
        self._held = ""

    def feed(self, text: str) -> str:
        """The text safe to emit now: up to a stop string, or all but a possible stop string's start."""
        if self.hit:
            return ""
        buf = self._held + text
        found = [i for i in (buf.find(s) for s in self.stops) if i >= 0]
        if found:
            self.hit = True
            self._held = ""
            return buf[: min(found)]
        keep = self._partial(buf)
        self._held = buf[len(buf) - keep :]
        return buf[: len(buf) - keep]

    def flush(self) -> str:
        """What was held back, once no more text will come."""
        held, self._held = self._held, ""
        return "" if self.hit else held

    def _partial(self, buf: str) -> int:
        """Length of the longest end of ``buf`` that begins some stop string."""
        longest = 0
        for stop in self.stops:
            for n in range(min(len(stop) - 1, len(buf)), longest, -1):
                if buf.endswith(stop[:n]):
                    longest = n
                    break
        return longest


class TextStream:
    """One request's generated ids -> text deltas.

    The tokenizer's own streaming decoder holds a token back while it ends
    inside a multi-byte character, so a delta never carries half of one.
    Special tokens (end of turn and the like) decode to nothing.
    """

    def __init__(self, tokenizer: Tokenizer, stops: Sequence[str] = ()) -> None:
        self._tokenizer = tokenizer
        self._decoder = DecodeStream(skip_special_tokens=True)
        self._stops = StopStrings(stops)

    @property
    def stopped(self) -> bool:
        """A stop string was reached: the request should end now."""
        return self._stops.hit

    def feed(self, token: int) -> str:
        """The text this token completes ("" while a character or a possible stop string is unfinished)."""
        piece = self._decoder.step(self._tokenizer, token)
        return self._stops.feed(piece) if piece else ""

    def finish(self) -> str:
        """The text held back for a stop string that never came (an unfinished character is dropped)."""
        return self._stops.flush()
