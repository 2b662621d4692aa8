"""A live session's turns with server VAD: where utterances begin and end, and what a listener hears of them.

    turns = Turns(buffer, utterances, send, max_samples, listener)
    turns.follow(events, options)   # the VAD's events over audio just appended: begin, pause, end utterances
    turns.stop(sample, options)     # the open utterance ends at ``sample``: speech_stopped, then its commit
    turns.drop_early()              # audio may have come after a pause: the early pass must not stand for it

``speech_started`` begins an utterance (its prefix padding included) and
``speech_stopped`` commits it, its final pass running at once. An utterance
longer than the buffer's limit is cut there, and the rest, still speech,
begins the next one. A listener (a voice agent) is told of possible ends of
turn: see `TurnListener`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Protocol

from lyre.stt.audio import SAMPLE_RATE
from lyre.stt.realtime_buffer import AudioBuffer
from lyre.stt.utterances import Utterance, Utterances
from lyre.stt.vad import SpeechEvent
from lyre.stt.whisper import TranscribeOptions, Transcript

__all__ = ["TurnListener", "Turns", "audio_ms"]


class TurnListener(Protocol):
    """What a voice agent hears of a session's turns, beside its events.

    With server VAD and ``pause_ms`` set, a short silence in an utterance is a
    possible end of turn: its final pass starts at once (``early``, reused by
    the commit if no speech follows) and ``paused`` is called; speech before
    the confirmed end calls ``resumed`` (the early pass is cancelled).
    """

    def paused(self, item: Utterance, sample: int, early: asyncio.Task[Transcript]) -> None:
        """A silence began at stream position ``sample``; ``early`` is the final pass over the audio before it."""

    def resumed(self, item: Utterance) -> None: ...

    def transcribed(self, item: Utterance, transcript: Transcript | None) -> None:
        """An utterance's final pass is over (None: it failed), after its completed or failed event."""


class Turns:
    """The VAD's events over a session's buffer, as utterances begun and committed; see the module docstring."""

    def __init__(self, buffer: AudioBuffer, utterances: Utterances, send: Callable[..., None], max_samples: int,
                 listener: TurnListener | None = None) -> None:
        """``send(kind, **fields)`` sends a server event; ``max_samples``: the longest an utterance may be."""
        self._buffer = buffer
        self._utterances = utterances
        self._send = send
        self._max_samples = max_samples
        self._listener = listener
        self._early: asyncio.Task[Transcript] | None = None  # the open utterance's final pass, started at a pause

    def follow(self, events: list[SpeechEvent], options: TranscribeOptions) -> None:
        """Act on the VAD's ``events`` over the audio just appended; ``options``: the final passes'."""
        for event in events:
            self._cut(event.sample, options)
            if event.kind == "speech_started":
                self._started(event.sample)
            elif event.kind == "speech_paused":
                self._paused(event.sample, options)
            elif event.kind == "speech_resumed":
                self._resumed()
            else:
                self.stop(event.sample, options)
        self._cut(self._buffer.end, options)

    def stop(self, sample: int, options: TranscribeOptions) -> None:
        """The open utterance, if any, ends at stream position ``sample`` and is committed."""
        if (item := self._utterances.open) is not None:
            self._send("input_audio_buffer.speech_stopped", audio_end_ms=audio_ms(sample), item_id=item.id)
            early, self._early = self._early, None  # only silence since the pause: its pass is this one
            self._utterances.commit(sample, options, early)

    def drop_early(self) -> None:
        """Cancel the final pass started at a pause, if there is one."""
        if self._early is not None:
            self._early.cancel()
            self._early = None

    def _cut(self, until: int, options: TranscribeOptions) -> None:
        """End the open utterance at the buffer limit, as often as it passes it before ``until``."""
        while (item := self._utterances.open) is not None and until - item.start > self._max_samples:
            cut = item.start + self._max_samples
            self.stop(cut, options)
            self._started(cut)  # the VAD still hears speech: the rest is the next utterance

    def _started(self, sample: int) -> None:
        if self._utterances.open is not None:  # detection was switched on part way through an utterance
            return
        item = self._utterances.begin(max(sample, self._buffer.start))
        self._send("input_audio_buffer.speech_started", audio_start_ms=audio_ms(item.start), item_id=item.id)

    def _paused(self, sample: int, options: TranscribeOptions) -> None:
        if (item := self._utterances.open) is not None and self._listener is not None:
            self.drop_early()
            self._early = self._utterances.early_pass(sample, options)
            self._listener.paused(item, sample, self._early)

    def _resumed(self) -> None:
        self.drop_early()
        if (item := self._utterances.open) is not None and self._listener is not None:
            self._listener.resumed(item)


def audio_ms(sample: int) -> int:
    """A stream position in milliseconds, as the events give it."""
    return sample * 1000 // SAMPLE_RATE
