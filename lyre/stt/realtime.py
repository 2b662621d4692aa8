"""A realtime transcription session: OpenAI's transcription events in, transcription events out.

    session = RealtimeSession(transcriber, emit)     # emits transcription_session.created (GA: session.created)
    await session.receive(text)                      # one client event, as JSON text
    await session.close()                            # when the socket closes: cancels its passes

No transport here: ``emit`` takes each server event (a dict) and must not
block; the caller sends them in order. Bad client events get an ``error``
event naming the problem, and the session carries on.

Client events: ``transcription_session.update`` (beta) and ``session.update``
(GA), answered by ``transcription_session.updated`` / ``session.updated``;
``input_audio_buffer.append`` (base64 pcm16 mono, 24 kHz, or 16 kHz or G.711
at 8 kHz if the session says so), ``input_audio_buffer.commit``, ``input_audio_buffer.clear``.

An utterance, with server VAD (the default)::

    input_audio_buffer.speech_started      audio_start_ms (the prefix padding included), item_id
    conversation.item.input_audio_transcription.delta      (while speaking: newly agreed words)
    input_audio_buffer.speech_stopped      audio_end_ms (the silence included)
    input_audio_buffer.committed           item_id, previous_item_id
    conversation.item.input_audio_transcription.delta      (what the final pass adds, if anything)
    conversation.item.input_audio_transcription.completed  transcript: the final pass's text

With ``turn_detection: null`` everything appended since the last commit is
the utterance, and the client's ``input_audio_buffer.commit`` ends it (a
commit also ends a detected utterance early). Switching detection on or off
leaves an open utterance open, for the next commit or detected end.

Deltas come from partial passes while the utterance is open, and from the
final pass, the REST endpoint's call with the same options but on the live
window (`STTConfig.live_window`: the utterance and 2 s, not 30 s, so the two
may differ by a word); they are never retracted, and
``completed.transcript`` is the final text even where it disagrees with
them (lyre.stt.utterances tells how). A final pass that cannot run (the
transcriber's queue full, the server stopping) is reported with
``conversation.item.input_audio_transcription.failed`` instead of completed.

The buffer is bounded by ``max_buffer_s``: with VAD, a longer utterance is
cut there (speech_stopped, committed, then speech_started for the rest); with
manual commits, an append that would pass it is refused with an error and
none of it is kept. With VAD, audio outside speech is kept only as far back
as the prefix padding needs.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from lyre.stt.audio import SAMPLE_RATE, AudioError
from lyre.stt.realtime_buffer import AudioBuffer
from lyre.stt.realtime_events import (
    RealtimeError,
    Shape,
    SessionSettings,
    act_on,
    append_audio,
    error_event,
    new_id,
    read_update,
    session_object,
)
from lyre.stt.realtime_input import AudioIn
from lyre.stt.transcriber import Transcriber
from lyre.stt.turns import TurnListener, Turns, audio_ms
from lyre.stt.utterances import Utterance, Utterances
from lyre.stt.vad import SpeechEvent, StreamingVAD, VADConfig

__all__ = ["RealtimeConfig", "RealtimeSession"]

_MIN_COMMIT_MS = 100  # OpenAI refuses to commit less ("buffer too small")


@dataclass(frozen=True)
class RealtimeConfig:
    """A session's limits."""

    max_buffer_s: float = 60.0  # audio held for one utterance
    max_message_bytes: int = 1 << 20  # one client event: about 20 s of 24 kHz pcm16 in base64
    partial_every_s: float = 0.5  # new audio that earns another partial pass
    pause_ms: int | None = None  # silence that marks a possible end of turn, for a listener; None: none

    def __post_init__(self) -> None:
        if not self.max_buffer_s > 0:
            raise ValueError(f"max_buffer_s must be > 0, got {self.max_buffer_s}")
        if self.max_message_bytes < 1024:
            raise ValueError(f"max_message_bytes must be >= 1024, got {self.max_message_bytes}")
        if not self.partial_every_s > 0:
            raise ValueError(f"partial_every_s must be > 0, got {self.partial_every_s}")


class RealtimeSession:
    """One client's transcription session; see the module docstring."""

    def __init__(self, transcriber: Transcriber, emit: Callable[[dict[str, Any]], None],
                 config: RealtimeConfig = RealtimeConfig(), listener: TurnListener | None = None,
                 shape: Shape = "beta") -> None:
        """``shape``: how the session opens: ``transcription_session.created`` (beta) or ``session.created``
        (GA; a GA client never sees a beta name)."""
        self.id = new_id("sess")
        self.config = config
        self.settings = SessionSettings()
        self._stt = transcriber
        self._emit = emit
        self._buffer = AudioBuffer()
        self._listener = listener
        # A possible end of turn after this much silence (with a listener); a change applies from the next utterance.
        self.pause_ms = config.pause_ms
        self._in = AudioIn(self.settings.rate, self._detector(self.settings.turn_detection))
        self._utterances = Utterances(transcriber, self.id, self._buffer, self._send, config.partial_every_s,
                                      None if listener is None else listener.transcribed)
        self._turns = Turns(self._buffer, self._utterances, self._send, int(config.max_buffer_s * SAMPLE_RATE),
                            listener)
        self._send("transcription_session.created" if shape == "beta" else "session.created",
                   session=session_object(self.settings, self.id, shape))

    @property
    def busy(self) -> bool:
        """A pass is running or queued: the client may be waiting for its events."""
        return self._utterances.busy

    async def receive(self, text: str) -> None:
        """Act on one client event (JSON text); a problem with it is sent back as an ``error`` event.

        Returns once the event is acted on (an append: its audio resampled and scored by the VAD)."""
        await act_on(text, self.config.max_message_bytes, self.handle, self.report)

    def handle(self, event: dict[str, Any]) -> Awaitable[None] | None:
        """Act on one parsed client event (RealtimeError if it cannot be): `receive` without the parsing."""
        handler = self._handlers.get(event["type"])
        if handler is None:
            raise RealtimeError(f"unknown event type {event['type']!r}; a transcription session takes "
                                f"{', '.join(self._handlers)}", "invalid_event", "type")
        return handler(self, event)

    def report(self, error: RealtimeError, client_event_id: str | None = None) -> None:
        """Send an ``error`` event (also for the transport's own problems: binary frames, idle)."""
        self._emit(error_event(error, client_event_id))

    async def close(self) -> None:
        """Cancel every pass still running or queued; nothing more is emitted."""
        self._emit = _drop
        self._in.close()
        await self._utterances.close()

    # -- client events --

    def _update(self, event: dict[str, Any]) -> None:
        settings, shape, refused = read_update(event, self.settings, self._stt.check_language)
        client_event_id = event.get("event_id") if isinstance(event.get("event_id"), str) else None
        for error in refused:  # named one by one; the rest of the update applies
            self.report(error, client_event_id)
        if settings.rate != self.settings.rate:
            # Audio already appended stays (it is 16 kHz by now); the resampler's tail goes with it.
            self._flush_resampler(settings.rate)
        old, self.settings = self.settings, settings
        if settings.turn_detection != old.turn_detection:
            self._in.vad = self._detector(settings.turn_detection)
        name = "transcription_session.updated" if shape == "beta" else "session.updated"
        self._send(name, session=session_object(settings, self.id, shape))

    async def push(self, pcm: bytes) -> None:
        """Audio that came as media, not as an event (a WebRTC track, a phone stream): pcm16 mono at the
        session's input rate, taken as an ``input_audio_buffer.append`` of it (RealtimeError if refused)."""
        if self._in.vad is None:  # with manual commits only the client can empty the buffer
            seconds = (self._buffer.size + len(pcm) // 2 * SAMPLE_RATE // self.settings.rate) / SAMPLE_RATE
            if seconds > self.config.max_buffer_s:
                raise RealtimeError(
                    f"input audio buffer would hold {seconds:.1f} s, over the limit of "
                    f"{self.config.max_buffer_s:g} s; this append was dropped: commit or clear the buffer",
                    "input_audio_buffer_full", "audio")
        try:
            self._take(*await self._in.push(pcm))
        except AudioError as exc:
            raise RealtimeError(f"audio: {exc}", "invalid_audio", "audio") from None

    async def _append(self, event: dict[str, Any]) -> None:
        await self.push(self.settings.pcm(append_audio(event)))

    def _commit(self, event: dict[str, Any]) -> None:
        self._flush_resampler(self.settings.rate)  # the client ended the audio here: the resampler's tail too
        item = self._utterances.open
        start = item.start if item is not None else self._buffer.start
        ms = (self._buffer.end - start) * 1000 / SAMPLE_RATE
        if ms < _MIN_COMMIT_MS:
            raise RealtimeError(f"Error committing input audio buffer: buffer too small. Expected at least "
                                f"{_MIN_COMMIT_MS}ms of audio, but buffer only has {ms:.2f}ms of audio.",
                                "input_audio_buffer_commit_empty")
        if item is None:
            self._utterances.begin(start)
        elif self._in.vad is not None:
            self._send("input_audio_buffer.speech_stopped", audio_end_ms=audio_ms(self._buffer.end), item_id=item.id)
        self._turns.drop_early()  # audio may have come after the pause: the pass must hear it
        self._utterances.commit(self._buffer.end, self.settings.options())
        self._in.vad = self._detector(self.settings.turn_detection)  # what follows is a new utterance

    def _clear(self, event: dict[str, Any]) -> None:
        self._turns.drop_early()
        self._utterances.discard()
        self._in.restart(self.settings.rate)  # the resampler's tail is cleared audio too
        self._buffer.drop_before(self._buffer.end)
        self._in.vad = self._detector(self.settings.turn_detection)
        self._send("input_audio_buffer.cleared")

    _handlers: ClassVar[dict[str, Callable[[RealtimeSession, dict[str, Any]], Awaitable[None] | None]]] = {
        "transcription_session.update": _update,
        "session.update": _update,
        "input_audio_buffer.append": _append,
        "input_audio_buffer.commit": _commit,
        "input_audio_buffer.clear": _clear,
    }

    # -- audio and turns --

    def position_ms(self) -> int:
        """Where the audio heard so far ends, in the events' milliseconds."""
        return audio_ms(self._buffer.end)

    def utterance_audio(self) -> np.ndarray | None:
        """The open utterance's audio so far (16 kHz float32), for an end-of-turn model; None if none is open."""
        if (item := self._utterances.open) is None:
            return None
        return self._buffer.read(item.start, self._buffer.end)

    def paused_item(self) -> Utterance | None:
        """The open utterance while its VAD hears a pause (a possible end of turn), else None."""
        vad = self._in.vad
        return self._utterances.open if vad is not None and vad.paused else None

    def end_turn(self) -> bool:
        """End the open utterance here, as if the VAD had heard the silence out (a semantic end-of-turn
        model has confirmed it); False if none is open or detection is off."""
        if self._utterances.open is None or self._in.vad is None:
            return False
        self._turns.stop(self._buffer.end, self.settings.options())
        self._in.vad = self._detector(self.settings.turn_detection)
        return True

    def _detector(self, config: VADConfig | None) -> StreamingVAD | None:
        if config is None:
            return None
        return StreamingVAD(config, origin=self._buffer.end,
                            pause_ms=self.pause_ms if self._listener is not None else None)

    def _flush_resampler(self, rate: int) -> None:
        """Take what the resampler holds, and go on with a new one for ``rate``."""
        self._take(*self._in.flush())
        self._in.restart(rate)

    def _take(self, audio: np.ndarray, events: list[SpeechEvent]) -> None:
        """Add 16 kHz audio to the buffer and follow the VAD's events over it: cut, start partial passes."""
        if audio.size == 0:
            return
        self._buffer.append(audio)
        if (vad := self._in.vad) is None:
            if self._utterances.open is None:
                self._utterances.begin(self._buffer.start)
        else:
            self._turns.follow(events, self.settings.options())
            if self._utterances.open is None:
                self._buffer.drop_before(vad.earliest_start())
        self._utterances.listen(self.settings.language)

    def _send(self, kind: str, **fields: Any) -> None:
        self._emit({"type": kind, "event_id": new_id("event"), **fields})


def _drop(event: dict[str, Any]) -> None:
    """``emit`` once the session is closed."""
