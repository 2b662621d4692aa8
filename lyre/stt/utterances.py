"""A live session's utterances and the Whisper passes over them: partial previews, then a final.

    utterances = Utterances(transcriber, session_id, buffer, send, partial_every_s=0.5)
    item = utterances.begin(start)          # speech started at stream position ``start``
    utterances.listen(language)             # after each append: a partial pass, if one is due
    item = utterances.commit(end, options)  # the utterance is the buffer's audio up to ``end``
    item = utterances.commit(end, options, early)  # ... with its final pass already started (a voice agent's)

While an utterance is open, a partial pass (greedy, on its audio so far) runs
whenever the last one has finished and at least ``partial_every_s`` of new
audio has come; the words two passes in a row agree on (LocalAgreement) go
out as ``delta`` events, never to be retracted. At the commit the partial in
flight is dropped and the final pass runs (``Transcriber.transcribe``, the
REST endpoint's call); what it adds after the words already sent goes out as
one more delta, then ``completed`` carries the final text whole, even where
it disagrees with earlier deltas: clients take ``completed`` as the truth.

Each partial's whole text is kept on the utterance (``hypothesis``, with the
stream position its audio ended at), and ``on_final`` hears every final
pass's outcome: a voice agent starts thinking on the best text there is.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from lyre.stt.agreement import LocalAgreement
from lyre.stt.audio import SAMPLE_RATE
from lyre.stt.job_queue import TranscriberBusy, TranscriberClosed
from lyre.stt.realtime_buffer import AudioBuffer
from lyre.stt.realtime_events import new_id
from lyre.stt.transcriber import Transcriber
from lyre.stt.whisper import TranscribeOptions, Transcript

__all__ = ["Utterance", "Utterances"]

_TRANSCRIPTION = "conversation.item.input_audio_transcription"

log = logging.getLogger(__name__)


@dataclass(eq=False)
class Utterance:
    """One conversation item, from its first sample until its final pass is done."""

    start: int  # stream position of its first sample
    id: str = field(default_factory=lambda: new_id("item"))
    partial_at: int = field(init=False)  # stream position the last partial pass heard up to
    agreement: LocalAgreement = field(default_factory=LocalAgreement)
    spoken: bool = False  # a delta has gone out
    hypothesis: str = ""  # the last partial pass's whole text
    hypothesis_end: int = field(init=False)  # stream position that pass's audio ended at

    def __post_init__(self) -> None:
        self.partial_at = self.hypothesis_end = self.start


class Utterances:
    """The open utterance of one session, and the passes of every utterance; see the module docstring.

    ``send(type, **fields)`` emits one server event. ``session`` keys the
    transcriber's fair queue, so one session waits behind others by one job.
    ``on_final(item, transcript)`` is called after each final pass's events
    (``transcript`` None: it failed).
    """

    def __init__(self, transcriber: Transcriber, session: str, buffer: AudioBuffer,
                 send: Callable[..., None], partial_every_s: float,
                 on_final: Callable[[Utterance, Transcript | None], None] | None = None) -> None:
        self.open: Utterance | None = None
        self.previous_id: str | None = None  # the last committed utterance
        self._stt = transcriber
        self._session = session
        self._buffer = buffer
        self._send = send
        self._every = partial_every_s * SAMPLE_RATE
        self._language: str | None = None  # the partial passes'
        self._partial: asyncio.Task[None] | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._on_final = on_final

    @property
    def busy(self) -> bool:
        """A pass is running or queued: the client may be waiting for its events."""
        return bool(self._tasks)

    def begin(self, start: int) -> Utterance:
        self.open = Utterance(start)
        return self.open

    def listen(self, language: str | None) -> None:
        """New audio has come: start a partial pass on the open utterance, if one is due."""
        self._language = language
        item = self.open
        if item is None or self._partial is not None or self._buffer.end - item.partial_at < self._every:
            return
        item.partial_at = self._buffer.end
        self._partial = self._spawn(self._run_partial(item, self._buffer.read(item.start)))

    def commit(self, end: int, options: TranscribeOptions,
               early: Awaitable[Transcript] | None = None) -> Utterance:
        """Close the open utterance at ``end`` (dropping the buffer up to there) and start its final pass.

        ``early``: the final pass already running (`early_pass`), over the
        utterance up to a point where the audio after it was silence.
        """
        item = self.open
        assert item is not None
        audio = self._buffer.read(item.start, end)
        self._buffer.drop_before(end)
        self.discard()
        self._send("input_audio_buffer.committed", item_id=item.id, previous_item_id=self.previous_id)
        self.previous_id = item.id
        self._spawn(self._final(item, audio, options, early))
        return item

    def early_pass(self, end: int, options: TranscribeOptions) -> asyncio.Task[Transcript]:
        """The open utterance's final pass over its audio up to ``end``, started before it is committed."""
        item = self.open
        assert item is not None
        task = asyncio.ensure_future(self._stt.transcribe(self._buffer.read(item.start, end), options,
                                                          session=self._session))
        self._tasks.add(task)  # type: ignore[arg-type]  # cancelled with the rest on close
        task.add_done_callback(self._tasks.discard)  # type: ignore[arg-type]
        return task

    def discard(self) -> None:
        """Forget the open utterance, if any, and drop its partial pass."""
        self.open = None
        if self._partial is not None:
            self._partial.cancel()  # a queued pass is dropped; one already running is not waited for
            self._partial = None

    async def close(self) -> None:
        """Cancel every pass still running or queued."""
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def _run_partial(self, item: Utterance, audio: np.ndarray) -> None:
        text: str | None = None
        try:
            text = await self._stt.partial(audio, self._language, session=self._session)
        except (TranscriberBusy, TranscriberClosed):
            pass  # a partial is a preview: the final pass reports what is wrong
        except Exception:
            log.exception("partial transcription of %s failed", item.id)
        self._partial = None  # (cancelled, this task never gets here: discard has cleared it)
        if text is not None:
            item.hypothesis, item.hypothesis_end = text, item.start + audio.size
        if text is not None and self.open is item and (words := item.agreement.update(text)):
            self._delta(item, " ".join(words))
        self.listen(self._language)

    async def _final(self, item: Utterance, audio: np.ndarray, options: TranscribeOptions,
                     early: Awaitable[Transcript] | None) -> None:
        try:
            transcript = await (early or self._stt.transcribe(audio, options, session=self._session))
        except (TranscriberBusy, TranscriberClosed) as exc:
            self._failed(item, "server_busy" if isinstance(exc, TranscriberBusy) else "server_closing", str(exc))
            return
        except Exception as exc:
            log.exception("final transcription of %s failed", item.id)
            self._failed(item, "transcription_failed", f"transcription failed: {exc}")
            return
        if rest := item.agreement.remainder(transcript.text):
            self._delta(item, rest)
        self._send(f"{_TRANSCRIPTION}.completed", item_id=item.id, content_index=0, transcript=transcript.text,
                   usage={"type": "duration", "seconds": round(audio.size / SAMPLE_RATE, 3)})
        if self._on_final is not None:
            self._on_final(item, transcript)

    def _delta(self, item: Utterance, words: str) -> None:
        # Joined with a space before all but the first, the deltas read as one text.
        self._send(f"{_TRANSCRIPTION}.delta", item_id=item.id, content_index=0,
                   delta=f" {words}" if item.spoken else words)
        item.spoken = True

    def _failed(self, item: Utterance, code: str, message: str) -> None:
        self._send(f"{_TRANSCRIPTION}.failed", item_id=item.id, content_index=0,
                   error={"type": "server_error", "code": code, "message": message, "param": None})
        if self._on_final is not None:
            self._on_final(item, None)

    def _spawn(self, work: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        task = asyncio.create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task
