"""The streaming VAD on espeak-ng speech, silence and noise."""

from __future__ import annotations

import numpy as np
import pytest
from speech import SENTENCES, speak

from lyre.stt.vad import SpeechEvent, StreamingVAD, VADConfig

RATE = 16_000


def _silence(seconds: float) -> np.ndarray:
    return np.zeros(int(seconds * RATE), np.float32)


def _events(audio: np.ndarray, config: VADConfig | None = None, chunk: int = 320) -> list[SpeechEvent]:
    vad = StreamingVAD(config or VADConfig())
    return [event for i in range(0, audio.size, chunk) for event in vad.push(audio[i:i + chunk])]


def _speech_bounds(speech: np.ndarray) -> tuple[int, int]:
    """First and last sample louder than a whisper: where espeak-ng's voice really is."""
    loud = np.flatnonzero(np.abs(speech) > 0.02)
    return int(loud[0]), int(loud[-1])


def test_speech_between_silences_starts_once_and_stops_once() -> None:
    speech = speak(SENTENCES[4])
    audio = np.concatenate([_silence(1.0), speech, _silence(1.5)])
    events = _events(audio)
    assert [e.kind for e in events] == ["speech_started", "speech_stopped"]
    first, last = (RATE + s for s in _speech_bounds(speech))
    started, stopped = events[0].sample, events[1].sample
    # The start is the onset less the 300 ms prefix (one 32 ms window of slack each way).
    assert first - 300 * 16 - 1024 <= started <= first - 300 * 16 + 1024
    # The stop comes at the end of 500 ms of silence after the last word.
    assert last + 500 * 16 <= stopped <= last + 500 * 16 + 300 * 16
    assert events[0].ms == started // 16


def test_chunk_size_does_not_change_the_events() -> None:
    audio = np.concatenate([_silence(0.4), speak(SENTENCES[6]), _silence(1.0)])
    whole = StreamingVAD(VADConfig()).push(audio)
    assert whole == _events(audio, chunk=160) == _events(audio, chunk=1931)


def test_silence_and_noise_are_not_speech() -> None:
    rng = np.random.default_rng(0)
    noise = (rng.standard_normal(3 * RATE) * 0.05).astype(np.float32)
    hum = (0.1 * np.sin(2 * np.pi * 60 * np.arange(2 * RATE) / RATE)).astype(np.float32)
    assert _events(np.concatenate([_silence(2.0), noise, hum])) == []


def test_a_short_pause_is_kept_and_a_long_one_splits() -> None:
    words = speak(SENTENCES[6])
    audio = np.concatenate([_silence(0.5), words, _silence(0.8), words, _silence(1.5)])
    kinds = [e.kind for e in _events(audio)]
    assert kinds == ["speech_started", "speech_stopped"] * 2
    # A pause shorter than silence_duration_ms does not end the utterance.
    assert [e.kind for e in _events(audio, VADConfig(silence_duration_ms=1200))] == ["speech_started",
                                                                                      "speech_stopped"]


def test_a_pause_is_a_possible_end_that_speech_takes_back() -> None:
    words = speak(SENTENCES[6])
    audio = np.concatenate([_silence(0.5), words, _silence(0.8), words, _silence(1.5)])
    vad = StreamingVAD(VADConfig(silence_duration_ms=1200), pause_ms=200)
    events = [event for i in range(0, audio.size, 320) for event in vad.push(audio[i:i + 320])]
    assert [e.kind for e in events] == ["speech_started", "speech_paused", "speech_resumed", "speech_paused",
                                        "speech_stopped"]
    _, last = _speech_bounds(words)
    # A pause is placed where its silence began: after the last word, before the stop.
    assert RATE // 2 + last <= events[1].sample <= RATE // 2 + last + 300 * 16
    assert events[3].sample < events[4].sample - 1000 * 16
    # No pause can come first when it is not shorter than the stop's silence.
    plain = StreamingVAD(VADConfig(silence_duration_ms=500), pause_ms=500)
    assert [e.kind for e in plain.push(audio)] == ["speech_started", "speech_stopped"] * 2


def test_prefix_padding_stops_at_the_stream_start_and_origin_offsets_positions() -> None:
    audio = np.concatenate([speak(SENTENCES[6]), _silence(1.0)])
    vad = StreamingVAD(VADConfig(prefix_padding_ms=1000), origin=48_000)
    events = vad.push(audio)
    assert events[0] == SpeechEvent("speech_started", 48_000)
    assert events[1].sample > 48_000 + 16_000


def test_a_higher_threshold_hears_less() -> None:
    # Speech under loud noise scores about 0.6..0.95 a window: speech at 0.5, not at 0.99.
    rng = np.random.default_rng(0)
    audio = np.concatenate([_silence(0.5), speak(SENTENCES[6]), _silence(1.0)])
    noisy = audio + (rng.standard_normal(audio.size) * 0.1).astype(np.float32)
    assert [e.kind for e in _events(noisy)][:1] == ["speech_started"]
    assert _events(noisy, VADConfig(threshold=0.99)) == []


@pytest.mark.parametrize("fields, message", [
    ({"threshold": 1.5}, "threshold must be a number from 0.0 to 1.0"),
    ({"threshold": True}, "threshold"),
    ({"threshold": "high"}, "threshold must be a number"),
    ({"prefix_padding_ms": -1}, "prefix_padding_ms must be a whole number"),
    ({"silence_duration_ms": 200.5}, "silence_duration_ms must be a whole number"),
    ({"silence_duration_ms": 60_000}, "from 0 to 10000"),
])
def test_config_is_validated(fields: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        VADConfig(**fields)
