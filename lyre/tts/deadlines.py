"""When a speech stream's audio is due, read off its listener's playback clock: the pace and deadlines the engine
schedules its requests on, and when the codec must have decoded each stream's frames."""

from __future__ import annotations

import time

from lyre import orpheus
from lyre.engine import Playback, RequestStream
from lyre.orpheus import FRAME_SECONDS, FRAME_TOKENS
from lyre.tts.clock import PlaybackClock
from lyre.tts.context import PipelineContext
from lyre.tts.pacing import Pacer, Rates

__all__ = ["BATCH_GRACE_S", "GenerationPace", "ListenerDeadlines"]

# Frames of a request nobody plays as it streams (a whole file) are due this long after they are queued:
# behind every stream about to run dry, never starved by them.
BATCH_GRACE_S = 1.0


class ListenerDeadlines:
    """One stream's deadlines. A streamed one (someone plays it as it comes) runs at the listener's pace
    (``pace``: seconds of playback per token); any other has none, and the engine fits it in."""

    def __init__(self, context: PipelineContext, clock: PlaybackClock, streamed: bool) -> None:
        self.streamed = streamed
        self.pace = clock.seconds_per_token() if streamed else None
        self._ctx = context
        self._clock = clock

    def playback(self, deadline: float | None) -> Playback | None:
        """The engine's view of this listener: its pace, and the tokens the stream may hold undecoded or
        unheard (frames gathered for one decode, and the codec's lookahead) before any of them can play."""
        if self.pace is None:
            return None
        held_frames = Pacer(self._ctx.config.pacing).held_frames(self._ctx.codec.lookahead)
        return Playback(self.pace, lag_s=held_frames * FRAME_TOKENS * self.pace, deadline=deadline)

    def rates(self, generation: GenerationPace) -> Rates | None:
        """The rates this stream paces itself by (lyre.tts.pacing): the codec's measured cost on this device,
        and this segment's measured generation (the engine's recent step until it has made frames). None for a
        stream nobody plays as it comes."""
        if not self.streamed:
            return None
        generate_s = generation.seconds_per_frame
        if generate_s is None:
            stats = self._ctx.engine.stats()
            step_s = stats.recent_step_seconds or (stats.step_seconds / stats.steps if stats.steps else 0.0)
            generate_s = FRAME_TOKENS * step_s
        codec = self._ctx.codec
        return Rates(play_s=FRAME_SECONDS / self._clock.rate, generate_s=generate_s,
                     decode_s=codec.recent_seconds_per_frame * self.sharing(), wait_s=codec.recent_wait_s)

    def sharing(self) -> int:
        """The streams whose frames share the codec's calls with this one's, as far as they slow them: every
        live listener where a call's time grows with the frames in it (a CPU's: lyre.codec.service), so that a
        frame of this one waits for about one of each other's; 1 where a call costs the same for one stream or
        many (a GPU's), or for this listener alone."""
        return max(1, len(self._ctx.listeners)) if self._ctx.codec.serial else 1

    def decode_due(self) -> float | None:
        """When frames queued now must be decoded (None: first come, first decoded)."""
        if not self._ctx.on_deadlines:
            return None
        if not self.streamed:
            return time.monotonic() + BATCH_GRACE_S
        return self._clock.runs_dry_at() or time.monotonic()  # before playback starts, first audio is due now

    def start_playback(self, at: float, trimmed_samples: int, live: list[RequestStream]) -> None:
        """The listener starts at ``at``, ``trimmed_samples`` of silence cut before its first chunk: give the
        live engine requests (oldest first) their deadlines, each after the one before."""
        if self.pace is None:
            return
        skipped = round(trimmed_samples / orpheus.SAMPLES_PER_FRAME * FRAME_TOKENS)
        for stream in live:
            self._ctx.engine.start_playback(stream.request_id, at, skipped)
            at += max(0, len(stream.request.output_ids) - skipped) * self.pace
            skipped = 0


class GenerationPace:
    """One segment's generation as its stream sees it: wall seconds per frame after the first frames came
    (parked stretches included: a stream far ahead of its listener looks slower than its engine)."""

    def __init__(self) -> None:
        self._first_at: float | None = None
        self._last_at = 0.0
        self._frames = 0  # frames that came after the first batch of them

    def came(self, frames: int, at: float | None = None) -> None:
        """``frames`` more frames came at ``at`` (default now)."""
        if frames <= 0:
            return
        at = time.monotonic() if at is None else at
        if self._first_at is None:  # the clock starts at the first frames (after the prompt's prefill)
            self._first_at = at
            return
        self._frames += frames
        self._last_at = at

    @property
    def seconds_per_frame(self) -> float | None:
        """None until frames came after the first ones."""
        if self._first_at is None or self._frames == 0 or self._last_at <= self._first_at:
            return None
        return (self._last_at - self._first_at) / self._frames
