"""Turn speculation: a reply started at a possible end of turn, on the words so far, and held.

    speculator = Speculator(think, spawn)
    speculator.start(item, sample, early)       # a short silence: think on the best text there is
    speculator.resumed(item)                    # the person speaks again: throw the reply away
    reply = speculator.confirmed(item, heard)   # the turn's end: the held reply, if it heard the same words

A short silence (``pause_ms``) marks a possible end of turn. The utterance's
final pass starts at once; once there is text, a reply starts held (nothing
sent, lyre.agent.reply). If the person speaks again, the reply is cancelled and
its engine slots freed; at the confirmed end of turn the final transcript is
compared with the words the reply started on: the same words release it at
once, other words throw it away for a reply on the final transcript.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from lyre.agent.reply import Reply
from lyre.stt.utterances import Utterance
from lyre.stt.whisper import Transcript

__all__ = ["Speculator", "Think", "same_words"]

_WORDS = re.compile(r"[^\W_]+(?:'[^\W_]+)*")  # letters and digits of any script
_FRESH_SAMPLES = 1_600  # a partial that stopped 100 ms short of the silence has heard the last word

Think = Callable[[dict[str, Any], float], Reply]  # the user's item so far, its possible end -> a held reply


@dataclass
class _Speculation:
    """A reply started at a possible end of turn, on the text of the utterance so far."""

    item: Utterance
    paused_at: float
    task: asyncio.Task[None] | None = None
    text: str = ""
    reply: Reply | None = None


class Speculator:
    """A session's one speculation at a time; see the module docstring."""

    def __init__(self, think: Think, spawn: Callable[[Awaitable[None]], asyncio.Task[None]]) -> None:
        """``think``: starts a held reply; ``spawn``: runs a task the session cancels when it closes."""
        self.wasted = 0  # speculative replies thrown away
        self._think = think
        self._spawn = spawn
        self._current: _Speculation | None = None

    def start(self, item: Utterance, sample: int, early: asyncio.Task[Transcript]) -> None:
        """A possible end of ``item`` at ``sample``; ``early``: the final pass started there."""
        self.drop()
        speculation = self._current = _Speculation(item, paused_at=time.perf_counter())
        speculation.task = self._spawn(self._speculate(speculation, sample, early))

    def resumed(self, item: Utterance) -> None:
        """The person speaks again in ``item``: what was started on its pause is wrong."""
        if self._current is not None and self._current.item is item:
            self.drop()

    def confirmed(self, item: Utterance, heard: str) -> Reply | None:
        """``item`` ended as ``heard``: the held reply to release if it started on the same words; else None
        (any speculation on it thrown away, one on a later utterance left alone)."""
        speculation = self._current
        if speculation is None or speculation.item is not item:
            return None
        self._current = None
        if speculation.reply is not None and same_words(speculation.text, heard):
            return speculation.reply
        self._throw_away(speculation)
        return None

    def drop(self) -> None:
        """Throw away the speculation, if any."""
        speculation, self._current = self._current, None
        if speculation is not None:
            self._throw_away(speculation)

    async def _speculate(self, speculation: _Speculation, sample: int, early: asyncio.Task[Transcript]) -> None:
        """Think on the best text there is: the last partial if it heard the speech out, else the early pass."""
        item = speculation.item
        if item.hypothesis.strip() and item.hypothesis_end >= sample - _FRESH_SAMPLES:
            text = item.hypothesis
        else:
            text = (await asyncio.shield(early)).text  # the commit awaits the same pass
        if self._current is not speculation or not text.strip():
            return
        speculation.text = text.strip()
        user = {"id": item.id, "type": "message", "role": "user", "text": speculation.text}
        speculation.reply = self._think(user, speculation.paused_at)

    def _throw_away(self, speculation: _Speculation) -> None:
        if speculation.task is not None:
            speculation.task.cancel()
        if speculation.reply is not None:
            self.wasted += 1
            speculation.reply.cancel()


def same_words(a: str, b: str) -> bool:
    """Whether two transcripts say the same, case and punctuation aside."""
    return _WORDS.findall(a.lower()) == _WORDS.findall(b.lower())
