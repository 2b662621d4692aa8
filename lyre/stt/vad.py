"""Streaming voice activity detection: Silero VAD over live audio, with OpenAI's server_vad settings.

    vad = StreamingVAD(VADConfig(silence_duration_ms=500))
    for event in vad.push(audio):        # float32, 16 kHz, any chunk size
        print(event.kind, event.sample)  # "speech_started" at 4800, "speech_stopped" at 40960, ...

Silero (shipped with faster-whisper) scores each 32 ms window of 512 samples,
seeing the 64 samples before it and an LSTM state carried from window to
window; this keeps that state between pushes, so a stream cut into chunks of
any size gives the same events as the whole of it at once.

Speech starts on the first window scored at ``threshold`` or more, and the
event is placed ``prefix_padding_ms`` earlier, so the utterance keeps the
breath before the first word. It stops once ``silence_duration_ms`` of
windows have scored below ``threshold - 0.15`` (Silero's own hysteresis:
windows in between neither end speech nor restart its clock), and that event
is placed at the end of the silence, as OpenAI reports ``audio_end_ms``.

With ``pause_ms`` (a voice agent's first stage of turn detection), a shorter
run of silence first marks a possible end: ``speech_paused``, placed where the
silence began; speech before the stop then brings ``speech_resumed``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from faster_whisper.vad import SileroVADModel

from lyre.stt.audio import SAMPLE_RATE

__all__ = ["SpeechEvent", "StreamingVAD", "VADConfig"]

_WINDOW = 512  # samples Silero scores at once, at 16 kHz
_CONTEXT = 64  # samples of the previous window it sees with each one
_STATE = (1, 1, 128)  # the LSTM's h and c
_HYSTERESIS = 0.15  # how far below the threshold a window must fall to count as silence
_MAX_MS = 10_000


@dataclass(frozen=True)
class VADConfig:
    """OpenAI's ``server_vad`` turn detection settings, with its defaults."""

    threshold: float = 0.5  # speech probability that starts speech
    prefix_padding_ms: int = 300  # audio kept before the detected start
    silence_duration_ms: int = 500  # silence that ends speech
    # semantic_vad's eagerness (low, medium, high, auto), as the client set it; None: server_vad. The VAD
    # itself runs the same either way: the eagerness chose silence_duration_ms, and a voice agent's end-of-turn
    # model reads it too.
    eagerness: str | None = None

    def __post_init__(self) -> None:
        if (isinstance(self.threshold, bool) or not isinstance(self.threshold, (int, float))
                or not 0.0 <= self.threshold <= 1.0):
            raise ValueError(f"threshold must be a number from 0.0 to 1.0, got {self.threshold!r}")
        for name in ("prefix_padding_ms", "silence_duration_ms"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= _MAX_MS:
                raise ValueError(f"{name} must be a whole number of milliseconds from 0 to {_MAX_MS}, got {value!r}")

    @property
    def prefix_samples(self) -> int:
        return self.prefix_padding_ms * SAMPLE_RATE // 1000

    @property
    def silence_samples(self) -> int:
        return self.silence_duration_ms * SAMPLE_RATE // 1000


@dataclass(frozen=True)
class SpeechEvent:
    kind: Literal["speech_started", "speech_paused", "speech_resumed", "speech_stopped"]
    sample: int  # position in the stream, in 16 kHz samples since it began

    @property
    def ms(self) -> int:
        return self.sample * 1000 // SAMPLE_RATE


class StreamingVAD:
    """One audio stream's speech detector; see the module docstring.

    ``origin`` is the stream position of the first sample pushed, so a detector
    started part way through a session reports positions in the session's terms.
    The ONNX model is shared (its sessions are safe to run from many streams);
    the LSTM state and the window context are this stream's own.
    """

    def __init__(self, config: VADConfig, origin: int = 0, model: SileroVADModel | None = None,
                 pause_ms: int | None = None) -> None:
        self.config = config
        # A pause no shorter than the stop's silence would never come first: no pauses then.
        pause = None if pause_ms is None else pause_ms * SAMPLE_RATE // 1000
        self._pause_samples = pause if pause is not None and pause < config.silence_samples else None
        self.paused = False  # a speech_paused is out, with no speech since
        self.speaking = False
        self.position = origin  # stream position of the next window's first sample
        if model is None:
            from faster_whisper.vad import get_vad_model  # onnxruntime loads with the first session

            model = get_vad_model()
        self._model = model
        self._neg_threshold = max(config.threshold - _HYSTERESIS, 0.01)
        self._h = np.zeros(_STATE, np.float32)
        self._c = np.zeros(_STATE, np.float32)
        self._context = np.zeros(_CONTEXT, np.float32)
        self._pending = np.zeros(0, np.float32)  # the start of the next window
        self._silence_from: int | None = None  # where the current run of silence began
        self._floor = origin  # a start is never placed before this: the stream start or the last stop

    def earliest_start(self) -> int:
        """The earliest position a speech_started still to come can point at: audio before it is not needed."""
        return max(self._floor, self.position - self.config.prefix_samples)

    def push(self, audio: np.ndarray) -> list[SpeechEvent]:
        """Score the whole windows ``audio`` completes; the events they cause, in order."""
        audio = np.concatenate([self._pending, np.asarray(audio, np.float32)])
        whole = audio.size // _WINDOW * _WINDOW
        self._pending = audio[whole:]
        if whole == 0:
            return []
        windows = audio[:whole].reshape(-1, _WINDOW)  # (n, 512)
        contexts = np.concatenate([self._context[None], windows[:-1, -_CONTEXT:]])  # (n, 64)
        self._context = windows[-1, -_CONTEXT:].copy()
        # One run for all n windows: the model steps its LSTM through them in order.
        probs, self._h, self._c = self._model.session.run(
            None, {"input": np.concatenate([contexts, windows], axis=1), "h": self._h, "c": self._c})
        events = []
        for prob in np.asarray(probs).reshape(-1):
            if (event := self._step(float(prob))) is not None:
                events.append(event)
            self.position += _WINDOW
        return events

    def _step(self, prob: float) -> SpeechEvent | None:
        start, end = self.position, self.position + _WINDOW
        if not self.speaking:
            if prob < self.config.threshold:
                return None
            self.speaking = True
            self._silence_from = None
            return SpeechEvent("speech_started", max(start - self.config.prefix_samples, self._floor))
        if prob >= self.config.threshold:
            self._silence_from = None
            if self.paused:
                self.paused = False
                return SpeechEvent("speech_resumed", start)
        elif prob < self._neg_threshold:
            if self._silence_from is None:
                self._silence_from = start
            if end - self._silence_from >= self.config.silence_samples:
                self.speaking = self.paused = False
                self._floor = end
                return SpeechEvent("speech_stopped", end)
            if (self._pause_samples is not None and not self.paused
                    and end - self._silence_from >= self._pause_samples):
                self.paused = True
                return SpeechEvent("speech_paused", self._silence_from)
        return None
