"""Text as it arrives, into sentence segments ready to speak.

A speech stream's text comes all at once (an HTTP request) or in pieces as a
language model writes it (a WebSocket context). `TextIntake` joins the pieces
verbatim, cuts complete segments as soon as they are complete (the rules of
`lyre.tts.segments`), speaks pending text that has no sentence end after a
pause in the text (holding back a last word that more text may join: "$" before "3.50", for at most
``unit_wait_s`` more), and gives up on a stream whose text stops coming. Text already read (SSML's blocks) and
pauses go in whole, between segments (`add`).
"""

from __future__ import annotations

import asyncio
import time
from collections import deque

from lyre.text.said import Pause, Said
from lyre.tts.segments import IncrementalSplitter
from lyre.tts.text import TextError

__all__ = ["IdleStream", "Item", "TextIntake"]

# Segments come out as written text (read when it is spoken), text already read, or silence.
Item = str | Said | Pause
# After a pause in the text, a last word that may join what comes next waits this much longer for it.
UNIT_WAIT_S = 2.0


class IdleStream(TextError):
    """No text came for the stream's idle limit while it had nothing left to say."""


class TextIntake:
    """Segments from pushed text; `next` waits for the next one (None: the text has ended)."""

    def __init__(self, max_chars: int, segment_chars: int, flush_after_s: float,
                 idle_timeout_s: float | None = None, min_chars: int = 0) -> None:
        """``min_chars``: a complete segment shorter than this waits to merge with the next sentence
        (``segment_chars`` for text that comes whole: the segments of `split_segments`)."""
        self.max_chars = max_chars
        self.segment_chars = segment_chars
        self.flush_after_s = flush_after_s
        self.idle_timeout_s = idle_timeout_s
        self.chars = 0
        self.first_text_at: float | None = None  # perf_counter() of the first push
        self.ended = False
        self._splitter = IncrementalSplitter(max_chars=segment_chars, min_chars=min_chars)
        self._ready: deque[Item] = deque()
        self._holding = False  # a pause in the text flushed all but a last word waiting for more
        self.warnings: list[str] = []  # what of an SSML document was not understood (read as its text)
        self.pause_ms = 0  # SSML's breaks passed by `ready_words` and `next_words`, silence not yet played
        self._unflushed = False  # text went into the splitter since its last flush
        self._last_text = time.monotonic()
        self._wake = asyncio.Event()

    def accept(self, chars: int) -> None:
        """``chars`` more characters of text come: TextError once the text has ended or the total is too long."""
        if self.ended:
            raise TextError("this stream's text has ended; start a new one")
        if (total := self.chars + chars) > self.max_chars:
            raise TextError(f"text is {total} characters, over the limit of {self.max_chars}")
        self.chars = total
        if self.first_text_at is None:
            self.first_text_at = time.perf_counter()

    def push(self, text: str) -> None:
        """Add text, joined to what came before exactly as given. TextError once the total is too long."""
        self.accept(len(text))
        self._ready.extend(self._splitter.push(text))
        self._unflushed = True
        self._holding = False
        self._last_text = time.monotonic()
        self._wake.set()

    def add(self, item: Said | Pause) -> None:
        """Text already read, or a pause: after every segment of the text pushed so far."""
        self.accept(len(item.written) if isinstance(item, Said) else 0)
        self._flush()
        self._ready.append(item)
        self._wake.set()

    def end(self) -> None:
        """No more text: what is pending is spoken as it is."""
        self.ended = True
        self._wake.set()

    def pending(self) -> list[Item]:
        """The segments and pauses complete and not yet taken, in order."""
        return list(self._ready)

    def ready(self) -> Item | None:
        """The next complete segment, without waiting (None: none yet)."""
        if self.ended and self._unflushed:
            self._flush()
        return self._ready.popleft() if self._ready else None

    def ready_words(self) -> str | Said | None:
        """`ready`, the pauses before the words added to ``pause_ms``."""
        while isinstance(item := self.ready(), Pause):
            self.pause_ms += item.ms
        return item

    async def next_words(self, idle_since: float) -> str | Said | None:
        """`next`, the pauses before the words added to ``pause_ms``."""
        while isinstance(item := await self.next(idle_since), Pause):
            self.pause_ms += item.ms
        return item

    async def next(self, idle_since: float) -> Item | None:
        """The next segment once there is one; None once the text has ended and all is taken.

        ``idle_since`` (time.monotonic()) is when the stream last had something
        to say; with no text for ``idle_timeout_s`` after both, IdleStream.
        """
        while (segment := self.ready()) is None:
            if self.ended:
                return None
            if self._unflushed:
                # Pending text with no sentence end: the writer may have stalled mid-sentence.
                deadline = self._last_text + self.flush_after_s + (UNIT_WAIT_S if self._holding else 0.0)
            elif self.idle_timeout_s is not None:
                deadline = max(self._last_text, idle_since) + self.idle_timeout_s
            else:
                deadline = None
            self._wake.clear()
            try:
                async with asyncio.timeout(None if deadline is None else max(0.0, deadline - time.monotonic())):
                    await self._wake.wait()
            except TimeoutError:
                if not self._unflushed:
                    raise IdleStream(f"idle for {self.idle_timeout_s:g} s") from None
                if self._holding:
                    self._flush()
                else:
                    self._ready.extend(self._splitter.settle())
                    self._holding = self._unflushed = self._splitter.held
        return segment

    def _flush(self) -> None:
        self._ready.extend(self._splitter.flush())
        self._unflushed = self._holding = False
